"""Benchmark (not a test): how long building one rep's sandbox takes, per variant.

    .venv/bin/python benchmarks/bench_sandbox.py [--n 5]

Builds every variant's sandbox N times (copy of the fixture, one git commit, the plugin) in a
temporary directory and prints the median and the maximum of `SandboxInfo.seconds` for each.
(tests/world/test_sandbox.py once asserted < 1 s; the figure is printed here instead.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalb.sandbox import build_sandbox
from evalb.scenarios import all_variant_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="builds per variant")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for variant in all_variant_ids():
            times = [build_sandbox(variant, Path(tmp) / f"{variant}-{i}").seconds for i in range(args.n)]
            print(
                f"{variant:<12} median {statistics.median(times):6.3f}s   max {max(times):6.3f}s", flush=True
            )


if __name__ == "__main__":
    main()
