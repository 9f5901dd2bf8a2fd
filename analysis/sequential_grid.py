"""`evalb-record grid --until-decided`: record a grid's pilot reps, then add reps in rounds until
the anytime-valid comparison of two arms decides (analysis.sequential), or a cap is reached.

Pure orchestration: recording and scoring are callables (the CLI passes `run_grid` and the
checker), so the loop is the same whatever records the reps. Each round: score, `decide` (tuned
with the fixed-size plan's reps per cell from the pilot, `fixed_plan_reps`), and if not stopped,
`plan_round` -> `expand_cells` for every arm -> record. docs/runner.md, *Sequential stopping*.
It lives in analysis, not runner: the runner never imports analysis (tests/cli/test_layering.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from analysis.sequential import SequentialDecision, decide, fixed_plan_reps, plan_round
from evalb.archive import Archive
from evalb.errors import UsageError
from runner.grid import Arm, GridReport, Slot, expand_cells

#: The key of a run's options_json that holds its sequential round (0 = the pilot).
ROUND_KEY = "sequential_round"
#: Planned difference (pass-rate points) the fixed-size plan is computed for, unless --delta.
DEFAULT_DELTA = 0.2
#: Without --max-reps: this many times the fixed plan's reps per cell (docs/statistics.md measures
#: that the rule decides almost always by then).
MAX_FACTOR = 3


@dataclass(frozen=True)
class UntilOptions:
    """What `--until-decided` was given (None: the default)."""

    baseline: str | None = None
    candidate: str | None = None
    max_reps: int | None = None
    round_size: int | None = None
    delta: float = DEFAULT_DELTA
    alpha: float = 0.05


@dataclass
class RoundLog:
    """One look at the comparison: after round `round` (0 = the pilot)."""

    round: int
    decision: SequentialDecision
    recorded: int  # reps recorded in this round (every arm)
    added: list[tuple[str, str, int]] = field(default_factory=list)  # the next round's cells


@dataclass
class UntilResult:
    """How the sequential grid ended."""

    baseline: str
    candidate: str
    rounds: list[RoundLog]
    plan_reps: float | None  # the fixed-size plan's reps per cell (None: the pilot cannot say)
    max_reps: int
    reason: str  # 'decided', 'max-reps', 'budget', 'breaker', 'failed', 'no progress'
    reports: list[GridReport]

    @property
    def decision(self) -> SequentialDecision:
        return self.rounds[-1].decision


def choose_arms(arms: Sequence[Arm], opts: UntilOptions) -> tuple[str, str]:
    """(baseline, candidate) for the sequential comparison; one UsageError for each mistake.

    Defaults as `evalb compare`'s: the baseline is the first of current, none, default the grid
    names (with two arms, the first named); the candidate, the only other arm, or the first arm
    named after the baseline that is not 'none'."""
    from analysis.compare import DEFAULT_BASELINES

    names = [a.name for a in arms]
    listed = ", ".join(names) or "none"
    if len(names) < 2:
        raise UsageError(
            f"--until-decided compares two arms and the grid has {len(names)} ({listed})",
            hint="name two or more arms in the grid file's plugins: mapping",
        )
    for opt, name in (("--baseline", opts.baseline), ("--candidate", opts.candidate)):
        if name is not None and name not in names:
            raise UsageError(f"{opt} {name!r} is not an arm of the grid", hint=f"arms: {listed}")
    base = opts.baseline
    if base is None:
        base = next((b for b in DEFAULT_BASELINES if b in names and b != opts.candidate), None)
        if base is None and len(names) == 2:
            base = next(n for n in names if n != opts.candidate)
    if base is None:
        raise UsageError(
            f"several arms ({listed}) and none is named current or none",
            hint="name them with --baseline ARM --candidate ARM",
        )
    cand = opts.candidate
    if cand is None:
        others = [n for n in names if n != base]
        real = [n for n in others if n != "none"]
        if len(others) == 1:
            cand = others[0]
        elif len(real) == 1:
            cand = real[0]
        else:
            raise UsageError(
                f"several arms ({', '.join(others)}) could be the candidate against {base!r}",
                hint="name it with --candidate ARM",
            )
    if cand == base:
        raise UsageError(f"--baseline and --candidate both name {base!r}", hint="name two different arms")
    return base, cand


def check_options(opts: UntilOptions, n_cells: int) -> None:
    """Refuse option values the loop cannot use, before anything is recorded."""
    if opts.max_reps is not None and opts.max_reps < 2:
        raise UsageError(f"--max-reps {opts.max_reps} must be at least 2", hint="e.g. --max-reps 30")
    if opts.round_size is not None and opts.round_size < 1:
        raise UsageError(f"--round-size {opts.round_size} must be at least 1", hint="e.g. --round-size 7")
    if not (0 < opts.delta < 1):
        raise UsageError(f"--delta {opts.delta:g} must be between 0 and 1", hint="e.g. --delta 0.2")
    if opts.max_reps is None and n_cells < 2:
        raise UsageError(
            "--until-decided on a grid of one cell needs --max-reps (the fixed-size plan needs 2 scenarios)",
            hint="add --max-reps N, or more scenarios",
        )


def round_seed(seed: int, round_no: int) -> int:
    """The interleaving seed of round `round_no` (0: the grid's own seed)."""
    if round_no == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}|round|{round_no}".encode()).digest()[:4], "big") >> 1


def last_round(archive: Archive, arms: Sequence[str]) -> int:
    """The highest sequential round recorded on the runs of these arms (0 if none)."""
    if not archive.exists() or not archive.has_rows("runs"):
        return 0
    opts = archive.scan("runs").filter(pl.col("arm").is_in(list(arms))).select("options_json").collect()
    rounds = [0]
    for raw in opts["options_json"].drop_nulls():
        try:
            value = json.loads(raw).get(ROUND_KEY)
        except (ValueError, AttributeError):
            continue
        if isinstance(value, int):
            rounds.append(value)
    return max(rounds)


def next_rep(archive: Archive, arms: Sequence[str]) -> dict[tuple[str, str], int]:
    """(variant, model) -> the first rep index not yet recorded in any of the arms."""
    if not archive.exists() or not archive.has_rows("runs"):
        return {}
    df = (
        archive.scan("runs")
        .filter(pl.col("arm").is_in(list(arms)))
        .group_by("variant", "model_alias")
        .agg(pl.col("rep").max())
        .collect()
    )
    return {(v, m): int(r) + 1 for v, m, r in df.iter_rows()}


def cap_round(
    cells: list[tuple[str, str, int]], start: dict[tuple[str, str], int], max_reps: int
) -> list[tuple[str, str, range]]:
    """The round's rep indices per cell, from the cell's next index, never at or past `max_reps`."""
    out = []
    for v, m, n in cells:
        first = start.get((v, m), 0)
        reps = range(first, min(first + n, max_reps))
        if len(reps):
            out.append((v, m, reps))
    return out


def run_until_decided(
    archive: Archive,
    arms: Sequence[Arm],
    pilot: list[Slot],
    seed: int,
    opts: UntilOptions,
    *,
    record: Callable[[list[Slot], int, int], GridReport],
    scores: Callable[[], pl.DataFrame],
    budget_stopped: Callable[[], str | None] = lambda: None,
    say: Callable[[str], None] = lambda _: None,
) -> UntilResult:
    """Record `pilot` (round 0), then rounds until the comparison decides or a cap stops it.

    `record(slots, round, seed)` records slots (every arm) and returns the grid report;
    `scores()` scores the archive and returns its latest score frame (with `arm`), restricted to
    the grid's cells; `budget_stopped()` says why the grid's budget stopped scheduling, if it did.
    Round numbers continue those already recorded on the arms' runs (a rerun resumes)."""
    base, cand = choose_arms(arms, opts)
    pair = (base, cand)
    cells = sorted({(s.variant, s.model) for s in pilot})
    check_options(opts, len(cells))
    names = [a.name for a in arms]
    given: dict[tuple[str, str], int] = {}  # the next rep index after every slot given to `record`
    for s in pilot:
        given[(s.variant, s.model)] = max(given.get((s.variant, s.model), 0), s.rep + 1)
    reports = [record(pilot, 0, seed)]
    frame = scores()
    # the plan comes from the pilot's reps only, so a resumed run tunes its CS as the first did
    pilot_reps = pl.DataFrame(
        sorted({(s.variant, s.model, s.rep) for s in pilot}),
        schema={"variant": pl.String, "model_alias": pl.String, "rep": pl.Int64},
        orient="row",
    )
    pilot_frame = (
        frame.join(pilot_reps, on=["variant", "model_alias", "rep"], how="semi") if frame.height else frame
    )
    plan = fixed_plan_reps(pilot_frame, pair, opts.delta, alpha=opts.alpha)
    if opts.max_reps is not None:
        max_reps = opts.max_reps
    elif plan is not None:
        max_reps = max(MAX_FACTOR * math.ceil(plan), max(s.rep for s in pilot) + 2)
    elif budget_stopped() or reports[0].stopped_by_breaker or reports[0].failed:
        max_reps = max(s.rep for s in pilot) + 1  # the pilot itself was cut short: no round follows
    else:
        raise UsageError(
            f"the pilot cannot size the fixed plan for --delta {opts.delta:g} (no rep variance in "
            "two scenarios run by both arms)",
            hint="give --max-reps N; rerunning the command skips the reps recorded",
        )
    round_size = opts.round_size or len(cells)
    rounds: list[RoundLog] = []
    round_no = last_round(archive, names)
    reason = ""
    while True:
        d = decide(frame, pair, opts.alpha, max_reps=max_reps, plan_reps=plan)
        log = RoundLog(round_no, d, sum(len(r.recorded) for r in reports[-1:]))
        rounds.append(log)
        say(round_line(log, pair))
        last = reports[-1]
        if d.decided:
            reason = "decided"
        elif last.stopped_by_breaker:
            reason = "breaker"
        elif last.failed:
            reason = "failed"
        elif budget_stopped():
            reason = "budget"
        else:
            start = next_rep(archive, names)
            start = {k: max(start.get(k, 0), given.get(k, 0)) for k in start.keys() | given.keys()}
            todo = cap_round(plan_round(frame, pair, round_size, max_reps), start, max_reps)
            if d.at_max or not todo:
                reason = "max-reps"
            elif len(rounds) > 1 and d.n_pairs <= rounds[-2].decision.n_pairs:
                reason = "no progress"
            else:
                log.added = [(v, m, len(r)) for v, m, r in todo]
                given |= {(v, m): r.stop for v, m, r in todo}
                round_no += 1
                reports.append(record(expand_cells(todo, arms, round_seed(seed, round_no)), round_no, seed))
                frame = scores()
                continue
        break
    return UntilResult(base, cand, rounds, plan, max_reps, reason, reports)


def round_line(log: RoundLog, pair: tuple[str, str]) -> str:
    """One line per look: the round, pairs per cell, the CS of candidate − baseline, the state."""
    d = log.decision
    state = {"better": "decided: better", "worse": "decided: worse"}.get(d.direction, "not decided")
    what = "pilot" if log.round == 0 else f"round {log.round}"
    return (
        f"{what}: {d.n_pairs} pairs in {d.n_cells} cells ({d.reps_used:.1f} per cell): "
        f"{pair[1]} − {pair[0]} {d.estimate:+.3f}, {round((1 - d.alpha) * 100)}% CS "
        f"[{d.lo:+.3f}, {d.hi:+.3f}] · {state}"
    )


def summary(result: UntilResult) -> str:
    """The final decision, why the loop stopped, and the reps used against the fixed-size plan."""
    d = result.decision
    base, cand = result.baseline, result.candidate
    head = {
        "decided": f"decided: {cand} is {d.direction} than {base}",
        "max-reps": f"not decided: every cell reached --max-reps {result.max_reps}",
        "budget": f"not decided: --budget-usd stopped the grid after round {result.rounds[-1].round}",
        "breaker": "not decided: the circuit breaker stopped the grid",
        "failed": "not decided: reps failed in the harness (rerun the same command to retry them)",
        "no progress": "not decided: the last round added no valid pair (see its reps' outcomes)",
    }[result.reason]
    last = result.rounds[-1].round
    head += f" ({'at the pilot' if last == 0 else f'after round {last}'}, CS [{d.lo:+.3f}, {d.hi:+.3f}])"
    if result.plan_reps is None:
        return head + f"; {d.reps_used:.1f} pairs per cell used; no fixed-size plan to compare with"
    saving = 1 - d.reps_used / result.plan_reps
    return (
        head + f"; {d.reps_used:.1f} pairs per cell used against {result.plan_reps:.1f} for the fixed-size "
        f"plan: {'saving' if saving >= 0 else 'spending'} {abs(saving):.0%}"
    )
