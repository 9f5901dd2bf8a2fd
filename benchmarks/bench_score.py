"""Benchmark (not a test): full-archive rescoring vs one transcript per process, as the spec's bin/check did.

    .venv/bin/python benchmarks/bench_score.py [--runs 10000] [--sample 100] [--workdir DIR]

Builds a synthetic archive of N runs shaped like real transcripts (20-60 events each, every
variant, passing, failing and invalid behaviours; committed with evalb.archive like real runs),
then measures in fresh processes:
  1. a full score pass over the archive (analysis.checker.score_archive, judge answers cached
     after the first pass; the keyword judge stands in for the model so no API is called);
  2. (--compact) the same pass over a copy with one file per table;
  3. the same rules applied one transcript per process: a subprocess per run that loads its
     JSONL, parses it and scores it alone in DuckDB, timed on a sample and extrapolated to N.
Prints wall time (of a fresh process: Python start and imports included) and peak RSS side by
side, plus how long loading the inputs alone takes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analysis import fabricate as fab  # noqa: E402
from evalb.archive import Archive  # noqa: E402
from evalb.scenarios import load_scenarios  # noqa: E402

BEHAVIOURS = ("perfect", "oblivious", "untouched", "prose", "nohook")


def _padded(made: fab.Fabricated, rng: random.Random, target: int) -> fab.Fabricated:
    """Insert ordinary code-reading tool calls after the init line until the run has ~target events."""
    lines = list(made.lines)
    init = next(i for i, ln in enumerate(lines) if '"subtype":"init"' in ln)
    b = fab.TranscriptBuilder()
    while len(lines) + len(b.lines) < target:
        f = rng.choice(["lib/relay/delivery.rb", "lib/relay/signer.rb", "test/delivery_test.rb", "Rakefile"])
        if rng.random() < 0.5:
            b.read(f, "def deliver\n  # ...\nend\n" * rng.randint(1, 30))
        else:
            b.bash(f"grep -n def {f}", "3: def deliver\n9: def retry_at\n")
    return fab.Fabricated(lines[: init + 1] + b.lines + lines[init + 1 :], made.files)


def _make(i: int) -> tuple[str, str, list[str], list[fab.SandboxFile], str]:
    rng = random.Random(i)
    scenarios = load_scenarios()
    adrs = fab.load_adrs()
    sc = rng.choice(scenarios)
    v = rng.choice(sc.all_variants())
    beh = rng.choices(BEHAVIOURS, weights=[5, 3, 1, 1, 1])[0]
    if beh == "perfect":
        made = fab.perfect(sc, v, adrs)
    elif beh == "oblivious":
        made = fab.oblivious(sc)
    elif beh == "untouched":
        made = fab.untouched(sc)
    elif beh == "prose":
        made = fab.prose_only(sc, adrs) if sc.kind.value == "retrieval" else fab.proposes_in_prose(sc)
    else:
        made = fab.no_hook(sc, sc.all_variants()[0], adrs)
    made = _padded(made, rng, rng.randint(20, 60))
    return v.id, sc.id, made.lines, made.files, rng.choice(["haiku", "sonnet"])


def _commit_chunk(args: tuple[str, int, int]) -> None:
    root, start, stop = args
    archive = Archive(root)
    for i in range(start, stop):
        variant, scenario, lines, files, model = _make(i)
        fab.archive_transcript(
            archive,
            lines,
            variant=variant,
            scenario=scenario,
            model_alias=model,
            rep=i,
            files=files,
            source="import",
            run_id=f"tmpl{i:06d}",
        )


#: Distinct synthetic transcripts; run i of a large archive is a copy of template i % TEMPLATES
#: under its own run id, rep and slot (building 100,000 transcripts one by one takes an hour).
TEMPLATES = 1000
_TABLES = ("artifacts", "events", "runs")


def _run_id(i: int) -> str:
    return f"bench{i:07d}"


def _copy_chunk(args: tuple[str, str, int, int]) -> None:
    """Write runs start..stop as per-run files (the layout `Archive.commit_run` writes), each a
    copy of a template with its run id, rep and slot replaced."""
    import polars as pl

    tmpl_root, root, start, stop = args
    frames = {t: pl.read_parquet(f"{tmpl_root}/{t}/*.parquet") for t in _TABLES}
    by_tmpl = {t: dict(frames[t].group_by("run_id")) for t in _TABLES}
    for i in range(start, stop):
        key = (f"tmpl{i % TEMPLATES:06d}",)
        rid = _run_id(i)
        for t in _TABLES:  # runs last, as a commit
            df = by_tmpl[t].get(key, frames[t].clear()).with_columns(run_id=pl.lit(rid))
            if t == "runs":
                df = df.with_columns(
                    rep=pl.lit(i, dtype=df.schema["rep"]),
                    slot=pl.col("variant") + "|" + pl.col("model_alias") + f"|fabricated|{i}",
                )
            df.write_parquet(Path(root) / t / f"{rid}.parquet", compression="zstd", statistics=True)


def build(root: Path, n: int) -> float:
    """Create the synthetic archive of n runs (two worker processes); return seconds taken."""
    Archive(root).ensure()
    t = time.perf_counter()
    tmpl = root.parent / "templates"
    k = min(n, TEMPLATES)
    if not (tmpl / "runs").is_dir() or len(os.listdir(tmpl / "runs")) < k:
        Archive(tmpl).ensure()
        chunks = [(str(tmpl), s, min(s + 100, k)) for s in range(0, k, 100)]
        with ProcessPoolExecutor(max_workers=2) as pool:
            list(pool.map(_commit_chunk, chunks))
    have = len(os.listdir(root / "runs"))
    chunks = [(str(tmpl), str(root), s, min(s + 5000, n)) for s in range(have, n, 5000)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_copy_chunk, chunks))
    return time.perf_counter() - t


# --- one process per transcript (the bin/check way) --------------------------------------------
def score_one(jsonl: Path, variant: str, files_json: Path) -> str:
    """Score one transcript alone: parse its JSONL, load it into a fresh DuckDB, run the same rules."""
    import duckdb
    import polars as pl

    from analysis.checker import _check_patterns, load_rules, run_rules, scenario_tables
    from analysis.rules import FINAL
    from analysis.rules.shell import register_shell_table
    from evalb.schema import to_frame
    from evalb.transcript import TranscriptSummary, parse_lines

    lines = jsonl.read_text().splitlines()
    events = to_frame("events", parse_lines("one", lines))
    summary = TranscriptSummary()
    for line in lines:
        summary.feed(line)
    runs = pl.DataFrame(
        {
            "run_id": ["one"],
            "scenario": [variant.split("-")[0]],
            "variant": [variant],
            "model_alias": ["m"],
            "plugin_hash": [None],
            "rep": [0],
            "started_at": [None],
            "outcome": ["completed"],
            "outcome_detail": [""],
            "reached_model": [summary.reached_model],
            "plugin_name": ["os-adr"],
        },
        schema_overrides={"plugin_hash": pl.String, "started_at": pl.Datetime("us", "UTC")},
    )
    files = json.loads(files_json.read_text())
    artifacts = pl.DataFrame(
        [
            {
                "run_id": "one",
                "path": f["path"],
                "kind": "file",
                "change": f["change"],
                "git_status": None,
                "content": f["content"],
            }
            for f in files
        ],
        schema={
            "run_id": pl.String,
            "path": pl.String,
            "kind": pl.String,
            "change": pl.String,
            "git_status": pl.String,
            "content": pl.String,
        },
    )
    meta, pats = scenario_tables()
    con = duckdb.connect()
    _check_patterns(con, pats)
    for name, df in [
        ("runs", runs),
        ("events", events),
        ("artifacts", artifacts),
        ("scenario_meta", meta),
        ("scenario_patterns", pats),
    ]:
        con.register(f"_{name}", df)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _{name}")
    register_shell_table(con)
    con.execute("CREATE TABLE judge_verdicts (run_id VARCHAR, verdict VARCHAR, raw_output VARCHAR)")
    run_rules(con, load_rules())
    return con.sql(f"SELECT verdict FROM {FINAL}").fetchall()[0][0]


def per_process(workdir: Path, n: int, sample: int) -> tuple[float, int]:
    """Seconds and peak RSS (KiB) for `sample` runs scored one process each."""
    items = []
    for i in range(sample):
        variant, _scenario, lines, files, _model = _make(i)
        j = workdir / f"t{i}.jsonl"
        j.write_text("\n".join(lines) + "\n")
        f = workdir / f"t{i}.files.json"
        f.write_text(json.dumps([{"path": x.path, "change": x.change, "content": x.content} for x in files]))
        items.append((j, variant, f))
    t = time.perf_counter()
    peak = 0
    for j, variant, f in items:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(j), variant, str(f)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        peak = max(peak, int(out[-1]))  # each child prints its own VmHWM last
    elapsed = time.perf_counter() - t
    return elapsed, peak


def peak_rss_kib() -> int:
    """This process's own peak RSS (VmHWM). Not ru_maxrss: Linux carries that across fork+exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def compact_archive(src: Path, dst: Path) -> None:
    """A copy of the archive with one Parquet file per table (what compaction would give)."""
    import polars as pl

    if (dst / "archive.json").exists():
        return
    for t in ("runs", "events", "artifacts", "judgements", "scores", "inflight", "locks"):
        (dst / t).mkdir(parents=True, exist_ok=True)
    for t in ("runs", "events", "artifacts"):
        pl.scan_parquet(f"{src}/{t}/*.parquet").collect().write_parquet(
            dst / t / "all.parquet", compression="zstd"
        )
    (dst / "archive.json").write_text((src / "archive.json").read_text())


def timed_child(code: str) -> tuple[float, int, str]:
    """Run python code in a fresh process; return (wall seconds, its peak RSS in KiB, its stdout)."""
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}\n"
            "print('RSS', next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')))",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t
    out = proc.stdout.strip().splitlines()
    rss = int(out[-1].split()[1])
    return elapsed, rss, "\n".join(out[:-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--compact", action="store_true", help="also time a copy with one file per table")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(score_one(Path(args.one[0]), args.one[1], Path(args.one[2])))
        print(peak_rss_kib())
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="evalb-bench-"))
    root = workdir / "archive"
    if not (root / "runs").is_dir() or len(os.listdir(root / "runs")) < args.runs:
        print(f"building {args.runs} runs in {root} ...", flush=True)
        print(f"  built in {build(root, args.runs):.1f} s")
    n_events = timed_child(
        f"import duckdb; print(duckdb.sql(\"SELECT count(*) FROM read_parquet('{root}/events/*.parquet')\").fetchall()[0][0])"
    )[2]
    print(f"archive: {args.runs} runs, {n_events} event rows, {3 * args.runs} Parquet files")

    score = (
        "from analysis.checker import score_archive; from analysis.judge import KeywordJudge\n"
        f"sp = score_archive({str(root)!r}, judge=KeywordJudge(), rescore=True)\n"
        "print(sp.scores.height, sp.judge_calls, sorted(sp.scores['verdict'].value_counts().rows()))"
    )
    first_s, first_rss, first_out = timed_child(score)
    again_s, again_rss, again_out = timed_child(score)
    read_s, read_rss, _ = timed_child(
        f"from pathlib import Path; from analysis.checker import load_inputs; load_inputs(Path({str(root)!r}))"
    )
    compact = workdir / "compact"
    if args.compact:
        compact_archive(root, compact)
        compact_s, compact_rss, _ = timed_child(score.replace(repr(str(root)), repr(str(compact))))
    with tempfile.TemporaryDirectory() as tmp:
        pp_s, pp_rss = per_process(Path(tmp), args.runs, args.sample)
    pp_total = pp_s / args.sample * args.runs

    print(f"first pass (judge asked unless cached from an earlier benchmark): {first_out}")
    print(f"rescore (judge cached):   {again_out}")
    print()
    print(f"{'':38} {'wall':>10} {'peak RSS':>10}")
    print(f"{'full rescore, whole archive (1 proc)':38} {again_s:>9.2f}s {again_rss / 1024:>8.0f}MB")
    print(f"{'first pass (keyword judge asked)':38} {first_s:>9.2f}s {first_rss / 1024:>8.0f}MB")
    print(f"{'loading the inputs alone':38} {read_s:>9.2f}s {read_rss / 1024:>8.0f}MB")
    if args.compact:
        print(
            f"{'full rescore, same runs compacted':38} {compact_s:>9.2f}s {compact_rss / 1024:>8.0f}MB  (1 file/table)"
        )
    print(
        f"{'one process per transcript (sample)':38} {pp_s:>9.2f}s {pp_rss / 1024:>8.0f}MB  ({args.sample} runs)"
    )
    print(f"{'  extrapolated to all runs':38} {pp_total:>9.0f}s {'':>10}  (x{args.runs // args.sample})")
    print(f"speed-up: {pp_total / again_s:.0f}x")


if __name__ == "__main__":
    main()
