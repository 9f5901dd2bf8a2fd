"""Benchmark (not a test): per-rep scoring during a grid, old way (rescore the rep's variant × model
cell) against `score_runs` (score the new run alone).

    .venv/bin/python benchmarks/bench_per_rep.py [--reps 40] [--workdir DIR]

Commits `--reps` fabricated runs of one variant × model one at a time (as a grid does) into two
archives and, after each, scores the new run: in one archive the old way
(`score_archive(variant=…, model=…)`), in the other with `score_runs(archive, [run_id])`. The keyword
judge stands in for the model. Prints, for each way, the total and last per-rep scoring time and
the score rows and files written (the old way loads and rescores the whole cell at every rep, so
its work grows with the square of the cell size; it writes only rows whose verdict is new).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analysis import fabricate as fab  # noqa: E402
from analysis.checker import score_archive, score_runs  # noqa: E402
from analysis.judge import KeywordJudge  # noqa: E402
from evalb.archive import Archive  # noqa: E402
from evalb.scenarios import load_scenarios  # noqa: E402


def run(workdir: Path, reps: int) -> None:
    sc = next(s for s in load_scenarios() if s.id == "W1")
    adrs = fab.load_adrs()
    judge = KeywordJudge()
    for way in ("cell rescore", "score_runs"):
        archive = Archive.create_or_open(workdir / way.replace(" ", "-"))
        total = last = 0.0
        for i in range(reps):
            made = fab.perfect(sc, sc.all_variants()[0], adrs) if i % 2 else fab.oblivious(sc)
            rid = fab.archive_transcript(
                archive,
                made.lines,
                variant=sc.id,
                scenario=sc.id,
                model_alias="haiku",
                rep=i,
                files=made.files,
            )
            t = time.perf_counter()
            if way == "cell rescore":
                score_archive(archive, judge=judge, variant=sc.id, model="haiku")
            else:
                score_runs(archive, [rid], judge=judge)
            last = time.perf_counter() - t
            total += last
        rows = archive.read("scores").height
        print(
            f"{way:<13} {reps} reps: scoring {total:6.2f} s in all, last rep {last * 1000:6.0f} ms; "
            f"{rows} score rows in {len(archive.files('scores'))} files"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, args.reps)
    else:
        with tempfile.TemporaryDirectory() as d:
            run(Path(d), args.reps)


if __name__ == "__main__":
    main()
