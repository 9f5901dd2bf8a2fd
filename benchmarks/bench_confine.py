"""What the rep hardening costs: the credential proxy and the per-rep limits, and how long a rep that
fills its /tmp takes.

Run: .venv/bin/python benchmarks/bench_confine.py [--reps N] [--tmp-size 512M]

Interleaved reps of scripted:oracle on R1, both confined by allow-list:
- hardened: the defaults (credential proxy, cgroup limits, capped /tmp watched, end-of-rep kill);
- plain:    the real key in the client's environment, no limits (what the recorder did before).
Then one scripted:shell rep that fills /tmp with dd at the given cap (EVALB_TEST_POLICIES is set
here for that one rep). Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from evalb.archive import Archive
from runner.limits import Limits, parse_size
from runner.record import RecordOptions, identity, record_rep
from runner.scripted.server import ModelServer


def timed(
    server: ModelServer, opts: RecordOptions, archive: Archive, rep: int, model: str
) -> tuple[float, dict]:
    archive.ensure()
    ident = identity(opts)
    t0 = time.perf_counter()
    run = record_rep("R1", model, rep, archive, opts, server=server, ident=ident)
    return time.perf_counter() - t0, {"outcome": run.outcome, **json.loads(run.options_json)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--tmp-size", default="512M")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evalb-bench-confine-"))
    hardened = RecordOptions()
    plain = RecordOptions(credentials="env", limits=Limits(memory=None, pids=None, tmp=None, file_size=None))
    times: dict[str, list[float]] = {"hardened": [], "plain": []}
    peaks: list[dict] = []
    with ModelServer() as server:
        for i in range(a.reps):
            for name, opts in (("hardened", hardened), ("plain", plain)):
                dt, info = timed(server, opts, Archive(work / name), i, "scripted:oracle")
                assert info["outcome"] == "completed", info
                times[name].append(dt)
                if name == "hardened":
                    peaks.append(info.get("limits_peak", {}))
        for name, ts in times.items():
            print(f"{name:9s} rep: median {statistics.median(ts):.2f} s (min {min(ts):.2f}, n={len(ts)})")
        d = statistics.median(times["hardened"]) - statistics.median(times["plain"])
        print(f"overhead of proxy + limits: {d * 1000:+.0f} ms per rep (median difference)")
        mem = statistics.median(p.get("memory", 0) for p in peaks) / 2**20
        print(f"a rep's peak memory (client + tools, cgroup): {mem:.0f} MiB; peak tasks: "
              f"{max(p.get('pids', 0) for p in peaks)}")  # fmt: skip
        os.environ["EVALB_TEST_POLICIES"] = "1"
        script = work / "fill.json"
        script.write_text(json.dumps({"commands": ["dd if=/dev/zero of=/tmp/fill bs=1M"], "final": "Done."}))
        os.environ["EVALB_SHELL_SCRIPT"] = str(script)
        size = parse_size(a.tmp_size, "--tmp-size")
        fill = RecordOptions(limits=Limits(tmp=size))
        dt, info = timed(server, fill, Archive(work / "fill"), 0, "scripted:shell")
        print(f"a rep that fills a {a.tmp_size} /tmp: {dt:.2f} s, outcome {info['outcome']}, "
              f"peak memory {info['limits_peak'].get('memory', 0) / 2**20:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
