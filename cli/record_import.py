"""`evalb-record import`: what it is given turned into import items, and what it says on stderr.

One transcript: one line, as it always said (`imported X as run …` or `already imported: X`).
Many: one `failed: …` line per transcript that could not be imported, as it happens, then one
summary line. Exit 0 when every transcript was imported or already was; 1 when some failed (the
others are imported all the same); 2 for a usage mistake, before anything is written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from evalb.errors import UsageError
from runner.import_inputs import ImportItem, check_items, expand_sources, read_manifest
from runner.importer import ImportResult

#: Exit code when some transcripts could not be imported (each was named on stderr).
SOME_FAILED = 1


def import_items(
    transcripts: list[Path],
    scenario: str | None,
    model: str | None,
    sandbox: Path | None,
    manifest: Path | None,
) -> list[ImportItem]:
    """The items the command line asks for, checked (nothing is written yet)."""
    if manifest is not None:
        given = [n for n, v in (("TRANSCRIPTS", transcripts), ("--scenario", scenario), ("--model", model),
                                ("--sandbox", sandbox)) if v]  # fmt: skip
        if given:
            raise UsageError(
                f"--manifest and {given[0]} do not go together (the manifest names each transcript's "
                "scenario, model and sandbox)",
                hint=f"drop {given[0]}",
            )
        items = read_manifest(manifest)
    else:
        if not transcripts:
            raise UsageError(
                "no transcript given", hint="pass transcripts (files, globs, folders) or --manifest FILE"
            )
        missing = [n for n, v in (("--scenario", scenario), ("--model", model)) if not v]
        if missing:
            raise UsageError(f"{missing[0]} is required without --manifest", hint=f"pass {missing[0]}")
        assert scenario is not None and model is not None
        from evalb.scenarios import resolve_variant

        resolve_variant(scenario)  # an unknown scenario is said before a missing file
        files = expand_sources(transcripts)
        if sandbox is not None and len(files) > 1:
            raise UsageError(
                f"--sandbox belongs to one transcript, and {len(files)} are given",
                hint="give each transcript its sandbox in a --manifest",
            )
        items = [ImportItem(f, scenario, model, sandbox) for f in files]
    check_items(items)
    return items


def _single_line(res: ImportResult) -> str:
    t = res.item.transcript
    if res.error is not None:
        return f"failed: {res.error}"
    if res.run is None:
        return f"already imported: {t}"
    run = res.run
    flag = f", {run.n_malformed} malformed lines kept raw" if run.n_malformed else ""
    return f"imported {t} as run {run.run_id} ({run.outcome}, {run.n_lines} lines{flag})"


def run_import(
    transcripts: list[Path],
    scenario: str | None,
    model: str | None,
    sandbox: Path | None,
    manifest: Path | None,
    archive: Path,
    plugin_dir: Path | None,
) -> int:
    """Import what the command line names; the exit code (0, or SOME_FAILED)."""
    from evalb.archive import Archive
    from runner.importer import Importer

    items = import_items(transcripts, scenario, model, sandbox, manifest)
    single = len(items) == 1 and manifest is None

    def say(res: ImportResult) -> None:
        if single or res.error is not None:
            print(_single_line(res), file=sys.stderr, flush=True)

    start = time.perf_counter()
    results = Importer(Archive(archive), plugin_dir=plugin_dir).run(items, say)
    failed = sum(r.error is not None for r in results)
    if not single:
        new = [r.run for r in results if r.run is not None]
        skipped = sum(r.skipped for r in results)
        malformed = sum(1 for r in new if r.n_malformed)
        mb = sum(r.nbytes for r in results if r.error is None) / 1e6
        secs = time.perf_counter() - start
        print(
            f"imported {len(new)} new runs from {len(items)} transcripts ({mb:.1f} MB in {secs:.1f} s): "
            f"{skipped} already imported, {failed} failed, {malformed} with malformed lines kept raw",
            file=sys.stderr,
        )
    return SOME_FAILED if failed else 0
