"""`evalb-record`: record reps with the real client (run, grid), import transcripts, recover, migrate."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from evalb import paths
from evalb.archive import Archive
from evalb.cli_errors import new_app, run_cli
from evalb.errors import UsageError
from evalb.schema import RunRecord
from runner import grid as grid_mod
from runner.importer import import_transcript
from runner.record import RecordOptions
from runner.scripted.server import parse_fault

app = new_app("Record headless Claude Code sessions into an evalb archive (Parquet).")

ArchiveOpt = Annotated[Path, typer.Option("--archive", help="Archive directory (created if missing).")]
PluginOpt = Annotated[
    Path, typer.Option("--plugin-dir", help="Plugin under test (default: the reference os-adr plugin).")
]


FaultOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--inject-fault",
        hidden=True,
        help="TESTING: inject an API fault into every scripted rep, e.g. status:status=529,turn=0,times=2 "
        "(kinds: status, drop, stall; see docs/runner.md). Repeatable.",
    ),
]
RetriesOpt = Annotated[
    int,
    typer.Option(
        "--max-api-retries",
        help="API retries allowed per rep (the client's own, and the runner's early stop) before it "
        "counts as a client error.",
    ),
]


def _options(
    plugin_dir: Path,
    client: Path | None,
    timeout: float | None,
    confine: bool,
    workdir: Path | None,
    keep: bool,
    faults: list[str] | None = None,
    max_api_retries: int = 6,
) -> RecordOptions:
    if not plugin_dir.is_dir():
        raise UsageError(
            f"plugin directory {plugin_dir} does not exist", hint="pass --plugin-dir PATH to a plugin"
        )
    return RecordOptions(
        plugin_dir=plugin_dir,
        client=client or paths.client_binary(),
        timeout=timeout,
        confine=confine,
        workdir=workdir,
        keep_sandboxes=keep,
        max_api_retries=max_api_retries,
        faults=[parse_fault(f) for f in faults or []],
    )


def _scorer(archive: Path, results: Path | None) -> Callable[[RunRecord], str | None]:
    """Score each rep as it lands (for the progress line and --results) with the archive's checker."""
    from analysis.checker import score_archive
    from analysis.cli_score import tsv_rows

    lock = threading.Lock()

    def after(run: RunRecord) -> str | None:
        sp = score_archive(archive, variant=run.variant, model=run.model_alias)
        mine = sp.scores.filter(pl.col("run_id") == run.run_id)
        if mine.is_empty():
            return None
        if results is not None:
            with lock, open(results, "a", encoding="utf-8") as fh:
                fh.writelines(r + "\n" for r in tsv_rows(mine))
        return str(mine["verdict"][0])

    return after


def _record(
    scenarios: list[str],
    models: list[str],
    reps: int,
    jobs: int,
    archive: Path,
    options: RecordOptions,
    results: Path | None,
) -> None:
    arch = Archive(archive)
    slots = grid_mod.expand(scenarios, models, reps, grid_mod.plugin_hash_of(options.plugin_dir))
    # every refusal comes before the archive is created or touched
    grid_mod.preflight(slots, arch, options)
    if results is not None:
        try:
            results.parent.mkdir(parents=True, exist_ok=True)
            results.touch()
        except OSError as e:
            raise UsageError(f"cannot write --results {results}: {e.strerror}") from e
    report = grid_mod.run_grid(slots, arch, options, jobs=jobs, after_rep=_scorer(archive, results))
    outcomes: dict[str, int] = {}
    for r in report.recorded:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing new"
    extra = f"; {len(report.recovered)} interrupted reps recovered" if report.recovered else ""
    busy = f"; {report.busy} slots busy in another recorder" if report.busy else ""
    print(
        f"recorded {len(report.recorded)} reps ({summary}); {report.skipped} of {report.planned} slots "
        f"already recorded{busy}{extra} -> {archive}",
        file=sys.stderr,
    )


@app.command()
def run(
    scenario: Annotated[
        str, typer.Argument(help="Scenario variant (W1..R4, R4-nograph), comma list, or 'all'.")
    ],
    model: Annotated[
        str, typer.Argument(help="haiku, sonnet, a model id, or scripted:POLICY; comma list ok.")
    ],
    reps: Annotated[int, typer.Option(help="Repetitions per cell.")] = 1,
    jobs: Annotated[int, typer.Option(help="Reps run in parallel.")] = 1,
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    plugin_dir: PluginOpt = paths.REFERENCE_PLUGIN,
    results: Annotated[Path | None, typer.Option(help="Append scored TSV rows to this file.")] = None,
    client: Annotated[
        Path | None, typer.Option(help="Client binary (default: pinned; or $EVALB_CLAUDE_BIN).")
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Per-rep timeout in seconds.")] = None,
    confine: Annotated[
        bool, typer.Option(help="Confine each rep with bubblewrap (recorded per run).")
    ] = True,
    workdir: Annotated[
        Path | None, typer.Option(help="Where sandboxes are built (default: system temp).")
    ] = None,
    keep_sandboxes: Annotated[bool, typer.Option(help="Keep each rep's sandbox and HOME.")] = False,
    max_api_retries: RetriesOpt = 6,
    inject_fault: FaultOpt = None,
) -> None:
    """Record SCENARIO × MODEL × reps (the spec's bin/run); rerunning skips reps already recorded."""
    opts = _options(
        plugin_dir, client, timeout, confine, workdir, keep_sandboxes, inject_fault, max_api_retries
    )
    _record(scenario.split(","), model.split(","), reps, jobs, archive, opts, results)


@app.command()
def grid(
    grid_file: Annotated[Path, typer.Argument(help="YAML with scenarios:, models:, reps:.")],
    jobs: Annotated[int, typer.Option(help="Reps run in parallel.")] = 1,
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    plugin_dir: PluginOpt = paths.REFERENCE_PLUGIN,
    results: Annotated[Path | None, typer.Option(help="Append scored TSV rows to this file.")] = None,
    client: Annotated[Path | None, typer.Option(help="Client binary.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Per-rep timeout in seconds.")] = None,
    confine: Annotated[bool, typer.Option(help="Confine each rep with bubblewrap.")] = True,
) -> None:
    """Record a grid described in a YAML file; resumable like `run`."""
    spec = grid_mod.load_grid_file(grid_file)
    opts = _options(plugin_dir, client, timeout, confine, None, False)
    _record(spec.scenarios, spec.models, spec.reps, jobs, archive, opts, results)


@app.command("import")
def import_(
    transcript: Annotated[Path, typer.Argument(help="A stream-json transcript (.jsonl).")],
    scenario: Annotated[str, typer.Option(help="Scenario variant it was recorded for.")],
    model: Annotated[str, typer.Option(help="Model alias it was recorded with.")],
    sandbox: Annotated[
        Path | None,
        typer.Option(
            help="The sandbox it ran in, built with `evalb sandbox VARIANT DIR` (what changed is archived)."
        ),
    ] = None,
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    plugin_dir: Annotated[Path | None, typer.Option(help="The plugin it ran with, if known.")] = None,
) -> None:
    """Archive a transcript recorded elsewhere; malformed lines are kept raw and flagged."""
    run = import_transcript(
        transcript, Archive(archive), scenario=scenario, model=model, sandbox=sandbox, plugin_dir=plugin_dir
    )
    if run is None:
        print(f"already imported: {transcript}", file=sys.stderr)
        return
    flag = f", {run.n_malformed} malformed lines kept raw" if run.n_malformed else ""
    print(
        f"imported {transcript} as run {run.run_id} ({run.outcome}, {run.n_lines} lines{flag})",
        file=sys.stderr,
    )


@app.command()
def recover(archive: ArchiveOpt = paths.DEFAULT_ARCHIVE) -> None:
    """Commit reps left in flight by a recorder that was killed, as `interrupted`."""
    arch = Archive(archive)
    arch.ensure()
    ids = arch.recover_stale()
    print(f"recovered {len(ids)} interrupted reps", file=sys.stderr)


@app.command()
def migrate(archive: ArchiveOpt = paths.DEFAULT_ARCHIVE) -> None:
    """Bring an archive written by an older evalb up to this schema version."""
    arch = Archive(archive)
    before = arch.schema_version()
    arch.ensure()
    print(f"archive schema v{before} -> v{arch.schema_version()}", file=sys.stderr)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a closed terminal, a job scheduler) ends a grid the way Ctrl-C does
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    run_cli(app, "evalb-record")
