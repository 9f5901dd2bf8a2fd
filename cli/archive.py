"""`evalb archive merge|compact`: whole-archive operations, thin over evalb.merge and evalb.compact.

Sub-commands register on `app` (one function each); `evalb archive push` is added the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import new_app
from evalb import paths

app = new_app("Whole archives: merge several into one, compact one's small files.")

ArchiveOpt = Annotated[Path, typer.Option("--archive", help="Archive directory.")]


@app.command("compact")
def compact_cmd(
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="Seconds a covered small file is kept for readers still holding the old file list "
            "(deleted by a later compaction); 0 deletes at once (only when nothing reads the archive).",
        ),
    ] = 600.0,
    full: Annotated[
        bool, typer.Option("--full", help="Also fold every earlier batch into the new one.")
    ] = False,
) -> None:
    """Fold committed per-run files into large sorted Parquet files, atomically for readers."""
    from evalb import compact
    from evalb.archive import Archive
    from evalb.errors import UsageError

    if grace < 0:
        raise UsageError(f"--grace must be 0 or more seconds, got {grace}")
    report = compact.compact(Archive.open(archive), grace=grace, full=full)
    typer.echo(report.text(), nl=False)


@app.command("merge")
def merge_cmd(
    archives: Annotated[
        list[Path], typer.Argument(help="Source archives, then the destination (created if missing).")
    ],
    keep: Annotated[
        str | None,
        typer.Option(
            "--keep",
            help="When different runs fill one slot: keep the first archive's (in the order given, "
            "DEST first), the last one's, or both. Default: report them, write neither, exit 1.",
        ),
    ] = None,
) -> None:
    """Merge archives into DEST: union of runs, events, artifacts, judgements and scores (safe to rerun)."""
    from evalb.errors import UsageError
    from evalb.merge import merge

    if len(archives) < 2:
        raise UsageError("name one or more source archives and then the destination", hint="SRC... DEST")
    report = merge(archives[:-1], archives[-1], keep=keep)
    typer.echo(report.text(), nl=False)
    if not report.ok:
        n = len(report.differing) + sum(c.kept is None for c in report.conflicts)
        typer.echo(
            f"error: {n} conflicting slots or runs were not merged (choose with --keep first|last|both, "
            "or remove the unwanted runs from a source, then rerun)",
            err=True,
        )
        raise typer.Exit(1)
