"""`evalb-record`: record reps with the real client (run, grid), import transcripts, recover, migrate."""

from __future__ import annotations

import math
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.app import new_app, run_app
from evalb import paths
from evalb.errors import ArchiveError, BudgetError, HarnessError, PolicyError, UsageError

if TYPE_CHECKING:  # the libraries are imported where used: --help and refusals start fast
    from analysis.sequential_grid import UntilOptions
    from evalb.archive import Archive
    from evalb.schema import RunRecord
    from runner.grid import Arm
    from runner.limits import Limits
    from runner.record import RecordOptions

app = new_app("Record headless Claude Code sessions into an evalb archive (Parquet).")

ArchiveOpt = Annotated[Path, typer.Option("--archive", help="Archive directory (created if missing).")]
PluginOpt = Annotated[
    Path, typer.Option("--plugin-dir", help="Plugin under test (default: the reference os-adr plugin).")
]


ClientOpt = Annotated[
    Path | None, typer.Option(help="Client binary (default: pinned; or $EVALB_CLAUDE_BIN).")
]
TimeoutOpt = Annotated[float | None, typer.Option(help="Per-rep timeout in seconds.")]
ConfineOpt = Annotated[bool, typer.Option(help="Confine each rep with bubblewrap (recorded per run).")]
WorkdirOpt = Annotated[Path | None, typer.Option(help="Where sandboxes are built (default: system temp).")]
KeepOpt = Annotated[bool, typer.Option(help="Keep each rep's sandbox and HOME.")]
FaultOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--inject-fault",
        hidden=True,
        help="TESTING: inject an API fault into every scripted rep, e.g. status:status=529,turn=0,times=2 "
        "(kinds: status, drop, stall; see docs/runner.md). Repeatable.",
    ),
]
BreakerOpt = Annotated[
    int,
    typer.Option(
        "--breaker",
        help="Stop the grid after this many reps in a row fail the same way before reaching the model "
        "(e.g. no network, a bad key); 0 = never.",
    ),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="Record only shard I of N (0-based, e.g. 0/4): a stable hash of variant|model|rep picks "
        "each slot's shard, every arm of it alike. Default: JOB_COMPLETION_INDEX/JOB_COMPLETION_COUNT "
        "if set, else the whole grid.",
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
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option("--max-turns", help="Per rep: the client's own turn limit; a rep it stops is `turn_limit`."),
]
MaxRepUsdOpt = Annotated[
    float | None,
    typer.Option(
        "--max-budget-usd",
        help="Per rep: the client's own spending limit (USD); a rep it stops is `budget_limit`.",
    ),
]
BudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--budget-usd",
        help="Per grid (USD): start no more reps once the spend recorded plus the next rep's projected "
        "cost would pass it (running reps finish); exit 4. Scripted reps cost nothing.",
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Print the plan, its projected cost and time; record nothing."),
]


def _positive(option: str, value: float | None, example: str) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{option} {value:g} must be a number more than 0", hint=f"e.g. {option} {example}")


def refuse_inside_inputs(option: str, path: Path | None, plugin_dir: Path | None) -> None:
    """Refuse an output directory (--archive, --workdir) inside what reps read: the fixture
    (fixture/, with its project tree and the reference plugin), the scenarios, or the plugin under
    test. Writing there would change the measured inputs (and their hashes) under the grid."""
    if path is None:
        return
    where = path.resolve()
    inputs = [
        (paths.FIXTURE_PROJECT, "the fixture's project tree (fixture/project), which every sandbox copies"),
        (paths.FIXTURE_DIR, "the fixture (fixture/)"),
        (paths.SCENARIOS_DIR, "the scenarios directory"),
    ]
    if plugin_dir is not None:
        inputs.insert(0, (plugin_dir, f"the plugin under test ({plugin_dir})"))
    for root, what in inputs:
        if where.is_relative_to(root.resolve()):
            raise UsageError(
                f"{option} {path} is inside {what}", hint=f"choose a {option} directory outside it"
            )


MemOpt = Annotated[
    str, typer.Option("--mem-limit", help="Memory per rep (cgroup), e.g. 4G; 'none' for no cap.")
]
PidsOpt = Annotated[
    str, typer.Option("--pids-limit", help="Processes/threads per rep (cgroup); 'none' for no cap.")
]
TmpOpt = Annotated[str, typer.Option("--tmp-size", help="Size of a confined rep's private /tmp, e.g. 512M.")]
FsizeOpt = Annotated[
    str, typer.Option("--file-size-limit", help="Largest file a rep may write (RLIMIT_FSIZE), e.g. 1G.")
]
CredOpt = Annotated[
    str,
    typer.Option(
        "--credentials",
        help="proxy: the client holds a dummy key and a loopback proxy adds the real one; env: the "
        "real credential in the client's environment (readable by the agent).",
    ),
]


NetOpt = Annotated[
    str,
    typer.Option(
        "--network",
        help="open: the rep shares the host's network; api-only: no network in the rep but the model "
        "API through the credential proxy's unix socket (needs confinement and --credentials proxy).",
    ),
]


def _limits(mem: str, pids: str, tmp: str, fsize: str) -> Limits:
    from runner.limits import Limits, parse_size

    p = pids.strip().lower()
    if p in ("none", "0", "off", "unlimited"):
        n = None
    elif p.isdigit():
        n = int(p)
    else:
        raise UsageError(f"--pids-limit {pids!r} is not a number", hint="write e.g. 512, or none")
    if n is not None and n < 64:
        raise UsageError(
            f"--pids-limit {n} is too small for the client (~25 tasks by itself)", hint="give at least 64"
        )
    return Limits(
        memory=parse_size(mem, "--mem-limit"),
        pids=n,
        tmp=parse_size(tmp, "--tmp-size"),
        file_size=parse_size(fsize, "--file-size-limit"),
    )


def _options(
    plugin_dir: Path,
    client: Path | None,
    timeout: float | None,
    confine: bool,
    workdir: Path | None,
    keep: bool,
    faults: list[str] | None = None,
    max_api_retries: int = 6,
    limits: Limits | None = None,
    credentials: str = "proxy",
    network: str = "open",
    max_turns: int | None = None,
    max_budget_usd: float | None = None,
) -> RecordOptions:
    from runner.limits import Limits
    from runner.record import RecordOptions
    from runner.scripted.server import parse_fault

    if not plugin_dir.is_dir():
        raise UsageError(
            f"plugin directory {plugin_dir} does not exist", hint="pass --plugin-dir PATH to a plugin"
        )
    refuse_inside_inputs("--workdir", workdir, plugin_dir)
    if workdir is not None and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory", hint="create it first, or drop --workdir")
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout {timeout:g} must be more than 0 seconds", hint="e.g. --timeout 600")
    _positive("--max-turns", max_turns, "30")
    _positive("--max-budget-usd", max_budget_usd, "2.5")
    if max_api_retries < 0:
        raise UsageError(f"--max-api-retries {max_api_retries} must be 0 or more", hint="e.g. 6")
    if credentials not in ("proxy", "env"):
        raise UsageError(f"--credentials {credentials!r} is not a mode", hint="use proxy or env")
    if network not in ("open", "api-only"):
        raise UsageError(f"--network {network!r} is not a mode", hint="use open or api-only")
    if network == "api-only" and (not confine or credentials != "proxy"):
        raise UsageError(
            "--network api-only needs confinement and the credential proxy",
            hint="drop --no-confine and --credentials env, or use --network open",
        )
    return RecordOptions(
        limits=limits or Limits(),
        credentials=credentials,
        network=network,
        plugin_dir=plugin_dir,
        client=client or paths.client_binary(),
        timeout=timeout,
        confine=confine,
        workdir=workdir,
        keep_sandboxes=keep,
        max_api_retries=max_api_retries,
        faults=[parse_fault(f) for f in faults or []],
        max_turns=max_turns,
        max_budget_usd=max_budget_usd,
    )


def _scorer(archive: Path, results: Path | None) -> Callable[[RunRecord], str | None]:
    """Score each rep as it lands (for the progress line and --results) with the archive's checker."""
    import polars as pl

    from analysis.checker import score_runs
    from cli.score import tsv_rows

    lock = threading.Lock()

    def after(run: RunRecord) -> str | None:
        sp = score_runs(archive, [run.run_id])
        mine = sp.scores.filter(pl.col("run_id") == run.run_id)
        if mine.is_empty():
            return None
        if results is not None:
            with lock, open(results, "a", encoding="utf-8") as fh:
                fh.writelines(r + "\n" for r in tsv_rows(mine))
        return str(mine["verdict"][0])

    return after


def refuse_foreign_folder(archive: Path) -> None:
    """An --archive that exists must be an evalb archive or an empty directory: never record into
    (and scatter tables over) a folder that holds something else."""
    from evalb.archive import Archive

    if not archive.exists() or Archive(archive).exists():
        return
    if not archive.is_dir() or any(archive.iterdir()):
        raise ArchiveError(
            f"--archive {archive} exists and is not an evalb archive (no archive.json)",
            hint="pass an archive, a new path or an empty directory",
        )


def existing_archive(archive: Path) -> Archive:
    """The archive at an --archive path that must already be one (recover, migrate)."""
    from evalb.archive import Archive

    return Archive.open(archive, writable=True)


def check_models(models: list[str]) -> None:
    """Refuse model names that cannot be recorded: empty, with a tab/newline/control character
    (they would forge TSV rows), or the scripted judge (it answers judge prompts, not tasks)."""
    for m in models:
        if not m.strip() or not m.isprintable():
            raise UsageError(
                f"model name {m!r} is empty or holds a control character (tab, newline, ...)",
                hint="give a model alias such as haiku or scripted:oracle",
            )
        if m == "scripted:judge" or m.startswith("scripted:judge:"):
            raise PolicyError(
                "scripted:judge is the judge's model, not a policy to record",
                hint="record with scripted:oracle, scripted:oblivious or scripted:stochastic",
            )


def _record(
    scenarios: list[str],
    models: list[str],
    reps: int,
    jobs: int,
    archive: Path,
    options: RecordOptions,
    results: Path | None,
    breaker: int = 5,
    budget_usd: float | None = None,
    dry_run: bool = False,
    *,
    arms: list[Arm] | None = None,
    seed: int | None = None,
    shard: str | None = None,
    until: UntilOptions | None = None,
) -> None:
    from evalb.archive import Archive
    from runner import budget as budget_mod
    from runner import grid as grid_mod
    from runner import shard as shard_mod

    if breaker < 0:
        raise UsageError(f"--breaker {breaker} is negative", hint="give a count, or 0 to never stop early")
    part = shard_mod.resolve_shard(shard)
    for plugin in [options.plugin_dir] if arms is None else [a.plugin_dir for a in arms]:
        refuse_inside_inputs("--archive", archive, plugin)
    refuse_foreign_folder(archive)
    check_models(models)
    if results is not None and results.is_dir():
        raise UsageError(
            f"--results {results} is a directory", hint="give a file, e.g. --results results.tsv"
        )
    _positive("--budget-usd", budget_usd, "20")
    arch = Archive(archive)
    if arms is None and seed is None:
        slots = grid_mod.expand(scenarios, models, reps, grid_mod.plugin_hash_of(options.plugin_dir) or "")
    else:
        arms = arms or [grid_mod.Arm(options.arm, options.plugin_dir)]
        seed = grid_mod.new_seed() if seed is None else seed
        slots = grid_mod.expand_arms(scenarios, models, reps, arms, seed)
        names = ", ".join(a.name for a in arms)
        print(
            f"arms {names} interleaved in the order of seed {seed} (recorded on every run)", file=sys.stderr
        )
    planned = len(slots)
    slots = shard_mod.select(slots, part)
    if part is not None:
        print(f"shard {part}: {len(slots)} of the grid's {planned} slots", file=sys.stderr)
    if dry_run:  # reads the archive if there is one; writes nothing, not even the archive folder
        if jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {jobs}")
        print(budget_mod.plan(slots, arch, jobs=jobs, budget_usd=budget_usd))
        if until is not None:
            print("--until-decided: this is the pilot; rounds add reps until decided or --max-reps per cell")
        return
    # every refusal comes before the archive is created or touched
    grid_mod.preflight(slots, arch, options, arms or ())
    if results is not None:
        try:
            results.parent.mkdir(parents=True, exist_ok=True)
            results.touch()
        except OSError as e:
            raise UsageError(f"cannot write --results {results}: {e.strerror}") from e
    budget = None
    if budget_usd is not None:
        budget = budget_mod.Budget(
            budget_usd, budget_mod.past_runs(arch), priced=budget_mod.scripted_priced()
        )

    def record(todo: list[grid_mod.Slot], extra: dict[str, object] | None = None) -> grid_mod.GridReport:
        return grid_mod.run_grid(
            todo,
            arch,
            options,
            jobs=jobs,
            after_rep=_scorer(archive, results),
            breaker=breaker,
            progress_stream=sys.stderr,
            budget=budget,
            arms=arms or (),
            seed=seed,
            shard=None if part is None else str(part),
            plan_extra=extra,
        )

    if until is not None and arms and seed is not None:
        from cli import until as until_cli

        report = until_cli.run(slots, arch, arms, seed, until, budget, record)
    else:
        report = record(slots)
    outcomes: dict[str, int] = {}
    for r in report.recorded:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing new"
    extra = f"; {len(report.recovered)} interrupted reps recovered" if report.recovered else ""
    busy = f"; {report.busy} slots busy in another recorder" if report.busy else ""
    spent = f"; spent ${budget.spent:.4f} of --budget-usd {budget.limit:g}" if budget else ""
    print(
        f"recorded {len(report.recorded)} reps ({summary}); {report.skipped} of {report.planned} slots "
        f"already recorded{busy}{extra}{spent} -> {archive}",
        file=sys.stderr,
    )
    if options.keep_sandboxes:
        where = options.workdir or Path(tempfile.gettempdir())
        print(f"kept each rep's sandbox and HOME in {where.resolve()}/evalb-<variant>-*", file=sys.stderr)
    if report.stopped_by_breaker:
        raise HarnessError(
            f"stopped the grid after {breaker} reps in a row failed the same way: {report.stopped_by_breaker}",
            hint=f"fix that, then rerun the same command to record the {report.not_started} reps not started",
        )
    if report.failed:
        slot, reason = report.failed[0]
        raise HarnessError(
            f"{len(report.failed)} rep(s) failed in the harness, e.g. {slot}: {reason}",
            hint="they fill no slot: rerun the same command to retry them",
        )
    if budget is not None and budget.stopped:
        raise BudgetError(
            f"the grid stopped on --budget-usd {budget.limit:g}: {budget.stopped}; "
            f"{budget.not_started} slots not started, ${budget.spent:.4f} spent in all",
            hint="rerun with a larger --budget-usd, or without it, to record them",
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
    client: ClientOpt = None,
    timeout: TimeoutOpt = None,
    confine: ConfineOpt = True,
    workdir: WorkdirOpt = None,
    keep_sandboxes: KeepOpt = False,
    max_api_retries: RetriesOpt = 6,
    breaker: BreakerOpt = 5,
    shard: ShardOpt = None,
    inject_fault: FaultOpt = None,
    mem_limit: MemOpt = "4G",
    pids_limit: PidsOpt = "512",
    tmp_size: TmpOpt = "512M",
    file_size_limit: FsizeOpt = "1G",
    credentials: CredOpt = "proxy",
    network: NetOpt = "open",
    max_turns: MaxTurnsOpt = None,
    max_budget_usd: MaxRepUsdOpt = None,
    budget_usd: BudgetOpt = None,
    dry_run: DryRunOpt = False,
) -> None:
    """Record SCENARIO × MODEL × reps; rerunning skips reps already recorded."""
    opts = _options(
        plugin_dir,
        client,
        timeout,
        confine,
        workdir,
        keep_sandboxes,
        inject_fault,
        max_api_retries,
        _limits(mem_limit, pids_limit, tmp_size, file_size_limit),
        credentials,
        network,
        max_turns,
        max_budget_usd,
    )
    _record(
        scenario.split(","),
        model.split(","),
        reps,
        jobs,
        archive,
        opts,
        results,
        breaker,
        budget_usd,
        dry_run,
        shard=shard,
    )


@app.command()
def grid(
    grid_file: Annotated[
        Path, typer.Argument(help="YAML with scenarios:, models:, reps: (and plugins:, seed: for arms).")
    ],
    reps: Annotated[
        int | None, typer.Option(help="Repetitions per cell (overrides the file's reps:).")
    ] = None,
    jobs: Annotated[int, typer.Option(help="Reps run in parallel.")] = 1,
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    plugin_dir: Annotated[
        Path | None,
        typer.Option(
            "--plugin-dir",
            help="Plugin under test, for a grid file without plugins: (default: the reference os-adr plugin).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the arms' interleaved order (overrides the file's seed:); drawn and recorded if absent."
        ),
    ] = None,
    shard: ShardOpt = None,
    results: Annotated[Path | None, typer.Option(help="Append scored TSV rows to this file.")] = None,
    client: ClientOpt = None,
    timeout: TimeoutOpt = None,
    confine: ConfineOpt = True,
    workdir: WorkdirOpt = None,
    keep_sandboxes: KeepOpt = False,
    max_api_retries: RetriesOpt = 6,
    breaker: BreakerOpt = 5,
    mem_limit: MemOpt = "4G",
    pids_limit: PidsOpt = "512",
    tmp_size: TmpOpt = "512M",
    file_size_limit: FsizeOpt = "1G",
    credentials: CredOpt = "proxy",
    network: NetOpt = "open",
    max_turns: MaxTurnsOpt = None,
    max_budget_usd: MaxRepUsdOpt = None,
    budget_usd: BudgetOpt = None,
    dry_run: DryRunOpt = False,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="Record the file's reps as a pilot, then add reps in rounds until an anytime-valid "
            "interval decides candidate vs baseline, or --max-reps (docs/runner.md, Sequential stopping).",
        ),
    ] = False,
    max_reps: Annotated[
        int | None,
        typer.Option(
            "--max-reps", help="With --until-decided: reps per cell at most (default: 3× the fixed plan)."
        ),
    ] = None,
    round_size: Annotated[
        int | None,
        typer.Option(
            "--round-size",
            help="With --until-decided: reps added per arm each round (default: one per cell).",
        ),
    ] = None,
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta", help="With --until-decided: the difference the fixed-size plan is sized for (0.2)."
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", help="With --until-decided: the baseline arm (default: current, else none)."
        ),
    ] = None,
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", help="With --until-decided: the arm compared with the baseline."),
    ] = None,
) -> None:
    """Record a grid described in a YAML file; resumable like `run`."""
    from cli.until import until_options
    from runner import grid as grid_mod

    spec = grid_mod.load_grid_file(grid_file)
    if spec.plugins is not None and plugin_dir is not None:
        raise UsageError(
            f"grid file {grid_file} names its plugins: and --plugin-dir names another",
            hint="drop --plugin-dir, or the plugins: mapping",
        )
    if seed is not None and seed < 0:
        raise UsageError(f"--seed {seed} is negative", hint="give a whole number, 0 or more")
    arms = None if spec.plugins is None else grid_mod.arms_from(spec.plugins, grid_file.parent)
    for arm in arms or []:
        refuse_inside_inputs("--workdir", workdir, arm.plugin_dir)
    until = until_options(
        until_decided,
        max_reps=max_reps,
        round_size=round_size,
        delta=delta,
        baseline=baseline,
        candidate=candidate,
        arms=arms,
        shard=shard,
    )
    limits = _limits(mem_limit, pids_limit, tmp_size, file_size_limit)
    opts = _options(
        plugin_dir or paths.REFERENCE_PLUGIN,
        client,
        timeout,
        confine,
        workdir,
        keep_sandboxes,
        None,
        max_api_retries,
        limits,
        credentials,
        network,
        max_turns,
        max_budget_usd,
    )
    _record(
        spec.scenarios,
        spec.models,
        spec.reps if reps is None else reps,
        jobs,
        archive,
        opts,
        results,
        breaker,
        budget_usd,
        dry_run,
        arms=arms,
        seed=spec.seed if seed is None else seed,
        shard=shard,
        until=until,
    )


@app.command("import")
def import_(
    transcripts: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Stream-json transcripts (.jsonl): files, glob patterns, or folders (their *.jsonl).",
            show_default=False,
        ),
    ] = None,
    scenario: Annotated[
        str | None, typer.Option(help="Scenario variant they were recorded for (not with --manifest).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model alias they were recorded with (not with --manifest).")
    ] = None,
    sandbox: Annotated[
        Path | None,
        typer.Option(
            help="The sandbox it ran in, built with `evalb sandbox VARIANT DIR` (what changed is "
            "archived); one transcript only (a manifest has a sandbox column)."
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            help="A TSV with a header line: transcript, scenario, model, optional sandbox (paths "
            "relative to its folder)."
        ),
    ] = None,
    archive: ArchiveOpt = paths.DEFAULT_ARCHIVE,
    plugin_dir: Annotated[Path | None, typer.Option(help="The plugin they ran with, if known.")] = None,
) -> None:
    """Archive transcripts recorded elsewhere, many in one process; malformed lines are kept raw
    and flagged. Exit 1 if some transcripts could not be imported (each named; the rest are)."""
    from cli.record_import import run_import

    refuse_inside_inputs("--archive", archive, plugin_dir)
    refuse_foreign_folder(archive)
    code = run_import(transcripts or [], scenario, model, sandbox, manifest, archive, plugin_dir)
    if code:
        raise typer.Exit(code)


@app.command()
def recover(archive: ArchiveOpt = paths.DEFAULT_ARCHIVE) -> None:
    """Commit reps left in flight by a recorder that was killed, as `interrupted`."""
    refuse_inside_inputs("--archive", archive, None)
    arch = existing_archive(archive)
    arch.ensure()
    ids = arch.recover_stale()
    print(f"recovered {len(ids)} interrupted reps", file=sys.stderr)


@app.command()
def migrate(archive: ArchiveOpt = paths.DEFAULT_ARCHIVE) -> None:
    """Bring an archive written by an older evalb up to this schema version."""
    from evalb.archive import Archive

    refuse_inside_inputs("--archive", archive, None)
    before = Archive(archive).schema_version() if Archive(archive).exists() else None
    arch = existing_archive(archive)  # opening it writable migrates it
    arch.ensure()
    print(f"archive schema v{before} -> v{arch.schema_version()}", file=sys.stderr)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a closed terminal, a job scheduler) ends a grid the way Ctrl-C does
    from runner.grid import Terminated

    raise Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    run_app(app, "evalb-record")
