"""Issue 10's acceptance, with the real client: scripted wordings stand in for plugin wordings.

Two copies of the reference plugin whose hook note tells `scripted:stochastic` how often to consult
(current p_consult=0.2, candidate 0.9; the model's own p_consult=0, so the no-plugin arm never
consults) are recorded in one interleaved grid with a no-plugin arm and a twin of current (the same
plugin copy under another arm name). On the R scenarios a rep passes only if the agent consulted
(axis (a)) and cited the right record (axis (b), p_cite=0.8 once it consulted), so the consult
probability, and nothing else, separates the arms. `evalb compare` must then say better / worse in
the two directions and not shown for the twins; `--until-decided` on the same archive adds rounds
and must stop decided before --max-reps; with a (test-only) price and a small --budget-usd it must
stop on the budget, saying so. About 60 scripted reps in all (jobs 2).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from analysis.frames import load_scores
from runner.budget import TEST_PRICE_ENV
from tests.runner.wordings import wording_plugin

BIN = Path(".venv/bin").resolve()
MODEL = "scripted:stochastic:p_consult=0"
SCENARIOS = "[R1, R2, R3, R4]"
MAX_REPS = 12
pytestmark = pytest.mark.client


def _run(exe: str, *args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / exe, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _grid_file(path: Path, plugins: str, reps: int = 2) -> Path:
    path.write_text(
        f"scenarios: {SCENARIOS}\nmodels: ['{MODEL}']\nreps: {reps}\nplugins: {plugins}\nseed: 2026\n"
    )
    return path


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(folder with the wordings, archive): 4 scenarios × 4 arms × 2 reps, interleaved, scored as recorded."""
    root = tmp_path_factory.mktemp("until")
    wording_plugin(root / "current", p_consult=0.2)
    wording_plugin(root / "candidate", p_consult=0.9, extra="Always check docs/adr first.")
    f = _grid_file(root / "arms.yaml", "{current: current, twin: current, candidate: candidate, none: null}")
    out = _run("evalb-record", "grid", f, "--archive", root / "archive", "--jobs", 2)
    assert out.returncode == 0, out.stderr
    assert "recorded 32 reps (32 completed)" in out.stderr
    return root, root / "archive"


def _decision(archive: Path, arms: str) -> str:
    out = _run("evalb", "compare", "--archive", archive, "--arms", arms)
    assert out.returncode == 0, out.stderr
    a, b = arms.split(",")
    line = next(x for x in out.stdout.splitlines() if x.startswith(f"{b} vs {a}: "))
    return line.removeprefix(f"{b} vs {a}: ").split(" (")[0]


def test_the_consult_probability_drives_the_passes(grid: tuple[Path, Path]) -> None:
    _, archive = grid
    s = load_scores(archive)
    assert s.height == 32 and s["valid"].all(), s.select("arm", "invalid_reason").rows()
    # a pass needs a consultation (axis a): the wording's consult probability is what separates arms
    assert s.filter(pl.col("passed") & ~pl.col("axis_a")).is_empty()
    by = {
        r["arm"]: r
        for r in s.group_by("arm").agg(pl.col("axis_a").mean(), pl.col("passed").mean()).to_dicts()
    }
    assert by["none"]["axis_a"] == 0 and by["none"]["passed"] == 0  # no note: p_consult=0
    assert by["candidate"]["axis_a"] > by["current"]["axis_a"]
    # the twins share the plugin and the reps' draws: identical verdicts, rep by rep
    twins = s.filter(pl.col("arm").is_in(["current", "twin"])).pivot(
        "arm", index=["variant", "rep"], values="verdict"
    )
    assert twins["current"].to_list() == twins["twin"].to_list()


def test_compare_decides_both_directions_and_not_shown_for_twins(grid: tuple[Path, Path]) -> None:
    _, archive = grid
    assert _decision(archive, "current,candidate") == "better"
    assert _decision(archive, "candidate,current") == "worse"
    assert _decision(archive, "current,twin") == "not shown"


def test_until_decided_stops_before_max_reps(grid: tuple[Path, Path], tmp_path: Path) -> None:
    root, src = grid
    archive = tmp_path / "archive"
    shutil.copytree(src, archive)
    f = _grid_file(root / "two.yaml", "{current: current, candidate: candidate}")
    out = _run(
        "evalb-record", "grid", f, "--archive", archive, "--jobs", 2,
        "--until-decided", "--max-reps", MAX_REPS, "--delta", 0.5,
    )  # fmt: skip
    print(out.stderr, out.stdout)  # the looks and the saving, for -s
    assert out.returncode == 0, out.stderr
    # the pilot is the grid's recorded reps (nothing new), then rounds of one rep per cell and arm
    assert re.search(r"^pilot: 8 pairs in 4 cells \(2\.0 per cell\).* · not decided$", out.stderr, re.M)
    looks = re.findall(
        r"^round (\d+): (\d+) pairs in 4 cells .*CS \[([-+.\d]+), ([-+.\d]+)\] · (.*)$", out.stderr, re.M
    )
    assert looks and looks[-1][4] == "decided: better" and all(k[4] == "not decided" for k in looks[:-1])
    assert [int(k[0]) for k in looks] == list(range(1, len(looks) + 1))
    widths = [float(hi) - float(lo) for _, _, lo, hi, _ in looks]
    assert widths == sorted(widths, reverse=True)  # the running intersection only narrows
    assert out.stdout.startswith("decided: candidate is better than current")
    assert re.search(
        r"pairs per cell used against [\d.]+ for the fixed-size plan: (saving|spending) \d+%", out.stdout
    )

    runs = pl.read_parquet(str(archive / "runs" / "*.parquet"))
    new = runs.filter(pl.col("arm").is_in(["current", "candidate"]) & (pl.col("rep") >= 2))
    rounds = [json.loads(o)["sequential_round"] for o in new["options_json"]]
    assert new.height == 8 * len(looks) and sorted(set(rounds)) == list(range(1, len(looks) + 1))
    assert runs["rep"].max() < MAX_REPS - 1  # stopped early, not at the cap
    assert (
        new.group_by("variant", "rep").agg(pl.col("arm").sort()).get_column("arm").to_list()
        == [["candidate", "current"]] * new.group_by("variant", "rep").len().height
    )


def test_until_decided_stops_on_the_budget(grid: tuple[Path, Path], tmp_path: Path) -> None:
    root, src = grid
    archive = tmp_path / "archive"
    shutil.copytree(src, archive)
    per_rep = pl.read_parquet(str(archive / "runs" / "*.parquet"))["cost_usd"].median()
    assert isinstance(per_rep, float) and per_rep > 0
    f = _grid_file(root / "two.yaml", "{current: current, candidate: candidate}")
    before = pl.read_parquet(str(archive / "runs" / "*.parquet")).height
    out = _run(
        "evalb-record", "grid", f, "--archive", archive, "--jobs", 2, "--until-decided",
        "--budget-usd", 1.5 * per_rep, env={**os.environ, TEST_PRICE_ENV: "1"},
    )  # fmt: skip
    assert out.returncode == 4, out.stderr
    assert out.stdout.startswith("not decided: --budget-usd stopped the grid after round 1")
    assert out.stderr.strip().splitlines()[-1].startswith("error: the grid stopped on --budget-usd")
    after = pl.read_parquet(str(archive / "runs" / "*.parquet"))
    assert 1 <= after.height - before < 8 and set(after["outcome"]) == {"completed"}
