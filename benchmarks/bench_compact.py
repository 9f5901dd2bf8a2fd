"""Benchmark (not a test): compaction and merge on a synthetic archive, per-file vs compacted reads.

    .venv/bin/python benchmarks/bench_compact.py [--runs 10000] [--workdir DIR] [--no-score]

Builds (or reuses) bench_score.py's synthetic archive of N runs, then, each step in a fresh
process (wall time with Python start, and peak RSS):
  1. `compact` (grace 0) on a hard-linked copy of the archive;
  2. `committed_slots()`, reading all events (run_id, seq), and a full rescore
     (analysis.checker.score_archive, keyword judge, nothing written), per-file vs compacted;
  3. `merge` of two shards (the runs split even/odd, hard-linked) into a new archive, and the same
     merge rerun (nothing to do).
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


def row(what: str, a: tuple[float, int, str], b: tuple[float, int, str] | None = None) -> None:
    left = f"{a[0]:7.2f} s {a[1] / 1024:7.0f} MB"
    right = f"   | {b[0]:7.2f} s {b[1] / 1024:7.0f} MB" if b else ""
    print(f"{what:<34} {left}{right}", flush=True)


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
    print(f"archive: {args.runs} runs, {3 * args.runs} per-run files; columns: wall, peak RSS")
    print(f"{'':<34} {'per-file':>18}   | {'compacted':>18}")
    c = timed_child(
        f"from evalb.archive import Archive; from evalb.compact import compact\n"
        f"r = compact(Archive.open({str(comp)!r}), grace=0); print(r.runs, r.rows)"
    )
    row(f"compact ({c[2]})", c)
    slots = "from evalb.archive import Archive; print(len(Archive.open({!r}).committed_slots()))"
    row("committed_slots()", timed_child(slots.format(str(root))), timed_child(slots.format(str(comp))))
    ev = "from evalb.archive import Archive; print(Archive.open({!r}).read('events', ['run_id', 'seq']).height)"
    row("read events (run_id, seq)", timed_child(ev.format(str(root))), timed_child(ev.format(str(comp))))
    if not args.no_score:
        score = (
            "from analysis.checker import score_archive; from analysis.judge import KeywordJudge\n"
            "print(score_archive({!r}, judge=KeywordJudge(), rescore=True, write=False).scores.height)"
        )
        row(
            "rescore (keyword judge)",
            timed_child(score.format(str(root))),
            timed_child(score.format(str(comp))),
        )
    ids = sorted(p.removesuffix(".parquet") for p in os.listdir(root / "runs"))
    shard_a, shard_b, dest = workdir / "shard-a", workdir / "shard-b", workdir / "merged"
    link_copy(root, shard_a, set(ids[0::2]))
    link_copy(root, shard_b, set(ids[1::2]))
    shutil.rmtree(dest, ignore_errors=True)
    m = "from evalb.merge import merge; r = merge([{!r}, {!r}], {!r}); print(r.added_runs, r.ok)"
    merge_code = m.format(str(shard_a), str(shard_b), str(dest))
    row("merge 2 shards (per-file)", timed_child(merge_code))
    row("merge rerun (nothing to do)", timed_child(merge_code))
    for p in (shard_a, shard_b, dest):
        shutil.rmtree(p, ignore_errors=True)
    link_copy(root, shard_a, set(ids[0::2]))
    link_copy(root, shard_b, set(ids[1::2]))
    for s in (shard_a, shard_b):
        timed_child(
            f"from evalb.archive import Archive; from evalb.compact import compact; compact(Archive.open({str(s)!r}), grace=0)"
        )
    row("merge 2 compacted shards", timed_child(merge_code))


if __name__ == "__main__":
    main()
