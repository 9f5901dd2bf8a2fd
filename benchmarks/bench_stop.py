"""Benchmark (not a test): how fast Ctrl-C stops a running grid, with reps in flight.

    .venv/bin/python benchmarks/bench_stop.py [--n 3]      # from the repo root

Starts `evalb-record run R1,R2 scripted:oracle --reps 2 --jobs 2` with a slow scripted model
(every turn pauses 0.7 s), waits until a rep is mid-way, sends SIGINT and prints how long the
recorder took to exit (its clients stopped, their reps committed as `interrupted`). N rounds,
each in a fresh archive. (tests/hardening/test_kills.py once asserted < 10 s; the figure is
printed here instead.)
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.hardening.helpers import recorder, wait_for  # noqa: E402
from tests.hardening.test_kills import _mid_rep  # noqa: E402


def one(tmp: Path) -> float:
    root, work = tmp / "archive", tmp / "work"
    work.mkdir()
    proc = recorder(
        "run", "R1,R2", "scripted:oracle", "--reps", 2, "--jobs", 2, "--archive", root, "--workdir", work,
        "--inject-fault", "slow:turn=any,times=1000,stall_seconds=0.7",
    )  # fmt: skip
    wait_for(lambda: _mid_rep(root), 120, "a rep in flight")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3, help="rounds")
    args = ap.parse_args()
    times = []
    for i in range(args.n):
        with tempfile.TemporaryDirectory() as tmp:
            times.append(one(Path(tmp)))
            print(f"round {i + 1}: recorder gone {times[-1]:.2f}s after Ctrl-C", flush=True)
    print(f"median {statistics.median(times):.2f}s   max {max(times):.2f}s")


if __name__ == "__main__":
    main()
