"""A three-arm grid with the real client: two scripted wordings and a no-plugin baseline, recorded
interleaved into one archive in two shards by `evalb-record grid`, then scored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from tests.conftest import score
from tests.runner.wordings import wording_plugin

EXE = Path(".venv/bin/evalb-record").resolve()
SEED = 4242


def _grid(tmp_path: Path) -> Path:
    """R1 × scripted:stochastic (p_consult=0 unless a wording says otherwise) × 2 reps × 3 arms:
    'current' says p_consult=0, 'candidate' p_consult=1, 'none' has no plugin (so no note)."""
    wording_plugin(tmp_path / "current", p_consult=0)
    wording_plugin(tmp_path / "candidate", p_consult=1, extra="Check docs/adr before any change.")
    f = tmp_path / "grid.yaml"
    f.write_text(
        "scenarios: [R1]\nmodels: ['scripted:stochastic:p_consult=0']\nreps: 2\n"
        "plugins: {current: current, candidate: candidate, none: null}\n"
    )
    return f


def _record(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "grid", *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.client
def test_three_arm_grid_records_interleaved_in_shards_and_scores(tmp_path: Path) -> None:
    grid, archive = _grid(tmp_path), tmp_path / "archive"
    for shard in ("0/2", "1/2"):
        out = _record(grid, "--archive", archive, "--seed", SEED, "--shard", shard, "--jobs", 1)
        assert out.returncode == 0, out.stderr
        assert f"seed {SEED}" in out.stderr and f"shard {shard}:" in out.stderr
    again = _record(grid, "--archive", archive, "--jobs", 2)  # a fresh seed: the same slots
    assert (
        again.returncode == 0 and "recorded 0 reps" in again.stderr and "6 of 6 slots already" in again.stderr
    )

    runs = pl.read_parquet(str(archive / "runs" / "*.parquet")).sort("started_at")
    opts = [json.loads(o) for o in runs["options_json"]]
    runs = runs.with_columns(
        order=pl.Series([o["order"] for o in opts]), shard=pl.Series([o["shard"] for o in opts])
    )
    assert runs.height == 6 and {o["grid_seed"] for o in opts} == {SEED}
    assert runs["outcome"].to_list() == ["completed"] * 6
    assert sorted(runs["arm"].to_list()) == ["candidate"] * 2 + ["current"] * 2 + ["none"] * 2
    assert len(set(runs["slot"])) == 6 and all(
        s.endswith("|" + a) for s, a in runs.select("slot", "arm").rows()
    )
    # every arm of one rep is in one shard, and each shard ran its slots in the grid's order
    assert runs.group_by("rep").agg(pl.col("shard").n_unique())["shard"].to_list() == [1, 1]
    for shard in ("0/2", "1/2"):
        mine = runs.filter(pl.col("shard") == shard)
        assert mine["order"].to_list() == sorted(mine["order"].to_list())
    # the order interleaves the arms: positions 3k..3k+2 are the three arms of one rep
    by_order = runs.sort("order")
    for k in range(2):
        block = by_order.slice(3 * k, 3)
        assert block["rep"].n_unique() == 1 and sorted(block["arm"]) == ["candidate", "current", "none"]
        assert block["order"].to_list() == [3 * k, 3 * k + 1, 3 * k + 2]
    none = runs.filter(pl.col("arm") == "none")
    assert none.select("plugin_hash", "plugin_name", "plugin_dir").null_count().row(0) == (2, 2, 2)
    assert not any(none["hook_seen"]) and all(runs.filter(pl.col("arm") != "none")["hook_seen"])

    score(archive)
    scores = Archive(archive).latest_scores().join(runs.select("run_id", "arm"), on="run_id")
    got = {
        a: sorted(scores.filter(pl.col("arm") == a)["axis_a"].to_list())
        for a in ("current", "candidate", "none")
    }
    assert scores["valid"].to_list() == [True] * 6, scores["reasons"].to_list()
    # the wording drives the scripted agent: p_consult=1 always consults, 0 and no plugin never
    assert got == {"current": [False, False], "candidate": [True, True], "none": [False, False]}
