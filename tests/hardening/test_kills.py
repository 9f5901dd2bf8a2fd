"""Kills: the client SIGKILLed mid-rep, the recorder SIGKILLed or Ctrl-C'd mid-grid.

Each test gives the recorder its own --workdir, so every process of its reps (bwrap, the client,
the client's Bash children) has that path in its command line or working directory: that is the
marker for "no stray process left"."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from evalb.archive import Archive
from runner.grid import expand, plugin_hash_of, run_grid
from runner.record import RecordOptions
from runner.scripted.server import parse_fault
from tests.hardening.helpers import (
    assert_grid_complete,
    check_archive,
    procs_with,
    recorder,
    run_recorder,
    slot_keys,
    wait_for,
    wait_no_procs,
)

pytestmark = pytest.mark.client

VARIANTS, MODEL, REPS = ["R1", "R2", "W1"], "scripted:oracle", 2  # 6 slots


def _journal_lines(archive: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (archive / "inflight").glob("*.jsonl"))


def _mid_rep(archive: Path) -> bool:
    """Some rep in flight has spoken but is early on (4-7 lines of the oracle's ~12-14): with slow
    turns it has at least two more turns (> 1 s) to go. (Merely "no result line yet" is not enough:
    two reps started together end together, so the second may be in its very last moment.)"""
    for p in (archive / "inflight").glob("*.jsonl"):
        try:
            lines = [json.loads(x)["line"] for x in p.read_text().splitlines()]
        except (ValueError, KeyError, OSError):
            continue  # being written, or committed meanwhile
        if 4 <= len(lines) <= 7 and not any(x.startswith('{"type":"result"') for x in lines):
            return True
    return False


def _client_pids(workdir: Path) -> list[int]:
    """The client processes (claude.exe) of reps under `workdir`, confined or not."""
    pids = []
    for entry in procs_with(str(workdir)):
        pid, cmd = entry.split(": ", 1)
        if "claude.exe" in cmd.split(" ")[0]:
            pids.append(int(pid))
    return pids


def test_client_sigkilled_mid_rep_is_crashed_with_every_line(tmp_path: Path) -> None:
    """The model's second reply stalls; the client is SIGKILLed then: the rep is `crashed`, and the
    archive holds every line the client had written (the journal's lines, all of them)."""
    root, work = tmp_path / "archive", tmp_path / "work"
    work.mkdir()
    opts = RecordOptions(faults=[parse_fault("stall:turn=1,stall_seconds=120")], timeout=90, workdir=work)
    slots = expand(["R1"], [MODEL], 1, plugin_hash_of(opts.plugin_dir))
    result: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: result.update(
            report=run_grid(slots, Archive(root), opts, jobs=1, retries=0, progress_stream=None)
        )
    )
    t.start()
    # wait until the first turn's tool result is journaled: the client is then waiting on the stall
    wait_for(
        lambda: any("tool_result" in p.read_text() for p in (root / "inflight").glob("*.jsonl")),
        60,
        "the first tool result",
    )
    journaled = _journal_lines(root)
    pids = wait_for(lambda: _client_pids(work), 10, "the client process")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    t.join(60)
    assert not t.is_alive()
    runs = check_archive(root)
    assert runs["outcome"].to_list() == ["crashed"], runs["outcome_detail"].to_list()
    assert runs["n_lines"][0] == journaled
    ev = pl.read_parquet(str(root / "events" / "*.parquet"))
    assert ev["seq"].n_unique() == journaled
    assert wait_no_procs(str(work)) == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_recorder_killed_mid_grid_then_rerun_completes(tmp_path: Path, sig: signal.Signals) -> None:
    """Recorder with --jobs 2 killed once reps are in flight (SIGKILL, or Ctrl-C = SIGINT): archive
    readable, no stray process; the rerun commits interrupted reps and completes every slot once."""
    root, work = tmp_path / "archive", tmp_path / "work"
    work.mkdir()
    args = (
        "run",
        ",".join(VARIANTS),
        MODEL,
        "--reps",
        REPS,
        "--jobs",
        2,
        "--archive",
        root,
        "--workdir",
        work,
    )
    # every model turn takes 0.7 s (a slow model), so a rep seen mid-way is surely still running
    # when the signal lands: without it, the rep could finish in between and nothing be interrupted
    proc = recorder(*args, "--inject-fault", "slow:turn=any,times=1000,stall_seconds=0.7")
    # kill once one rep is committed and another is mid-way (spoken, no result yet)
    wait_for(
        lambda: list((root / "runs").glob("*.parquet")) and _mid_rep(root),
        120,
        "a committed rep and a rep in flight",
    )
    in_flight = len(list((root / "inflight").glob("*.json")))
    t0 = time.monotonic()
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    stopped_in = time.monotonic() - t0
    assert wait_no_procs(str(work)) == [], "stray processes after the recorder died"
    if sig == signal.SIGINT:
        # Ctrl-C: running clients stopped at once, their reps committed as interrupted, one line, 130
        assert proc.returncode == 130
        assert err.strip().splitlines()[-1].startswith("error: interrupted"), err
        # how fast (printed below; benchmarks/bench_stop.py measures it): bounded by communicate()
        df = check_archive(root)
        assert (df["outcome"] == "interrupted").sum() >= 1
    else:
        assert proc.returncode == -signal.SIGKILL
        assert len(list((root / "inflight").glob("*.json"))) >= 1  # left for recovery
    print(f"{sig.name}: {in_flight} in flight, recorder gone in {stopped_in:.2f}s")
    # the archive stays readable by plain Polars even before recovery
    pl.read_parquet(str(root / "runs" / "*.parquet"))
    res = run_recorder(*args)
    assert res.returncode == 0, res.stderr
    df = check_archive(root)
    counts = assert_grid_complete(df, slot_keys(VARIANTS, MODEL, REPS))
    assert counts["completed"] == len(VARIANTS) * REPS
    interrupted = df.filter(pl.col("outcome") == "interrupted")
    assert interrupted.height == counts.get("interrupted", 0) >= 1
    # interrupted runs kept their lines (one may have just started, with none yet)
    assert (interrupted["n_lines"] >= 1).any()
    ev = pl.read_parquet(str(root / "events" / "*.parquet")).group_by("run_id").agg(pl.col("seq").n_unique())
    kept = dict(ev.rows())
    assert all(
        kept.get(r, 0) == n for r, n in zip(interrupted["run_id"], interrupted["n_lines"], strict=True)
    )
    assert wait_no_procs(str(work)) == []
    print(f"{sig.name}: outcomes {json.dumps(counts)}")
