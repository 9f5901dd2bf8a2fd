"""Benchmark (not a test): scripted reps per hour per core, the figure docs/scaling.md sizes shards with.

    .venv/bin/python benchmarks/bench_reps.py [--reps 8] [--jobs 1] [--scenarios W1,R2] [--push]

Records a grid of `--reps` reps per scenario with the bundled `scripted:oracle` model (the real
client, confined by bubblewrap, as a pod runs it) through `evalb-record grid`, and prints the wall
time, the CPU time of the recorder and everything it started (user + system), and from them reps
per hour per core (3600 / CPU seconds per rep) and reps per hour at this `--jobs`. The scripted
model answers at once: a real model's session (a minute or more, waiting on the API) dominates a
real rep, and costs the machine little CPU while it waits. With `--push`, also times
`evalb archive push` of the result to a moto_server on loopback.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def record(workdir: Path, scenarios: str, reps: int, jobs: int) -> tuple[int, float, float]:
    grid = workdir / "grid.yaml"
    grid.write_text(f"scenarios: [{scenarios}]\nmodels: [scripted:oracle]\nreps: {reps}\n")
    cpu0, t0 = children_cpu(), time.perf_counter()
    out = subprocess.run(
        [BIN / "evalb-record", "grid", grid, "--archive", workdir / "archive", "--jobs", str(jobs)],
        capture_output=True,
        text=True,
    )
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if out.returncode not in (0, 1):
        sys.exit(f"evalb-record failed ({out.returncode}): {out.stderr[-2000:]}")
    n = len(list((workdir / "archive" / "runs").glob("*.parquet")))
    return n, wall, cpu


def push(workdir: Path) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [BIN / "moto_server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "EVALB_S3_ENDPOINT": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        code = f"import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:{port}').create_bucket(Bucket='bench')"
        subprocess.run([BIN / "python", "-c", code], env=env, check=True)
        t0 = time.perf_counter()
        subprocess.run(
            [BIN / "evalb", "archive", "push", workdir / "archive", "s3://bench/a"], env=env, check=True
        )
        return time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8, help="reps per scenario")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--scenarios", default="W1,R2")
    ap.add_argument("--push", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reps-") as d:
        work = Path(d)
        n, wall, cpu = record(work, args.scenarios, args.reps, args.jobs)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
        print(f"reps recorded: {n} (scripted:oracle, confined, --jobs {args.jobs})")
        print(f"wall: {wall:.1f} s ({wall / n:.2f} s per rep; {3600 * n / wall:.0f} reps per hour)")
        print(f"cpu (recorder + client + sandbox, user+sys): {cpu:.1f} s ({cpu / n:.2f} s per rep)")
        print(f"reps per hour per core (3600 / cpu s per rep): {3600 * n / cpu:.0f}")
        if args.push:
            t = push(work)
            print(f"evalb archive push of {n} runs to moto_server on loopback: {t:.2f} s (one process)")


if __name__ == "__main__":
    main()
