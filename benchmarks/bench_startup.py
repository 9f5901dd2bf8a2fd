"""Benchmark (not a test): start-up time of every console script, against a bare interpreter.

    .venv/bin/python benchmarks/bench_startup.py [--n 7] [--no-pyc] [--import MODULE ...]

Runs `python -c pass` and each console script's `--help` (stdin closed) N times in fresh
processes and prints the median wall time and the median CPU time (user + system, less
sensitive to a loaded machine) of each, in one run so the figures share the machine's load.
With `--import`, also times `python -c "import MODULE"` for each. With `--no-pyc`, each command
is timed a second time with PYTHONPYCACHEPREFIX pointing at an empty directory, so no compiled
bytecode is found (the stdlib's neither): what every command costs where PYTHONDONTWRITEBYTECODE
is set and nothing was compiled at set-up (scripts/setup runs `uv sync --compile-bytecode`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
SCRIPTS = ["evalb", "evalb-record", "evalb-score", "evalb-self-test", "evalb-scripted-judge"]


def timed(cmd: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, cwd=REPO, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(label: str, cmd: list[str], n: int, no_pyc: str | None) -> None:
    runs = {"": None, " (no .pyc)": {**os.environ, "PYTHONPYCACHEPREFIX": no_pyc}} if no_pyc else {"": None}
    for suffix, env in runs.items():
        walls, cpus = zip(*(timed(cmd, env) for _ in range(n)), strict=True)
        print(
            f"{label + suffix:<44} wall {statistics.median(walls):6.3f}s   cpu {statistics.median(cpus):6.3f}s",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=7, help="runs per command (median reported)")
    ap.add_argument("--no-pyc", action="store_true", help="also time each command without compiled bytecode")
    ap.add_argument("--import", dest="imports", nargs="*", default=[], help="modules to time importing")
    args = ap.parse_args()
    py = str(BIN / "python")
    pycs = sum(1 for _ in (REPO / ".venv").rglob("*.pyc"))
    print(f"{pycs} compiled .pyc files in .venv; {args.n} runs each (medians)")
    with tempfile.TemporaryDirectory() as empty:
        no_pyc = empty if args.no_pyc else None
        measure("python -c pass", [py, "-c", "pass"], args.n, no_pyc)
        for name in SCRIPTS:
            measure(f"{name} --help", [str(BIN / name), "--help"], args.n, no_pyc)
        for mod in args.imports:
            measure(f"import {mod}", [py, "-c", f"import {mod}"], args.n, no_pyc)


if __name__ == "__main__":
    main()
