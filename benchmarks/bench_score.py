"""Benchmark (not a test): rescoring at 10k-100k+ runs, per-run files and compacted, vs one process per transcript.

    .venv/bin/python benchmarks/bench_score.py [--runs 10000 100000] [--sample 50] [--workdir DIR]
        [--multiply K] [--report]

Builds synthetic archives of N runs shaped like real transcripts (20-60 events each, every
variant, passing, failing and invalid behaviours: TEMPLATES distinct transcripts committed with
evalb.archive, copied under new run ids), primes each with one scoring pass (judge answers
cached: the keyword judge stands in for the model, so no API is called), compacts a copy (one
sorted, row-grouped file per table: `compact_archive`), then measures in fresh processes:
  1. `evalb-score --tsv` over each archive, per-run files and compacted (wall, peak RSS);
  2. (--multiply K) the same over a simulated archive of K x the largest N runs, compacted;
  3. (--report) `evalb summary` and `evalb report` at the smallest N;
  4. the same rules applied one transcript per process: a subprocess per run that loads its
     JSONL, parses it and scores it alone in DuckDB, timed on a sample and extrapolated.
Prints one Markdown table (docs/scoring.md, "Scale").
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
    copies = [(str(tmpl), str(root), s, min(s + 5000, n)) for s in range(have, n, 5000)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_copy_chunk, copies))
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
            "arm": ["default"],
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


#: The judge the benchmark's CLI runs use (ADR_EVAL_B_JUDGE_CMD): its answers are cached by the
#: first pass (`prime`), so no rescore asks it; it is never run.
JUDGE_CMD = "false"


def prime(root: Path) -> None:
    """Score the archive once, the keyword judge answering under JUDGE_CMD's name, so that the
    benchmarked `evalb-score` passes find every judge answer cached and a previous score per run."""
    from analysis.checker import score_archive
    from analysis.judge import CommandJudge, KeywordJudge

    if Archive(root).has_rows("scores"):
        return

    class Cached(KeywordJudge):
        name = CommandJudge(JUDGE_CMD).name

    sp = score_archive(root, judge=Cached())
    print(
        f"  primed {root.name}: {sp.scores.height} runs, {sp.judge_calls} judge answers cached, "
        f"{sorted(sp.scores['verdict'].value_counts().rows())}",
        flush=True,
    )


def compact_archive(src: Path, dst: Path) -> None:
    """A copy of the archive compacted by `evalb archive compact` (evalb.compact): large sorted,
    row-grouped batch files; a second pass with grace 0 deletes the small files the first covered."""
    import shutil

    from evalb.compact import compact

    if (dst / "compaction" / "manifest.json").exists():
        return
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    compact(Archive.open(dst), grace=0)
    compact(Archive.open(dst), grace=0)  # sweeps what the first one covered


def multiply(src: Path, dst: Path, copies: int) -> None:
    """A simulated archive of `copies` x the runs of compacted archive `src`: copy k renames every
    run id to `k<k>-<id>` (slots too), one sorted file per table and copy (plain files, read as small
    files are; like what repeated compaction leaves); judgements and scores are copied with it, so every judge answer is cached."""
    import duckdb

    if (dst / "archive.json").exists():
        return
    con = duckdb.connect(config={"memory_limit": "2GB", "threads": 2, "temp_directory": str(dst / ".spill")})
    for t in ("runs", "events", "artifacts", "judgements", "scores", "inflight", "locks"):
        (dst / t).mkdir(parents=True, exist_ok=True)
    for k in range(copies):
        for t in ("runs", "events", "artifacts", "judgements", "scores"):
            files = Archive(src).files(t)
            if not files:
                continue
            con.read_parquet(files, union_by_name=True).create_view("src")
            slot = f", 'k{k}-' || slot AS slot" if t == "runs" else ""
            dest = str(dst / t / f"copy-{k:06d}.parquet").replace("'", "''")
            con.execute(
                f"COPY (SELECT * REPLACE ('k{k}-' || run_id AS run_id{slot}) FROM src ORDER BY run_id) "
                f"TO '{dest}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 20000)"
            )
    con.close()
    (dst / "archive.json").write_text((src / "archive.json").read_text())


#: CPU seconds (user + system) of the last `timed` command: on a shared machine, less noisy than wall time.
LAST_CPU = [0.0]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Run a command in a fresh process; return (wall seconds, its peak RSS in KiB, its stdout)."""
    t = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%U %S %M", *cmd],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    elapsed = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed: {proc.stderr[-2000:]}")
    user, system, rss = proc.stderr.strip().splitlines()[-1].split()
    LAST_CPU[0] = float(user) + float(system)
    return elapsed, int(rss), proc.stdout


def rescore_cli(root: Path, tree: Path | None = None) -> tuple[float, int, int]:
    """`evalb-score --tsv` over the archive (judge answers cached): wall s, peak RSS KiB, rows
    printed; with `tree`, the evalb-score of that source tree (e.g. `git archive` of an older commit)."""
    exe = [str(Path(sys.executable).with_name("evalb-score"))]
    if tree is not None:
        exe = [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(tree)!r}); from cli.score import main; main()",
        ]
    wall, rss, out = timed([*exe, "--archive", str(root), "--tsv"], {"ADR_EVAL_B_JUDGE_CMD": JUDGE_CMD})
    return wall, rss, out.count("\n")


def cli_time(args: list[str]) -> tuple[float, int]:
    wall, rss, _ = timed([str(Path(sys.executable).with_name("evalb")), *args])
    return wall, rss


class _Rows(list[tuple[str, float, int, str]]):
    """The result table: a Markdown header when made, each row printed as it is added."""

    def __init__(self, rows: list[tuple[str, float, int, str]] | None = None) -> None:
        super().__init__()
        print(f"| {'case':<52} | {'wall':>9} | {'CPU':>9} | {'peak RSS':>9} | |")
        print(f"|{'-' * 54}|{'-' * 11}:|{'-' * 11}:|{'-' * 11}:|---|", flush=True)
        for row in rows or []:
            self.append(row)

    def append(self, row: tuple[str, float, int, str]) -> None:
        """Add a row measured by `timed` just now (its CPU time is taken from LAST_CPU)."""
        super().append(row)
        name, wall, rss, note = row
        cpu = f"{LAST_CPU[0]:>8.1f}s" if LAST_CPU[0] else f"{'':>9}"
        LAST_CPU[0] = 0.0
        print(f"| {name:<52} | {wall:>8.1f}s | {cpu} | {rss / 1024:>7.0f}MB | {note} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--sample", type=int, default=50, help="runs scored one process each")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "evalb-bench-score")
    ap.add_argument(
        "--multiply",
        type=int,
        default=0,
        metavar="COPIES",
        help="also a simulated archive of COPIES x the largest --runs, compacted",
    )
    ap.add_argument(
        "--report", action="store_true", help="also time evalb summary and evalb report at the smallest size"
    )
    ap.add_argument(
        "--old-tree", type=Path, help="also time the evalb-score of this source tree (the code before)"
    )
    ap.add_argument(
        "--skip-rescore", action="store_true", help="build and compact, but time only the other cases"
    )
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(score_one(Path(args.one[0]), args.one[1], Path(args.one[2])))
        print(peak_rss_kib())
        return
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    rows = _Rows()
    for n in args.runs:
        root = work / f"archive-{n}"
        if not (root / "runs").is_dir() or len(os.listdir(root / "runs")) < n:
            print(f"building {n} runs in {root} ...", flush=True)
            print(f"  built in {build(root, n):.0f} s", flush=True)
        prime(root)
        compact = work / f"compact-{n}"
        compact_archive(root, compact)
        for name, where in (
            (f"per-run files ({3 * n:,} files)", root),
            ("compacted (evalb archive compact)", compact),
        )[: 0 if args.skip_rescore else 2]:
            wall, rss, printed = rescore_cli(where)
            rows.append((f"{n:,} runs, {name}", wall, rss, f"{printed:,} rows"))
            if args.old_tree and where == root:
                wall, rss, printed = rescore_cli(where, args.old_tree)
                rows.append(("  the same before (every table loaded first)", wall, rss, f"{printed:,} rows"))
    if args.multiply:
        n = max(args.runs)
        big = work / f"simulated-{n * args.multiply}"
        print(f"simulating {n * args.multiply:,} runs in {big} ...", flush=True)
        multiply(work / f"compact-{n}", big, args.multiply)
        wall, rss, printed = rescore_cli(big)
        rows.append(
            (
                f"{n * args.multiply:,} runs, compacted ({args.multiply} files per table)",
                wall,
                rss,
                f"{printed:,} rows",
            )
        )
    if args.report:
        n = min(args.runs)
        for name, root in (("per-run files", work / f"archive-{n}"), ("compacted", work / f"compact-{n}")):
            wall, rss = cli_time(["summary", "--archive", str(root)])
            rows.append((f"evalb summary, {n:,} runs, {name}", wall, rss, ""))
            out = work / f"report-{n}-{name.split()[0]}.html"
            wall, rss = cli_time(["report", "--archive", str(root), "--out", str(out)])
            side = sum(f.stat().st_size for f in out.with_name(f"{out.stem}.runs").glob("*.js"))
            rows.append(
                (
                    f"evalb report, {n:,} runs, {name}",
                    wall,
                    rss,
                    f"{out.stat().st_size / 1e6:.1f} MB html + {side / 1e6:.0f} MB of pages",
                )
            )
    if not args.sample:
        return
    with tempfile.TemporaryDirectory() as tmp:
        pp_s, pp_rss = per_process(Path(tmp), max(args.runs), args.sample)
    per_run = pp_s / args.sample
    rows.append(
        (
            f"one process per transcript ({args.sample}-run sample)",
            pp_s,
            pp_rss,
            f"{per_run * 1000:.0f} ms/run",
        )
    )
    for n in args.runs:
        rows.append((f"  extrapolated to {n:,} runs", per_run * n, pp_rss, ""))
    print()
    print("(the table again, CPU times above)")
    for name, wall, rss, note in rows:
        print(f"| {name:<52} | {wall:>8.1f}s | {rss / 1024:>7.0f}MB | {note} |")
    for n in args.runs:
        cli = next((w for name, w, _, _ in rows if name.startswith(f"{n:,} runs, per-run")), None)
        if cli is None:
            continue
        print(
            f"speed-up over one process per transcript at {n:,} runs: {per_run * n / cli:.0f}x (per-run files)"
        )


if __name__ == "__main__":
    main()
