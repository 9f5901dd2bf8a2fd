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
