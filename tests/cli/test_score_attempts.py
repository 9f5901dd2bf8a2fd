"""One slot, one row: a rep retried at once (its first attempt failed before the model spoke) is
printed and counted once by `evalb-score` and `evalb summary`; `--all-attempts` prints every run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive, last_attempts
from runner.scripted.server import parse_fault
from tests.conftest import SCRIPTED_JUDGE, record_grid

BIN = Path(sys.executable).parent


def cli(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ADR_EVAL_B_JUDGE_CMD": SCRIPTED_JUDGE}
    return subprocess.run([str(BIN / name), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """R1 × scripted:oracle × 2 reps; each rep's first attempt has its connection dropped before
    the model spoke (client_error), the grid's retry then completes."""
    root = tmp_path_factory.mktemp("attempts") / "archive"
    fault = parse_fault("drop:turn=0,at_frame=1,times=99,attempts=1")
    record_grid(root, ["R1"], ["scripted:oracle"], 2, jobs=2, faults=[fault])
    return root


@pytest.mark.client
def test_the_fixture_has_two_attempts_per_slot(retried: Path) -> None:
    runs = Archive(retried).read("runs", ["slot", "attempt", "outcome"]).sort("slot", "attempt")
    assert runs.height == 4 and runs["slot"].n_unique() == 2
    assert runs["attempt"].to_list() == [1, 2, 1, 2]
    assert runs["outcome"].to_list() == ["client_error", "completed"] * 2


@pytest.mark.client
def test_tsv_prints_one_row_per_slot_and_all_attempts_prints_every_run(retried: Path) -> None:
    res = cli("evalb-score", "--archive", str(retried), "--tsv")
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    assert len(rows) == 2 and all(r.split("\t")[4] == "PASS" for r in rows), rows

    every = cli("evalb-score", "--archive", str(retried), "--tsv", "--all-attempts")
    assert every.returncode == 0, every.stderr
    verdicts = sorted(r.split("\t")[4] for r in every.stdout.splitlines())
    assert verdicts == ["INVALID", "INVALID", "PASS", "PASS"], every.stdout


@pytest.mark.client
def test_counts_and_summary_count_one_run_per_slot(retried: Path) -> None:
    table = cli("evalb-score", "--archive", str(retried))
    assert table.returncode == 0, table.stderr
    assert "2 run(s)" in table.stdout
    cell = next(ln for ln in table.stdout.splitlines() if ln.startswith("R1 ") and "/" in ln)
    assert cell.split()[-1] == "0" and "2/2" in cell, cell  # no invalid run: the retries do not count

    latest = Archive(retried).latest_scores()
    assert latest.height == 2 and latest["valid"].all()
    assert Archive(retried).latest_scores(all_attempts=True).height == 4

    summary = cli("evalb", "summary", "--archive", str(retried))
    assert summary.returncode == 0, summary.stderr
    cells = [ln.split() for ln in summary.stdout.splitlines() if ln.startswith("R1 ")]
    assert len(cells) == 1 and cells[0][3:5] == ["2", "0"], summary.stdout  # valid 2, inv 0 (not 2)


def test_last_attempts_keeps_the_highest_attempt_of_each_slot_in_order() -> None:
    df = pl.DataFrame(
        {
            "slot": ["a", "b", "a", "a", None, None, "b"],
            "attempt": [1, 1, 3, 2, 1, 1, 1],
            "run_id": ["a1", "b1", "a3", "a2", "x", "y", "b1'"],
        }
    )
    # a slot's highest attempt wins; ties (fabricated runs share a slot name) and no slot: all kept
    assert last_attempts(df)["run_id"].to_list() == ["b1", "a3", "x", "y", "b1'"]
    assert last_attempts(df.clear()).height == 0
