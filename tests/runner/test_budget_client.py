"""Budgets with the real client and the scripted model: --budget-usd stops a grid given the
test-only price, every recorded rep intact; the client's own --max-turns / --max-budget-usd give
their outcomes; --dry-run projects from the archive and writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from runner.budget import TEST_PRICE_ENV
from tests.conftest import record_grid, score
from tests.hardening.helpers import check_archive

EXE = str(Path(".venv/bin/evalb-record").resolve())
pytestmark = pytest.mark.client


def _record(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL
    )


def _tree(root: Path) -> dict[str, str]:
    """Every file under root with its content hash (the archive, byte for byte)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_budget_stops_the_grid_and_a_rerun_fills_the_rest(tmp_path: Path) -> None:
    root, budget = tmp_path / "a", 1.0
    priced = {**os.environ, TEST_PRICE_ENV: "1"}
    res = _record(
        "run",
        "R1",
        "scripted:oracle",
        "--reps",
        6,
        "--jobs",
        2,
        "--archive",
        root,
        "--budget-usd",
        budget,
        env=priced,
    )
    assert res.returncode == 4, res.stderr
    first = check_archive(root)
    n = first.height
    assert set(first["outcome"]) == {"completed"}, first.select("outcome", "outcome_detail").rows()
    assert 1 <= n < 6
    costs = first["cost_usd"].to_list()
    assert all(c > 0 for c in costs)  # the client priced the scripted usage; the test price charged it
    # kept: at most the reps in flight may each cost a little more than their projection
    assert sum(costs) <= budget + 2 * (max(costs) - min(costs)) + 1e-9
    # not stopped needlessly early: one more rep would have passed the budget
    assert sum(costs) + max(costs) > budget
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the grid stopped on --budget-usd {budget:g}: ")
    assert f"; {6 - n} slots not started, ${sum(costs):.4f} spent in all" in last
    assert "warning: stopping the grid on its budget" in res.stderr
    assert f"recorded {n} reps ({n} completed)" in res.stderr

    before = _tree(root)
    res = _record("run", "R1", "scripted:oracle", "--reps", 6, "--jobs", 2, "--archive", root)
    assert res.returncode == 0, res.stderr
    assert f"recorded {6 - n} reps ({6 - n} completed); {n} of 6 slots already recorded" in res.stderr
    after = check_archive(root)
    assert sorted(after["rep"].to_list()) == list(range(6))
    # every rep recorded under the budget is intact: its files byte for byte, its row the same
    assert all(_tree(root).get(p) == h for p, h in before.items() if not p.startswith(("locks", "inflight")))
    kept = after.filter(pl.col("run_id").is_in(first["run_id"].to_list())).sort("run_id")
    assert kept.equals(first.sort("run_id"))


def test_the_test_price_is_refused_outside_the_test_suite(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EVALB_TEST_POLICIES"} | {TEST_PRICE_ENV: "1"}
    res = _record("run", "R1", "scripted:oracle", "--archive", tmp_path / "a", "--budget-usd", 1, env=env)
    assert res.returncode == 2
    assert res.stderr.startswith("error: EVALB_TEST_PRICE is a test-only price")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("limit", "outcome", "subtype"),
    [
        ({"max_turns": 1}, "turn_limit", "error_max_turns"),
        ({"max_budget_usd": 0.01}, "budget_limit", "error_max_budget_usd"),
    ],
)
def test_the_clients_own_limit_gives_its_outcome(
    tmp_path: Path, limit: dict, outcome: str, subtype: str
) -> None:
    root = tmp_path / "a"
    report = record_grid(root, ["R1"], ["scripted:oracle"], 1, jobs=1, **limit)
    [run] = report.recorded
    assert (run.outcome, run.result_subtype, run.reached_model) == (outcome, subtype, True), (
        run.outcome_detail
    )
    assert run.outcome_detail.startswith(f"result {subtype} after ")
    opts = json.loads(run.options_json)
    assert {k: opts[k] for k in ("max_turns", "max_budget_usd")} == {
        "max_turns": None,
        "max_budget_usd": None,
    } | limit
    # it fills its slot (not retried, not recorded again)
    again = record_grid(root, ["R1"], ["scripted:oracle"], 1, jobs=1, **limit)
    assert again.recorded == [] and again.skipped == 1
    # valid, scored as it stood, and the reasons say the client stopped it
    score(root)
    scores = Archive(root).latest_scores()
    row = scores.filter(pl.col("run_id") == run.run_id).to_dicts()[0]
    assert row["verdict"] in ("PASS", "FAIL")
    assert row["reasons"].endswith(f"; {outcome}: scored as it stood when the client stopped it")


def test_dry_run_projects_from_past_runs_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "a"
    args = ["run", "R1,W1", "scripted:oracle,haiku", "--reps", 2, "--jobs", 2, "--archive", root, "--dry-run"]
    res = _record(*args)
    assert res.returncode == 0, res.stderr
    assert not root.exists()
    assert "0 already recorded, 8 to record, in this order:" in res.stdout
    assert "projected cost: no basis for haiku (no completed run of it in the archive)" in res.stdout
    assert "projected time: no basis for scripted:oracle, haiku" in res.stdout

    record_grid(root, ["R1", "W1"], ["scripted:oracle"], 1)
    before = _tree(root)
    runs = pl.read_parquet(Archive(root).files("runs"))
    cost = statistics.median(runs["cost_usd"].to_list())
    secs = statistics.median(runs["duration_ms"].to_list()) / 1000
    res = _record(*args)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1] == "2 already recorded, 6 to record, in this order:"
    assert lines[2:8] == [
        "  1. R1 scripted:oracle rep 1",
        "  2. W1 scripted:oracle rep 1",
        "  3. R1 haiku rep 0",
        "  4. R1 haiku rep 1",
        "  5. W1 haiku rep 0",
        "  6. W1 haiku rep 1",
    ]
    assert f"scripted:oracle: 2 reps × $0 (scripted), ~{secs:.0f}s each (median of 2)" in lines
    assert "projected cost: no basis for haiku (no completed run of it in the archive)" in lines
    # with the test price, scripted reps project the median cost their result events reported
    res = _record(
        "run",
        "R1,W1",
        "scripted:oracle",
        "--reps",
        3,
        "--archive",
        root,
        "--dry-run",
        "--budget-usd",
        f"{2.5 * cost:.4f}",
        env={**os.environ, TEST_PRICE_ENV: "1"},
    )
    assert res.returncode == 0, res.stderr
    assert (
        f"scripted:oracle: 4 reps × ${cost:.4f} each (median of 2), ~{secs:.0f}s each (median of 2)"
        in res.stdout
    )
    assert f"projected cost: ${4 * cost:.2f}" in res.stdout
    assert f"will stop the grid before it ends (projected ${4 * cost:.2f})" in res.stdout
    assert _tree(root) == before
