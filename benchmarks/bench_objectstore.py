"""Benchmark (not a test): push to and read from S3-compatible storage (moto_server on loopback).

    .venv/bin/python benchmarks/bench_objectstore.py [--runs 1000] [--jobs 8]

Builds an archive of `--runs` committed runs (copies of tests/core/golden's two recorded runs,
migrated, under new run ids), starts moto_server on a free loopback port, and prints the time of:
the first push, a rerun of it (nothing to upload), the first mirror (what `--archive s3://...`
does before reading), a second mirror (nothing new), and `evalb summary --archive s3://...` with a
warm cache. moto is a Python server, so absolute figures are moto's more than evalb's; the reruns
show what listing costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402

from evalb import objectstore  # noqa: E402
from evalb.archive import Archive  # noqa: E402

BIN = REPO / ".venv" / "bin"


def build(root: Path, runs: int) -> None:
    shutil.copytree(REPO / "tests" / "core" / "golden" / "archive-v1", root)
    Archive.create_or_open(root)
    originals = sorted(p.stem for p in (root / "runs").glob("*.parquet"))
    frames = {
        (rid, t): pl.read_parquet(root / t / f"{rid}.parquet")
        for rid in originals
        for t in objectstore.PUSH_WAVES[0] + ("runs",)
    }
    for k in range(runs - len(originals)):
        rid = originals[k % len(originals)]
        new = uuid.uuid4().hex
        for table in ("artifacts", "events", "runs"):
            df = frames[rid, table].with_columns(run_id=pl.lit(new))
            if table == "runs":
                df = df.with_columns(slot=pl.col("slot") + f"-copy{k}")
            df.write_parquet(root / table / f"{new}.parquet")


def timed(label: str, fn) -> None:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    print(f"{label:<44} {time.perf_counter() - t0:7.2f} s  {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=objectstore.DEFAULT_JOBS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as d:
        work = Path(d)
        build(work / "local", args.runs)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(
            [BIN / "moto_server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        env = {
            "EVALB_S3_ENDPOINT": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "EVALB_S3_CACHE": str(work / "cache"),
        }
        os.environ.update(env)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            s3 = objectstore.client()
            s3.create_bucket(Bucket="bench")
            url = "s3://bench/a"
            files = sum(len(w) for w in objectstore.push_plan(work / "local"))
            print(f"{args.runs} runs, {files} files, --jobs {args.jobs}, moto_server on loopback")
            timed("push (first)", lambda: objectstore.push(work / "local", url, jobs=args.jobs).line())
            timed(
                "push (rerun: nothing to upload)",
                lambda: objectstore.push(work / "local", url, jobs=args.jobs).line(),
            )
            timed(
                "mirror (first: fetch everything)",
                lambda: f"fetched {objectstore.mirror(url, jobs=args.jobs).fetched}",
            )
            timed(
                "mirror (again: nothing new)",
                lambda: f"fetched {objectstore.mirror(url, jobs=args.jobs).fetched}",
            )
            cmd = [BIN / "evalb", "summary", "--archive", url]
            timed(
                "evalb summary --archive s3://... (warm cache)",
                lambda: f"exit {subprocess.run(cmd, capture_output=True).returncode}",
            )
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
