"""The whole sharded flow on this machine, exactly as the pods run it: N shard processes of
deploy/entrypoint.sh (JOB_COMPLETION_INDEX / JOB_COMPLETION_COUNT set, the real client confined
by bubblewrap), each pushing to the local S3 server, then the finish step (pull, merge, score,
report, push); the merged verdict counts equal those of the same grid recorded on one machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

from analysis.summary import summary_text
from evalb.archive import Archive
from tests.conftest import SCRIPTED_JUDGE, require_client_mark
from tests.deploy.s3server import S3Server, child_env

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
ENTRY = ROOT / "deploy" / "entrypoint.sh"
SHARDS = 3
GRID = "scenarios: [W1, R2]\nmodels: [scripted:oracle, scripted:oblivious]\nreps: 2\n"


pytestmark = pytest.mark.client


def verdict_counts(root: Path) -> pl.DataFrame:
    scores = Archive.open(root).latest_scores()
    return scores.group_by("variant", "model_alias", "verdict").agg(n=pl.len()).sort(pl.all())


def test_n_shards_pushed_to_s3_merge_to_the_one_machine_result(s3: S3Server, tmp_path: Path) -> None:
    require_client_mark()
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    bucket = s3.bucket("e2e")
    url = f"s3://{bucket}/study"
    work = tmp_path / "work"
    env = child_env(
        s3,
        PATH=f"{BIN}:{os.environ['PATH']}",
        EVALB_GRID=str(grid),
        EVALB_WORK=str(work),
        EVALB_S3_URL=url,
        EVALB_JOBS="1",
        ADR_EVAL_B_JUDGE_CMD=SCRIPTED_JUDGE,
    )
    pod_env = {**env, "JOB_COMPLETION_COUNT": str(SHARDS)}
    pods = [
        subprocess.Popen(
            ["bash", str(ENTRY), "shard"],
            env={**pod_env, "JOB_COMPLETION_INDEX": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(SHARDS)
    ]
    logs = [p.communicate(timeout=1800)[0] for p in pods]
    assert [p.returncode for p in pods] == [0] * SHARDS, logs
    fin = subprocess.run(
        ["bash", str(ENTRY), "finish"], env=pod_env, capture_output=True, text=True, timeout=1800
    )
    assert fin.returncode == 0, fin.stdout + fin.stderr
    merged = work / "merged"

    one = tmp_path / "one-machine"  # the same grid, no shard
    rec = subprocess.run(
        [str(BIN / "evalb-record"), "grid", str(grid), "--archive", str(one), "--jobs", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert rec.returncode == 0, rec.stderr
    sc = subprocess.run(
        [str(BIN / "evalb-score"), "--archive", str(one), "--tsv"], env=env, capture_output=True, text=True
    )
    assert sc.returncode in (0, 1), sc.stderr

    runs = Archive.open(merged).read("runs")
    assert runs.height == 2 * 2 * 2 and runs["slot"].n_unique() == runs.height  # every slot once
    assert verdict_counts(merged).equals(verdict_counts(one))
    # each shard holds a part, none all of it; the merged archive is on S3 and reads back the same
    shard_runs = [Archive.open(f"{url}/shards/{i}").read("runs").height for i in range(SHARDS)]
    assert sum(shard_runs) == runs.height and max(shard_runs) < runs.height
    remote = subprocess.run(
        [str(BIN / "evalb"), "summary", "--archive", f"{url}/merged"], env=env, capture_output=True, text=True
    )
    assert remote.returncode == 0 and remote.stdout == summary_text(merged), remote.stderr
    assert (work / "report.html").stat().st_size > 0
