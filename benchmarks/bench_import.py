"""Benchmark (not a test): bulk `evalb-record import` against one process per transcript.

    .venv/bin/python benchmarks/bench_import.py [--transcripts 300] [--sample 20] [--existing 20000]
                                                [--workdir DIR] [--profile]

Writes a corpus of synthetic stream-json transcripts shaped like the client's (hook, init, Read
results holding the fixture's files, Bash output, text; 20 KB to 400 KB, ~165 KB on average), then
measures, each in a fresh process started as a user would:
  1. bulk: one `evalb-record import DIR` of the whole corpus into a new archive;
  2. per process: `evalb-record import FILE` once per transcript for a sample (the old way);
  3. the cost of a large archive: an archive already holding --existing runs (seeded by copying
     200 distinct runs files, the only table the slot index reads), then one single-file import
     into it, and the bulk import of the corpus into it.
Prints wall time, CPU time (of the child, all threads), MB/s of JSONL and transcripts/s, and the
load average (the machine is shared: wall figures move with it; MB per CPU-second does not).
--profile also prints where an in-process bulk import spends its time (cProfile, main thread; the
committer thread's share shows as the wait in `close`).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXE = REPO / ".venv" / "bin" / "evalb-record"
SIZES = (20_000, 60_000, 180_000, 400_000)


def make_transcript(i: int, target: int) -> str:
    """One synthetic session of about `target` bytes."""
    from analysis import fabricate as fab

    project = REPO / "fixture" / "project"
    files = sorted(p for p in project.rglob("*") if p.is_file() and "docs" not in p.parts)
    rng = random.Random(i)
    b = fab.TranscriptBuilder()
    b.hook().init()
    size = 0
    while size < target:
        f = rng.choice(files)
        rel = str(f.relative_to(project))
        r = rng.random()
        if r < 0.5:
            b.read(rel, f.read_text())
        elif r < 0.8:
            b.bash(f"grep -n def {rel}", "\n".join(f"{k}: def m{k}" for k in range(rng.randint(1, 40))))
        else:
            b.text(f"Looking at {rel}. " + "The delivery retries with backoff. " * rng.randint(1, 20))
        size = sum(len(x) + 1 for x in b.lines)
    b.result("Done: " + "summary " * 20)
    return "\n".join(b.lines) + "\n"


def make_corpus(dest: Path, n: int) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = dest / f"t{i:05d}.jsonl"
        if not p.exists():
            p.write_text(make_transcript(i, random.Random(10_000 + i).choice(SIZES)))
        out.append(p)
    return out


def seed_archive(root: Path, n: int) -> float:
    """An archive holding `n` committed runs files (200 distinct ones, copied); seconds taken."""
    import polars as pl

    from evalb.archive import Archive
    from evalb.schema import to_frame
    from runner.importer import import_transcript

    t = time.perf_counter()
    archive = Archive(root)
    run = import_transcript(
        REPO / "tests/runner/golden/no-plugin.jsonl", archive, scenario="R1", model="haiku"
    )
    assert run is not None
    row = to_frame("runs", [run])
    runs = root / "runs"
    templates = []
    for k in range(200):
        slot = f"import|R1|haiku|{k:016x}" if k % 2 else f"R1|haiku|seedhash|{k}"
        p = runs.parent / f"template-{k}.parquet"
        row.with_columns(pl.lit(f"seed{k}").alias("run_id"), pl.lit(slot).alias("slot")).write_parquet(p)
        templates.append(p.read_bytes())
        p.unlink()
    for i in range(n - 1):
        (runs / f"seed{i:07d}.parquet").write_bytes(templates[i % len(templates)])
    return time.perf_counter() - t


def timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall, child CPU seconds, result) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
    return wall, cpu, res


def loop_line(label: str, res: subprocess.CompletedProcess[str], n: int) -> None:
    """The import loop alone, as the command's summary line times it (process start excluded)."""
    m = re.search(r"\(([0-9.]+) MB in ([0-9.]+) s\)", res.stderr)
    if m:
        mb, secs = float(m[1]), float(m[2])
        print(
            f"{label:44s} {secs:8.2f} s wall {'':15s} | {mb / secs:7.2f} MB/s {n / secs:8.1f} transcripts/s"
        )


def line(label: str, wall: float, cpu: float, mb: float, n: int) -> None:
    print(
        f"{label:44s} {wall:8.2f} s wall {cpu:8.2f} s cpu | {mb / wall:7.2f} MB/s "
        f"{n / wall:8.1f} transcripts/s | {mb / cpu:7.2f} MB/cpu-s",
        flush=True,
    )


def profile(files: list[Path], root: Path) -> None:
    import cProfile
    import pstats

    from evalb.archive import Archive
    from runner.import_inputs import ImportItem
    from runner.importer import Importer

    items = [ImportItem(f, "R1", "haiku") for f in files]
    importer = Importer(Archive(root))
    prof = cProfile.Profile()
    prof.enable()
    importer.run(items)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transcripts", type=int, default=300)
    ap.add_argument("--sample", type=int, default=20, help="transcripts imported one process each")
    ap.add_argument("--existing", type=int, default=20_000, help="runs already in the large archive")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="evalb-bench-import-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"workdir {work}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)

    files = make_corpus(work / "corpus", args.transcripts)
    mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"corpus: {len(files)} transcripts, {mb:.1f} MB of JSONL ({mb * 1000 / len(files):.0f} KB average)")
    common = ["--scenario", "R1", "--model", "haiku"]

    a = work / "bulk"
    shutil.rmtree(a, ignore_errors=True)
    wall, cpu, res = timed([str(EXE), "import", str(work / "corpus"), *common, "--archive", str(a)])
    line("bulk: one process, whole corpus", wall, cpu, mb, len(files))
    loop_line("  its import loop (process start excluded)", res, len(files))

    a = work / "per-process"
    shutil.rmtree(a, ignore_errors=True)
    sample = files[: args.sample]
    smb = sum(f.stat().st_size for f in sample) / 1e6
    wall = cpu = 0.0
    for f in sample:
        w, c, _ = timed([str(EXE), "import", str(f), *common, "--archive", str(a)])
        wall, cpu = wall + w, cpu + c
    line(f"per process: one per transcript ({len(sample)})", wall, cpu, smb, len(sample))

    big = work / f"existing-{args.existing}"
    if not (big / "runs").is_dir() or len(os.listdir(big / "runs")) < args.existing:
        shutil.rmtree(big, ignore_errors=True)
        secs = seed_archive(big, args.existing)
        print(f"seeded an archive of {args.existing} runs in {secs:.1f} s")
    from evalb.archive import Archive
    from runner.importer import ImportIndex

    t = time.perf_counter()
    "import|x" in ImportIndex(Archive(big))  # noqa: B015 (builds the index)
    print(f"slot index of {args.existing} runs files (slot column only): {time.perf_counter() - t:.2f} s")
    big_copy = work / "existing-copy"
    shutil.rmtree(big_copy, ignore_errors=True)
    shutil.copytree(big, big_copy)
    f = files[-1]
    w, c, _ = timed([str(EXE), "import", str(f), *common, "--archive", str(big_copy)])
    line(f"per process into {args.existing} runs: 1 transcript", w, c, f.stat().st_size / 1e6, 1)
    wall, cpu, res = timed([str(EXE), "import", str(work / "corpus"), *common, "--archive", str(big_copy)])
    line(f"bulk into {args.existing} runs: whole corpus", wall, cpu, mb, len(files))
    loop_line("  its import loop (index read included)", res, len(files))
    print(f"load average {os.getloadavg()[0]:.1f}")

    if args.profile:
        root = work / "profiled"
        shutil.rmtree(root, ignore_errors=True)
        profile(files, root)


if __name__ == "__main__":
    main()
