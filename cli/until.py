"""`evalb-record grid --until-decided`: the options and the glue from the grid command to
analysis.sequential_grid (the loop lives there)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evalb.errors import UsageError

if TYPE_CHECKING:
    from analysis.sequential_grid import UntilOptions
    from evalb.archive import Archive
    from runner.budget import Budget
    from runner.grid import Arm, GridReport, Slot


def until_options(
    until_decided: bool,
    *,
    max_reps: int | None,
    round_size: int | None,
    delta: float | None,
    baseline: str | None,
    candidate: str | None,
    arms: Sequence[Arm] | None,
    shard: str | None,
) -> UntilOptions | None:
    """The sequential options, or None without --until-decided; refusals in one line each."""
    from analysis.sequential_grid import DEFAULT_DELTA, UntilOptions, check_options, choose_arms
    from runner import shard as shard_mod

    given = {
        "--max-reps": max_reps,
        "--round-size": round_size,
        "--delta": delta,
        "--baseline": baseline,
        "--candidate": candidate,
    }
    if not until_decided:
        named = [k for k, v in given.items() if v is not None]
        if named:
            raise UsageError(
                f"{named[0]} applies only with --until-decided", hint="add --until-decided, or drop it"
            )
        return None
    if shard_mod.resolve_shard(shard) is not None:
        raise UsageError(
            "--until-decided cannot run in shards: each round's decision needs the whole grid's scores",
            hint="drop --shard (and JOB_COMPLETION_INDEX), and run it in one recorder",
        )
    if not arms:
        raise UsageError(
            "--until-decided compares two arms and the grid file names no plugins:",
            hint="write e.g. plugins: {current: DIR, candidate: DIR2}",
        )
    opts = UntilOptions(baseline, candidate, max_reps, round_size, DEFAULT_DELTA if delta is None else delta)
    choose_arms(arms, opts)
    check_options(opts, 2)  # the cell count is checked again once the slots are known
    return opts


def merged(reports: Sequence[GridReport]) -> GridReport:
    """One report for every round (what the grid command's summary line and refusals read)."""
    from runner.grid import GridReport

    out = GridReport()
    for r in reports:
        out.planned += r.planned
        out.skipped += r.skipped
        out.recorded += r.recorded
        out.busy += r.busy
        out.recovered += r.recovered
        out.failed += r.failed
        out.stopped_by_breaker = r.stopped_by_breaker or out.stopped_by_breaker
        out.not_started += r.not_started
    return out


def run(
    slots: list[Slot],
    archive: Archive,
    arms: Sequence[Arm],
    seed: int,
    opts: UntilOptions,
    budget: Budget | None,
    record: Callable[[list[Slot], dict[str, object]], GridReport],
) -> GridReport:
    """Run the sequential grid, printing each look and the end; return the merged report."""
    import polars as pl

    from analysis.checker import score_archive
    from analysis.frames import load_scores
    from analysis.sequential_grid import ROUND_KEY, run_until_decided, summary

    cells = pl.DataFrame(
        sorted({(s.variant, s.model) for s in slots}), schema=["variant", "model_alias"], orient="row"
    )

    def scores() -> pl.DataFrame:
        score_archive(archive)  # writes only new or changed verdicts; the judge each run expects
        return load_scores(Path(archive.root)).join(cells, on=["variant", "model_alias"], how="semi")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def record_round(round_slots: list[Slot], round_no: int, _seed: int) -> GridReport:
        if round_no:
            say(
                f"recording round {round_no}: {len(round_slots)} reps ({len(round_slots) // len(arms)} per arm)"
            )
        return record(round_slots, {ROUND_KEY: round_no})

    result = run_until_decided(
        archive,
        arms,
        slots,
        seed,
        opts,
        record=record_round,
        scores=scores,
        budget_stopped=lambda: None if budget is None else budget.stopped,
        say=say,
    )
    print(summary(result))
    return merged(result.reports)
