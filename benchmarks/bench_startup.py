"""Benchmark (not a test): start-up time of every console script, against a bare interpreter.

    .venv/bin/python benchmarks/bench_startup.py [--n 7] [--import MODULE ...]

Runs `python -c pass` and each console script's `--help` (stdin closed) N times in fresh
processes and prints the median and the minimum wall time of each, in one run so the figures
share the machine's load. With `--import`, also times `python -c "import MODULE"` for each.
The environment is left as it is: where PYTHONDONTWRITEBYTECODE is set and .venv holds no
compiled bytecode (`uv sync --compile-bytecode`, done by scripts/setup), every process compiles
the modules it imports again.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
SCRIPTS = ["evalb", "evalb-record", "evalb-score", "evalb-self-test", "evalb-scripted-judge"]


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, cwd=REPO)
    return time.perf_counter() - t0


def measure(label: str, cmd: list[str], n: int) -> None:
    times = [wall(cmd) for _ in range(n)]
    print(f"{label:<40} median {statistics.median(times):6.3f}s   min {min(times):6.3f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=7, help="runs per command (median reported)")
    ap.add_argument("--import", dest="imports", nargs="*", default=[], help="modules to time importing")
    args = ap.parse_args()
    py = str(BIN / "python")
    pycs = sum(1 for _ in (REPO / ".venv").rglob("*.pyc"))
    print(f"{pycs} compiled .pyc files in .venv; {args.n} runs each")
    measure("python -c pass", [py, "-c", "pass"], args.n)
    for name in SCRIPTS:
        measure(f"{name} --help", [str(BIN / name), "--help"], args.n)
    for mod in args.imports:
        measure(f"import {mod}", [py, "-c", f"import {mod}"], args.n)


if __name__ == "__main__":
    main()
