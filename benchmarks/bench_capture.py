"""What capturing a sandbox's end state costs per rep: the walk (runner/capture.py) vs the old
`git status` capture, on the same sandboxes, interleaved.

Run: .venv/bin/python benchmarks/bench_capture.py [--reps N]

Each sample is a fresh sandbox (R4: the biggest, with the graph) after what an agent typically
leaves: a new ADR, an edited source file and README. Also times one hostile sandbox (1,200-deep
tree, 500 sparse 1 MiB files, a 2 GB sparse file, a FIFO) with the walk only (git status would
run the sandbox's own config). Prints figures only; the machine has 2 cores: other load skews them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from evalb import sandbox
from runner import capture


def git_status_capture(box: Path) -> int:
    """The v1 capture (runner/artifacts.py before schema v2): git status, then each listed file read
    whole and hashed, plus every docs/adr file. Returns the number of rows."""
    status = subprocess.run(
        ["git", "-c", "core.quotepath=off", "status", "--porcelain=v1", "--untracked-files=all"],
        cwd=box,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows, seen = 1, set()
    for line in status.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        seen.add(path)
        p = box / path
        if p.is_file():
            hashlib.sha256(p.read_bytes()).hexdigest()
        rows += 1
    for p in sorted((box / "docs" / "adr").rglob("*")):
        if p.is_file() and p.relative_to(box).as_posix() not in seen:
            hashlib.sha256(p.read_bytes()).hexdigest()
            rows += 1
    return rows


def agent_was_here(box: Path) -> None:
    (box / "docs" / "adr" / "0007-deduplicate-webhooks.md").write_text("# Deduplicate webhooks\n" * 20)
    (box / "README.md").write_text((box / "README.md").read_text() + "\nEdited.\n")
    src = next((box / "lib").rglob("*.rb"))
    src.write_text(src.read_text() + "\n# touched\n")


def hostile(box: Path) -> None:
    subprocess.run(
        'mkdir -p "$(printf "d/%.0s" $(seq 1200))" && mkdir sparse && '
        "for i in $(seq 500); do truncate -s 1M sparse/f$i; done && truncate -s 2G huge && mkfifo fifo",
        shell=True,
        cwd=box,
        check=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evalb-bench-capture-"))
    walk_ms, git_ms, build_ms = [], [], []
    for i in range(a.reps):
        t0 = time.perf_counter()
        info = sandbox.build_sandbox("R4", work / f"sb{i}")
        build_ms.append((time.perf_counter() - t0) * 1000)
        agent_was_here(info.path)
        for which in ("walk", "git") if i % 2 else ("git", "walk"):
            t0 = time.perf_counter()
            if which == "walk":
                cap = capture.collect("r", info.path, info.initial_tree)
                walk_ms.append((time.perf_counter() - t0) * 1000)
                assert {r.path for r in cap.rows} >= {"README.md", "docs/adr/0007-deduplicate-webhooks.md"}
            else:
                git_status_capture(info.path)
                git_ms.append((time.perf_counter() - t0) * 1000)
    info = sandbox.build_sandbox("R4", work / "hostile")
    hostile(info.path)
    t0 = time.perf_counter()
    cap = capture.collect("r", info.path, info.initial_tree)
    hostile_ms = (time.perf_counter() - t0) * 1000
    subprocess.run(["rm", "-rf", str(work)], check=False)
    walk, git = statistics.median(walk_ms), statistics.median(git_ms)
    print(
        f"sandboxes: R4 ({len(info.initial_tree)} entries in the initial tree), {a.reps} samples, cpu={os.cpu_count()}"
    )
    print(
        f"capture, walk (v2):        median {walk:7.2f} ms  (min {min(walk_ms):.2f}, max {max(walk_ms):.2f})"
    )
    print(f"capture, git status (v1):  median {git:7.2f} ms  (min {min(git_ms):.2f}, max {max(git_ms):.2f})")
    print(f"ratio walk / git status:   {walk / git:.2f}")
    print(f"sandbox build (for scale): median {statistics.median(build_ms):7.2f} ms")
    print(
        f"hostile sandbox, walk:     {hostile_ms:7.1f} ms, {len(cap.rows)} rows, caps hit {cap.summary['caps_hit']}, "
        f"{cap.summary['hashed_bytes'] >> 20} MiB hashed, {cap.summary['content_bytes']} bytes of text kept"
    )


if __name__ == "__main__":
    main()
