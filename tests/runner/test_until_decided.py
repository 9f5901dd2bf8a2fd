"""`--until-decided`: the sequential grid loop (analysis.sequential_grid) on simulated reps, and the
command's refusals. The loop is driven through its real callables' contract: `record` gets the
slots `expand_cells` interleaves and a simulated pass/fail per rep lands in the score frame that
`scores` returns, so the planner, the rule and the caps all act on what was "recorded"."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analysis.sequential_grid import (
    UntilOptions,
    choose_arms,
    round_seed,
    run_until_decided,
    summary,
)
from analysis.simulate import simulate_arms
from evalb.archive import Archive
from evalb.errors import UsageError
from runner.grid import Arm, GridReport, Slot, expand_arms
from tests.runner.wordings import wording_plugin

EXE = Path(".venv/bin/evalb-record").resolve()
VARIANTS = ["R1", "R2", "R3", "R4"]
MODEL = "scripted:stochastic"
ARMS = [Arm("current", None), Arm("candidate", None)]


class FakeGrid:
    """Records slots as simulated scored reps: arm `a` passes with probability rates[a]."""

    def __init__(self, rates: dict[str, float], seed: int = 0, budget_after: int | None = None) -> None:
        self.rates, self.rng = rates, np.random.default_rng(seed)
        base = simulate_arms({"x": {("R1", MODEL): 0.5}}, reps=1).row(0, named=True)
        self.template = base
        self.rows: list[dict] = []
        self.calls: list[tuple[int, list[Slot]]] = []
        self.budget_after = budget_after
        self.t0 = dt.datetime(2026, 7, 3, tzinfo=dt.UTC)

    def record(self, slots: list[Slot], round_no: int, seed: int) -> GridReport:
        self.calls.append((round_no, slots))
        report = GridReport(planned=len(slots))
        if self.budget_after is not None and len(self.calls) > self.budget_after:
            return report  # the budget refused every slot
        for s in slots:
            ok = bool(self.rng.random() < self.rates[s.arm])
            self.rows.append(
                self.template
                | {
                    "run_id": f"{s.key}",
                    "variant": s.variant,
                    "scenario": s.variant,
                    "model_alias": s.model,
                    "rep": s.rep,
                    "arm": s.arm,
                    "plugin_hash": f"sim-{s.arm}",
                    "valid": True,
                    "passed": ok,
                    "axis_a": ok,
                    "axis_b": ok,
                    "verdict": "PASS" if ok else "FAIL",
                    "started_at": self.t0 + dt.timedelta(minutes=len(self.rows)),
                }
            )
        return report

    def scores(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=simulate_arms({"x": {("R1", MODEL): 0.5}}, reps=1).schema)

    def budget_stopped(self) -> str | None:
        if self.budget_after is not None and len(self.calls) > self.budget_after:
            return "the next rep would pass the budget"
        return None


def _run(grid: FakeGrid, tmp_path: Path, opts: UntilOptions, pilot_reps: int = 2):
    pilot = expand_arms(VARIANTS, [MODEL], pilot_reps, ARMS, 7)
    lines: list[str] = []
    result = run_until_decided(
        Archive(tmp_path / "none-yet"),
        ARMS,
        pilot,
        7,
        opts,
        record=grid.record,
        scores=grid.scores,
        budget_stopped=grid.budget_stopped,
        say=lines.append,
    )
    return result, lines


def test_a_clear_difference_stops_decided_before_max_reps(tmp_path: Path) -> None:
    grid = FakeGrid({"current": 0.2, "candidate": 0.9}, seed=1)
    result, lines = _run(grid, tmp_path, UntilOptions(max_reps=30, delta=0.3))
    assert result.reason == "decided" and result.decision.direction == "better"
    assert (result.baseline, result.candidate) == ("current", "candidate")
    assert result.decision.reps_used < 30 and len(result.rounds) >= 2
    assert lines[0].startswith("pilot: 8 pairs in 4 cells") and "decided: better" in lines[-1]
    # every round after the pilot adds new rep indices to every arm of its cells, interleaved
    seen: set[str] = set()
    for k, (round_no, slots) in enumerate(grid.calls):
        assert round_no == k
        keys = {s.key for s in slots}
        assert not keys & seen
        seen |= keys
        assert {s.arm for s in slots} == {"current", "candidate"}
        for cell in {(s.variant, s.rep) for s in slots}:
            assert sorted(s.arm for s in slots if (s.variant, s.rep) == cell) == ["candidate", "current"]
    assert grid.calls[1][1][0].rep == 2  # the round continues after the pilot's reps 0 and 1
    assert "saving" in summary(result) or "spending" in summary(result)


def test_the_other_direction_is_worse(tmp_path: Path) -> None:
    grid = FakeGrid({"current": 0.9, "candidate": 0.2}, seed=2)
    result, _ = _run(grid, tmp_path, UntilOptions(max_reps=30))
    assert result.reason == "decided" and result.decision.direction == "worse"


def test_no_difference_stops_at_max_reps_and_never_records_past_it(tmp_path: Path) -> None:
    grid = FakeGrid({"current": 0.5, "candidate": 0.5}, seed=3)
    result, _ = _run(grid, tmp_path, UntilOptions(max_reps=6, round_size=3))
    assert result.reason == "max-reps" and not result.decision.decided
    reps = pl.DataFrame(grid.rows).group_by("variant", "arm").agg(pl.col("rep").max(), n=pl.len())
    assert reps["rep"].max() == 5 and set(reps["n"]) == {6}
    assert "every cell reached --max-reps 6" in summary(result)


def test_the_budget_stops_the_loop_and_says_so(tmp_path: Path) -> None:
    grid = FakeGrid({"current": 0.5, "candidate": 0.5}, seed=4, budget_after=2)
    result, _ = _run(grid, tmp_path, UntilOptions(max_reps=30))
    assert result.reason == "budget" and "--budget-usd stopped the grid" in summary(result)


def test_a_budget_that_stops_the_pilot_is_said_before_any_plan(tmp_path: Path) -> None:
    grid = FakeGrid({"current": 0.5, "candidate": 0.5}, seed=5, budget_after=0)
    result, lines = _run(grid, tmp_path, UntilOptions())  # no --max-reps and no pilot to plan from
    assert result.reason == "budget" and len(grid.calls) == 1 and lines[0].startswith("pilot: 0 pairs")


def test_round_seeds_differ_and_round_zero_is_the_grids_seed() -> None:
    assert round_seed(5, 0) == 5 and len({round_seed(5, k) for k in range(1, 20)}) == 19


def test_choosing_the_arms() -> None:
    three = [Arm("current", None), Arm("candidate", None), Arm("none", None)]
    assert choose_arms(three, UntilOptions()) == ("current", "candidate")
    assert choose_arms(three, UntilOptions(baseline="none", candidate="current")) == ("none", "current")
    assert choose_arms([Arm("a", None), Arm("b", None)], UntilOptions()) == ("a", "b")
    for opts, words in [
        (UntilOptions(candidate="other"), "--candidate 'other' is not an arm"),
        (UntilOptions(baseline="current", candidate="current"), "both name 'current'"),
    ]:
        with pytest.raises(UsageError, match=words):
            choose_arms(three, opts)
    with pytest.raises(UsageError, match="could be the candidate"):
        choose_arms([*three, Arm("third", None)], UntilOptions())
    with pytest.raises(UsageError, match="compares two arms"):
        choose_arms([Arm("current", None)], UntilOptions())


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "grid", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("arms", "extra", "words"),
    [
        (True, ["--shard", "0/2"], "--until-decided cannot run in shards"),
        (False, [], "the grid file names no plugins:"),
        (True, ["--candidate", "C"], "--candidate 'C' is not an arm"),
        (True, ["--max-reps", "1"], "--max-reps 1 must be at least 2"),
        (True, ["--delta", "0"], "--delta 0 must be between 0 and 1"),
        ("one cell", [], "a grid of one cell needs --max-reps"),
    ],
)
def test_until_decided_refusals(tmp_path: Path, arms: bool | str, extra: list[str], words: str) -> None:
    wording_plugin(tmp_path / "pa", p_consult=0.2)
    wording_plugin(tmp_path / "pb", p_consult=0.9)
    f = tmp_path / "grid.yaml"
    text = (
        f"scenarios: {'[R1]' if arms == 'one cell' else '[R1, R2]'}\nmodels: ['scripted:oracle']\nreps: 2\n"
    )
    if arms:
        text += "plugins: {current: pa, candidate: pb}\n"
    f.write_text(text)
    out = _cli(f, "--archive", tmp_path / "arch", "--until-decided", *extra)
    assert out.returncode != 0 and words in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "arch").exists()  # refused before anything was recorded


def test_sequential_options_need_until_decided(tmp_path: Path) -> None:
    f = tmp_path / "grid.yaml"
    f.write_text("scenarios: [R1]\nmodels: ['scripted:oracle']\nreps: 1\n")
    out = _cli(f, "--archive", tmp_path / "arch", "--max-reps", "5")
    assert out.returncode != 0 and "--max-reps applies only with --until-decided" in out.stderr
