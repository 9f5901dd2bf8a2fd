"""Benchmark (not a test): compaction and merge on a synthetic archive, per-file vs compacted reads.

    .venv/bin/python benchmarks/bench_compact.py [--runs 10000] [--workdir DIR] [--no-score]

Builds (or reuses) bench_score.py's synthetic archive of N runs, then, each step in a fresh
process (wall time with Python start, and peak RSS):
  1. `compact` (grace 0) on a hard-linked copy of the archive;
  2. `committed_slots()`, reading all events (run_id, seq), and a full rescore
     (analysis.checker.score_archive, keyword judge, nothing written), per-file vs compacted;
  3. `merge` of two shards (the runs split even/odd, hard-linked; per-file, then compacted) into
     a new archive, and the same merge rerun (nothing to do).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_score import build, timed_child  # noqa: E402


def link_copy(src: Path, dst: Path, keep: set[str] | None = None) -> None:
    """A copy of an archive made of hard links (optionally only the runs in `keep`)."""
    shutil.rmtree(dst, ignore_errors=True)
    for d, _, files in os.walk(src):
        rel = Path(d).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            stem = f.removesuffix(".parquet")
            if keep is not None and rel.name in ("runs", "events", "artifacts") and stem not in keep:
                continue
            os.link(Path(d) / f, dst / rel / f)


def timed(setup: str, op: str) -> tuple[float, float, int, str]:
    """Run `setup` then `op` (an expression) in a fresh process: (seconds of `op` alone, wall of the
    whole process with Python start and imports, peak RSS KiB, what `op` returned)."""
    wall, rss, out = timed_child(
        f"import time\n{setup}\nt = time.perf_counter()\nres = {op}\nprint('T', time.perf_counter() - t, res)"
    )
    line = next(x for x in out.splitlines() if x.startswith("T "))
    _, secs, res = line.split(" ", 2)
    return float(secs), wall, rss, res


def row(what: str, a: tuple[float, float, int, str], b: tuple[float, float, int, str] | None = None) -> None:
    def cell(x: tuple[float, float, int, str]) -> str:
        return f"{x[0]:7.2f} s ({x[1]:6.2f} s) {x[2] / 1024:6.0f} MB"

    print(f"{what:<30} {cell(a)}" + (f"  | {cell(b)}" if b else ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--no-score", action="store_true", help="skip the rescore timing")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="evalb-bench-compact-"))
    root = workdir / "archive"
    if not (root / "runs").is_dir() or len(os.listdir(root / "runs")) < args.runs:
        print(f"building {args.runs} runs in {root} ...", flush=True)
        print(f"  built in {build(root, args.runs):.1f} s", flush=True)
    comp = workdir / "compacted"
    link_copy(root, comp)
    print(f"archive: {args.runs} runs, {3 * args.runs} per-run files")
    print("each cell: the operation alone (the whole fresh process, with imports) and peak RSS")
    print(f"{'':<30} {'per-file':>32}  | {'compacted':>32}")
    arch = "from evalb.archive import Archive"
    c = timed(
        f"{arch}; from evalb.compact import compact", f"compact(Archive.open({str(comp)!r}), grace=0).rows"
    )
    row("compact (grace 0)", c)
    print(f"  rows folded: {c[3]}")
    slots = "len(Archive.open({!r}).committed_slots())"
    row("committed_slots()", timed(arch, slots.format(str(root))), timed(arch, slots.format(str(comp))))
    ev = "Archive.open({!r}).read('events', ['run_id', 'seq']).height"
    row("read events (run_id, seq)", timed(arch, ev.format(str(root))), timed(arch, ev.format(str(comp))))
    if not args.no_score:
        imp = "from analysis.checker import score_archive; from analysis.judge import KeywordJudge"
        score = "score_archive({!r}, judge=KeywordJudge(), rescore=True, write=False).scores.height"
        row(
            "rescore (keyword judge)",
            timed(imp, score.format(str(root))),
            timed(imp, score.format(str(comp))),
        )
    ids = sorted(p.removesuffix(".parquet") for p in os.listdir(root / "runs"))
    shard_a, shard_b, dest = workdir / "shard-a", workdir / "shard-b", workdir / "merged"
    m = "from evalb.merge import merge"
    merge_op = f"merge([{str(shard_a)!r}, {str(shard_b)!r}], {str(dest)!r}).added_runs"
    for label, compacted in (("per-file", False), ("compacted", True)):
        for p in (shard_a, shard_b, dest):
            shutil.rmtree(p, ignore_errors=True)
        link_copy(root, shard_a, set(ids[0::2]))
        link_copy(root, shard_b, set(ids[1::2]))
        if compacted:
            for s in (shard_a, shard_b):
                timed(
                    f"{arch}; from evalb.compact import compact",
                    f"compact(Archive.open({str(s)!r}), grace=0).runs",
                )
        row(f"merge 2 shards ({label})", timed(m, merge_op))
        row("  the same merge rerun", timed(m, merge_op))
    for p in (shard_a, shard_b, dest, comp):
        shutil.rmtree(p, ignore_errors=True)


if __name__ == "__main__":
    main()
