"""Shared checks for the hardening tests: archive invariants, file-system snapshots, stray processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

EXE = str(Path(".venv/bin/evalb-record").resolve())


def recorder(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `evalb-record` as a user would (its own process, stderr captured)."""
    return subprocess.Popen(
        [EXE, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def run_recorder(
    *args: object, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def runs(root: Path) -> pl.DataFrame:
    return pl.read_parquet(str(root / "runs" / "*.parquet"))


def check_archive(root: Path) -> pl.DataFrame:
    """Every file readable by plain DuckDB, no journal left, one runs row per run, events unique;
    returns the runs table."""
    con = duckdb.connect()
    n_runs = con.execute(f"SELECT count(*) FROM read_parquet('{root}/runs/*.parquet')").fetchone()
    assert n_runs is not None
    ids = con.execute(f"SELECT count(DISTINCT run_id) FROM read_parquet('{root}/runs/*.parquet')").fetchone()
    assert ids == n_runs, "a run id appears twice in the runs table"
    dup_events = con.execute(
        f"SELECT count(*) FROM (SELECT run_id, seq, block_index FROM read_parquet('{root}/events/*.parquet') "
        "GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()
    assert dup_events == (0,), "an event row appears twice"
    orphans = con.execute(
        f"SELECT count(*) FROM read_parquet('{root}/events/*.parquet') e "
        f"ANTI JOIN read_parquet('{root}/runs/*.parquet') r USING (run_id)"
    ).fetchone()
    assert orphans == (0,), "events of a run without a runs row"
    assert not list((root / "inflight").glob("*.json")), "a rep left in flight"
    assert not list(root.rglob(".*.tmp")), "a temp file left behind"
    return runs(root)


def assert_grid_complete(df: pl.DataFrame, slots: set[str]) -> dict[str, int]:
    """Each slot holds exactly one completed run (no duplicate, none lost); every other run of it is
    `interrupted`. Returns outcome counts."""
    done = df.filter(pl.col("outcome") == "completed")
    assert sorted(done["slot"].to_list()) == sorted(slots), "lost or duplicated reps"
    others = df.filter(pl.col("outcome") != "completed")
    assert set(others["outcome"]) <= {"interrupted"}, others.select(
        "slot", "outcome", "outcome_detail"
    ).rows()
    assert set(others["slot"]) <= slots
    return dict(df.group_by("outcome").len().rows())


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under `root` (directories as 'dir')."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def procs_with(marker: str) -> list[str]:
    """Processes whose command line or working directory mentions `marker` (e.g. a test's workdir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if marker in cmd or marker in cwd:
            found.append(f"{pid}: {cmd[:160]}")
    return found


def wait_no_procs(marker: str, within: float = 10.0) -> list[str]:
    """Stray processes still there after `within` seconds (an empty list is a pass)."""
    deadline = time.monotonic() + within
    while True:
        left = procs_with(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def wait_for(cond, within: float, what: str, poll: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


def slot_keys(variants: list[str], model: str, reps: int) -> set[str]:
    from runner.grid import expand, plugin_hash_of
    from runner.record import RecordOptions

    return {s.key for s in expand(variants, [model], reps, plugin_hash_of(RecordOptions().plugin_dir))}


def shell_script(tmp: Path, commands: list[str], final: str = "Done.") -> Path:
    """Write a `scripted:shell` script (the commands its agent runs in order, then its final text)."""
    path = tmp / f"shell-script-{len(list(tmp.glob('shell-script-*')))}.json"
    path.write_text(json.dumps({"commands": commands, "final": final}))
    return path


def record_shell(
    root: Path,
    tmp: Path,
    commands: list[str],
    *,
    variant: str = "R1",
    final: str = "Done.",
    monkeypatch: Any = None,
    **options: object,
) -> pl.DataFrame:
    """Record one confined rep whose agent runs `commands` (the test-only scripted:shell policy) in
    this process, through the library; returns the runs table. The grid must finish by itself."""
    from evalb.archive import Archive
    from runner.grid import expand, plugin_hash_of, run_grid
    from runner.record import RecordOptions
    from tests.conftest import require_client_mark

    require_client_mark()
    script = shell_script(tmp, commands, final)
    if monkeypatch is not None:
        monkeypatch.setenv("EVALB_SHELL_SCRIPT", str(script))
    else:
        os.environ["EVALB_SHELL_SCRIPT"] = str(script)
    opts = RecordOptions(**{"timeout": 90, **options})  # type: ignore[arg-type]
    slots = expand([variant], ["scripted:shell"], 1, plugin_hash_of(opts.plugin_dir))
    run_grid(slots, Archive(root), opts, jobs=1, retries=0, progress_stream=None)
    return runs(root)
