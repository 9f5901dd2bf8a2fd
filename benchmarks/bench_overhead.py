"""What evalb-record costs per rep over running the client by hand, and how grids scale with --jobs.

Run: .venv/bin/python benchmarks/bench_overhead.py [--reps N] [--grid-reps N]

Two ways, same scripted policy (scripted:oracle on R1), same client, same model server, interleaved:
- bare:  `claude -p ...` in a sandbox prepared beforehand (not timed), stdout read to the end;
- evalb: `record_rep` -- sandbox build, bwrap confinement, line-by-line capture into the journal,
         end-state artifacts, Parquet commit.
Then grid wall time for all 8 variants x 1 rep at --jobs 1, 2, 4 (fresh archive each). Prints
figures only; this is a script, not a test. The machine has 2 cores: other load skews the figures.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from evalb import sandbox
from evalb.archive import Archive
from evalb.scenarios import resolve_variant
from runner.environment import client_env
from runner.grid import expand, plugin_hash_of, run_grid
from runner.record import RecordOptions, identity, record_rep, rep_seed
from runner.scripted.policies import RepContext, parse_model
from runner.scripted.server import ModelServer

VARIANT, MODEL = "R1", "scripted:oracle"


def bare_rep(server: ModelServer, opts: RecordOptions, work: Path, rep: int) -> float:
    scenario, variant = resolve_variant(VARIANT)
    box, home = work / f"bare-{rep}" / "sandbox", work / f"bare-{rep}" / "home"
    home.mkdir(parents=True)
    sandbox.build_sandbox(variant.id, box, plugin_dir=opts.plugin_dir)
    policy, params = parse_model(MODEL)
    ctx = RepContext(
        VARIANT, scenario.kind.value, scenario.policy, policy, params, rep_seed(VARIANT, MODEL, rep)
    )
    url = server.register(ctx)
    env, _ = client_env(home, base_url=url)
    cmd = [
        str(opts.client), "-p", "--output-format", "stream-json", "--verbose", "--model", MODEL,
        "--dangerously-skip-permissions", "--plugin-dir", str(opts.plugin_dir.resolve()), scenario.task_prompt(),
    ]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=box, env=env, capture_output=True, check=True).stdout
    dt = time.perf_counter() - t0
    server.unregister(url)
    assert b'"subtype":"success"' in out
    return dt


def evalb_rep(server: ModelServer, opts: RecordOptions, archive: Archive, rep: int) -> float:
    ident = identity(opts)  # once per grid in run_grid; timed here to be fair to a 1-rep grid
    t0 = time.perf_counter()
    run = record_rep(VARIANT, MODEL, rep, archive, opts, server=server, ident=ident)
    dt = time.perf_counter() - t0
    assert run.outcome == "completed", run.outcome_detail
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument(
        "--grid-reps", type=int, default=1, help="reps per variant in the --jobs grids (0: skip them)"
    )
    a = ap.parse_args()
    opts = RecordOptions()
    work = Path(tempfile.mkdtemp(prefix="evalb-bench-"))
    archive = Archive(work / "archive")
    archive.ensure()
    t0 = time.perf_counter()
    identity(opts)
    ident_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    sandbox.build_sandbox(VARIANT, work / "probe", plugin_dir=opts.plugin_dir)
    build_ms = (time.perf_counter() - t0) * 1000
    bare, ev = [], []
    with ModelServer() as server:
        bare_rep(server, opts, work, 999)  # warm the page cache for both
        for i in range(a.reps):
            bare.append(bare_rep(server, opts, work, i))
            ev.append(evalb_rep(server, opts, archive, i))
    mb, me = statistics.median(bare), statistics.median(ev)
    print(f"per rep over {a.reps} reps (median; mean in brackets), {VARIANT} x {MODEL}:")
    print(f"  bare claude -p : {mb * 1000:7.0f} ms  [{statistics.mean(bare) * 1000:.0f}]")
    print(f"  evalb-record   : {me * 1000:7.0f} ms  [{statistics.mean(ev) * 1000:.0f}]")
    print(f"  overhead       : {(me - mb) * 1000:7.0f} ms  = {me / mb - 1:+.1%}")
    print(
        f"  parts: sandbox build {build_ms:.0f} ms; plugin+frozen identity {ident_ms:.0f} ms (once per grid)"
    )
    base = None
    if a.grid_reps > 0:
        print(f"grid wall time, 8 variants x {a.grid_reps} rep(s) x {MODEL}:")
    for jobs in (1, 2, 4) if a.grid_reps > 0 else ():
        root = Archive(work / f"grid-{jobs}")
        slots = expand(["all"], [MODEL], a.grid_reps, plugin_hash_of(opts.plugin_dir))
        t0 = time.perf_counter()
        rep = run_grid(slots, root, opts, jobs=jobs, progress_stream=None)
        wall = time.perf_counter() - t0
        base = base or wall
        outcomes = {r.outcome for r in rep.recorded}
        print(
            f"  --jobs {jobs}: {wall:6.1f} s  ({len(slots) / wall:.2f} reps/s, x{base / wall:.2f}) {sorted(outcomes)}"
        )
    subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
