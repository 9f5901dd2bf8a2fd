"""`evalb-record` end to end as a user calls it: --results rows, progress, usage errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

EXE = str(Path(".venv/bin/evalb-record").resolve())


def _run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.client
def test_results_get_one_scored_row_per_rep(tmp_path: Path) -> None:
    """--results appends the spec's TSV row for each rep as it is scored; plain progress lines on a pipe."""
    env = {**os.environ, "ADR_EVAL_B_JUDGE_CMD": str(Path(".venv/bin/evalb-scripted-judge").resolve())}
    res = _run(
        "run",
        "R1,W2",
        "scripted:oracle",
        "--archive",
        tmp_path / "a",
        "--results",
        tmp_path / "r.tsv",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    rows = [line.split("\t") for line in (tmp_path / "r.tsv").read_text().splitlines()]
    assert [r[:5] for r in rows] == [
        ["R1", "scripted:oracle", "A:PASS", "B:PASS", "PASS"],
        ["W2", "scripted:oracle", "A:PASS", "B:PASS", "PASS"],
    ]
    assert "[1/2] · 1/1 pass" in res.stderr and "[2/2] · 2/2 pass" in res.stderr
    assert "recorded 2 reps (2 completed); 0 of 2 slots already recorded" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "R9", "scripted:oracle"],
            "error: unknown scenario 'R9' (choose one of: W1, W2, W3, R1, R2, R3, R4, R4-nograph, O1, O2, O3)",
        ),
        (
            ["run", "R1", "scripted:wizard"],
            "error: unknown scripted policy 'wizard' (choose one of: oracle, oblivious, stochastic",
        ),
        (["run", "R1", "scripted:oracle", "--reps", "0"], "error: --reps must be at least 1, got 0"),
        (
            ["run", "R1", "scripted:oracle", "--plugin-dir", "/nonexistent"],
            "error: plugin directory /nonexistent does not exist",
        ),
    ],
)
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    """A user mistake: one line on stderr naming the thing and the fix, exit 2, no archive created."""
    res = _run(*args, "--archive", tmp_path / "a")
    assert res.returncode == 2
    assert res.stderr.startswith(message), res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "a").exists()
