"""Scoring over the whole archive: the rules in analysis/rules run as DuckDB queries over every run at once.

One scoring pass: load runs/events/artifacts of the runs in scope into an in-memory DuckDB, join
in the scenario metadata as two small tables, run the rules in order, ask the judge only for W runs
that need it and were not judged before (judgements are cached by run, rubric hash and judge),
then write one scores file stamped with the checker hash and report the verdicts that flipped
against each run's latest previous score. SQL rules run over every run at once; the prose rules
(Python, analysis/rules/prose.py) read the retrieval runs' text rows once per pass, each distinct
message analysed once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from analysis import judge as judging
from analysis.rules import FINAL, JUDGE_INPUT, RULES
from analysis.rules.shell import register_shell_table
from evalb import paths
from evalb.archive import Archive, has_rows, read_table, table_glob
from evalb.errors import ArchiveError, ScenarioError
from evalb.scenarios import load_scenarios
from evalb.schema import columns, to_frame

#: Columns of `latest_scores` taken from the runs table (after every ScoreRecord column).
RUN_COLUMNS: tuple[str, ...] = (
    "model_id",
    "outcome",
    "started_at",
    "duration_ms",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "num_turns",
    "client_version",
    "plugin_name",
    "plugin_version",
    "source",
)

#: What of the events the rules read. The load is thinned, because moving every tool result and
#: every line's raw JSON into DuckDB would dominate a full rescore: only assistant, result and
#: system events are loaded (user events carry tool results and skill text, never evidence), and
#: `raw` only for hook_response events (the validity rule reads their fields from it).
#: A rule that needs more must widen this load.
_EVENT_COLUMNS = (
    "run_id",
    "seq",
    "type",
    "subtype",
    "block_type",
    "tool_name",
    "tool_input",
    "parent_tool_use_id",
)
_ARTIFACT_COLUMNS = ("run_id", "path", "kind", "change", "git_status", "content")
#: Runs columns the rules read (each extra column costs a read in each of the archive's run files).
_RUN_COLUMNS_READ = (
    "run_id",
    "scenario",
    "variant",
    "model_alias",
    "plugin_hash",
    "rep",
    "started_at",
    "outcome",
    "outcome_detail",
    "reached_model",
    "plugin_name",
)
_COMPARED = ("valid", "axis_a", "axis_b", "verdict", "reasons")


@dataclass(frozen=True)
class Rule:
    """One declared rule: its source file in the rules directory and the file's content hash."""

    name: str
    path: Path
    engine: str
    role: str
    source: str
    sha256: str

    @property
    def sql(self) -> str:
        """The SQL of an `sql` rule (kept for callers that read it)."""
        return self.source


@dataclass
class ScorePass:
    """What one scoring pass produced."""

    scores: pl.DataFrame
    """One row per run in scope: the ScoreRecord columns (plus `started_at` for ordering)."""
    flips: pl.DataFrame
    """run_id, variant, model_alias, rep, axis (A|B|verdict), old, new, old_checker_hash."""
    checker_hash: str
    written: Path | None = None
    judge_calls: int = 0
    judge_errors: list[str] = field(default_factory=list)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_rules(rules_dir: Path | None = None) -> list[Rule]:
    """The declared rules (analysis/rules/__init__.py: RULES) in execution order, each with its hash."""
    rules_dir = rules_dir or paths.RULES_DIR
    out = []
    for spec in RULES:
        path = rules_dir / spec.filename
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ScenarioError(f"checker rule {path} is missing: {e.strerror}") from e
        out.append(Rule(spec.name, path, spec.engine, spec.role, data.decode("utf-8"), _sha(data)))
    return out


def _rules_package(rules_dir: Path) -> str:
    """A package for the Python files of `rules_dir` (keyed by their content), so a rule module's
    relative imports (`from . import prose`) resolve inside the same directory, `--rules DIR` too."""
    h = hashlib.sha256(str(rules_dir.resolve()).encode())
    for path in sorted(rules_dir.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    name = f"_evalb_rules_{h.hexdigest()[:16]}"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(rules_dir)]
        pkg.__package__ = name
        sys.modules[name] = pkg
    return name


def run_rule(con: duckdb.DuckDBPyConnection, rule: Rule) -> None:
    """Run one rule on the connection: execute its SQL, or call its Python `rule(con)` and register
    the frame it returns as a table named like the rule."""
    if rule.engine == "sql":
        con.execute(rule.source)
        return
    module = importlib.import_module(f"{_rules_package(rule.path.parent)}.{rule.name}")
    frame = module.rule(con)
    if frame is None:
        return
    con.register(f"_rule_{rule.name}", frame)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {rule.name} AS SELECT * FROM _rule_{rule.name}")
    con.unregister(f"_rule_{rule.name}")


def run_rules(con: duckdb.DuckDBPyConnection, rules: list[Rule], upto: str = FINAL) -> None:
    """Run the rules in order up to and including `upto`; the verdict only when `upto` is FINAL."""
    for rule in rules:
        if rule.name == FINAL and upto != FINAL:
            break
        run_rule(con, rule)
        if rule.name == upto:
            break


def checker_hash(rules_dir: Path | None = None, rubric_path: Path | None = None) -> str:
    """Hash over every rule source (SQL and Python in the rules directory) and the judge rubric."""
    rules_dir = rules_dir or paths.RULES_DIR
    h = hashlib.sha256()
    for path in sorted([*rules_dir.glob("*.sql"), *rules_dir.glob("*.py")]):
        h.update(f"{path.name}\0{_sha(path.read_bytes())}\n".encode())
    h.update(f"rubric\0{judging.rubric_hash(rubric_path)}\n".encode())
    return h.hexdigest()[:16]


# --- inputs -------------------------------------------------------------------------------------
def scenario_tables(scenarios_dir: Path | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(scenario_meta, scenario_patterns): one row per variant, one row per (variant, role, pattern)."""
    meta: list[dict[str, object]] = []
    pats: list[dict[str, str]] = []
    for sc in load_scenarios(scenarios_dir):
        for v in sc.all_variants():
            meta.append(
                {
                    "variant": v.id,
                    "scenario": sc.id,
                    "kind": sc.kind.value,
                    "correct_adr": sc.correct_adr,
                    "match": sc.match,
                    "require_conflict": sc.require_conflict,
                    "distractors": list(sc.distractors),
                    "supersedes": sc.supersedes,
                    "expect_b": v.expect_b,
                }
            )
            for role, patterns in (
                ("content", sc.content_patterns),
                ("conflict", sc.conflict_patterns),
                ("topic", sc.topic_patterns),
            ):
                pats.extend({"variant": v.id, "role": role, "pattern": p} for p in patterns)
    meta_schema: dict[str, pl.DataType | type[pl.DataType]] = {
        "variant": pl.String,
        "scenario": pl.String,
        "kind": pl.String,
        "correct_adr": pl.String,
        "match": pl.String,
        "require_conflict": pl.Boolean,
        "distractors": pl.List(pl.String),
        "supersedes": pl.String,
        "expect_b": pl.String,
    }
    pat_schema = {"variant": pl.String, "role": pl.String, "pattern": pl.String}
    return pl.DataFrame(meta, schema=meta_schema), pl.DataFrame(pats, schema=pat_schema)


def _check_patterns(con: duckdb.DuckDBPyConnection, patterns: pl.DataFrame) -> None:
    """Scenario regexes are written for Python but run in RE2: name any that RE2 cannot compile."""
    for row in patterns.unique(["variant", "pattern"]).iter_rows(named=True):
        try:
            con.execute("SELECT regexp_matches('', ?)", [row["pattern"]]).fetchall()
        except duckdb.Error as e:
            raise ScenarioError(
                f"scenario {row['variant']}: pattern {row['pattern']!r} is not valid RE2: {e}",
                hint="avoid lookarounds and backreferences in scenario patterns",
            ) from e


def _scan(root: Path, table: str) -> pl.LazyFrame:
    """A lazy scan of one table's files; empty with the table's schema when there are none.

    Polars, not DuckDB's read_parquet, reads the files: with one small file per run and table,
    per-file overhead dominates, and Polars opens ~5x faster per file here (see docs/scoring.md).
    """
    if not has_rows(root, table):
        return to_frame(table, []).lazy()
    return pl.scan_parquet(table_glob(root, table), missing_columns="insert", extra_columns="ignore")


def load_inputs(
    root: Path, variant: str | None = None, model: str | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(runs, events, artifacts) of the runs in scope, with the columns the rules read."""
    runs_lf = _scan(root, "runs").select(_RUN_COLUMNS_READ)
    if variant:
        runs_lf = runs_lf.filter(pl.col("variant").str.to_lowercase() == variant.lower())
    if model:
        runs_lf = runs_lf.filter(pl.col("model_alias") == model)
    runs = runs_lf.collect()
    ids = runs.select("run_id").lazy()
    scoped = variant is not None or model is not None
    events_lf = (
        _scan(root, "events")
        .select(
            *_EVENT_COLUMNS,
            "text",
            raw=pl.when(pl.col("subtype") == "hook_response").then(pl.col("raw")),
        )
        .filter(pl.col("type").is_in(["assistant", "result", "system"]))
    )
    artifacts_lf = _scan(root, "artifacts").select(_ARTIFACT_COLUMNS)
    if scoped:
        events_lf = events_lf.join(ids, on="run_id", how="semi")
        artifacts_lf = artifacts_lf.join(ids, on="run_id", how="semi")
    events, artifacts = pl.collect_all([events_lf, artifacts_lf])
    return runs, events, artifacts


def rule_connection(
    root: Path | str,
    *,
    variant: str | None = None,
    model: str | None = None,
    scenarios_dir: Path | None = None,
    rules_dir: Path | None = None,
    upto: str = JUDGE_INPUT,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the inputs loaded and the rules run up to `upto` (for notebooks too)."""
    root = Path(root)
    if not Archive(root).exists():
        raise ArchiveError(
            f"{root} is not an evalb archive (no archive.json)", hint="pass the right --archive"
        )
    Archive(root).check_readable()
    runs, events, artifacts = load_inputs(root, variant, model)
    return connect_frames(
        runs, events, artifacts, scenarios_dir=scenarios_dir, rules_dir=rules_dir, upto=upto
    )


def connect_frames(
    runs: pl.DataFrame,
    events: pl.DataFrame,
    artifacts: pl.DataFrame,
    *,
    scenarios_dir: Path | None = None,
    rules_dir: Path | None = None,
    upto: str = JUDGE_INPUT,
) -> duckdb.DuckDBPyConnection:
    """The rule connection over given input frames (what `rule_connection` loads from an archive;
    tests pass frames built in memory): inputs and scenario tables loaded, rules run up to `upto`."""
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    for name, frame in (("runs", runs), ("events", events), ("artifacts", artifacts)):
        # One chunk per file read; handing DuckDB 10,000 chunks costs 10x more than rechunking first.
        con.register(f"_{name}", frame.rechunk())
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _{name}")
        con.unregister(f"_{name}")
    register_shell_table(con)  # what each Bash command reads/lists/searches/writes/runs
    meta, pats = scenario_tables(scenarios_dir)
    _check_patterns(con, pats)
    con.register("_meta", meta)
    con.register("_pats", pats)
    con.execute("CREATE TABLE scenario_meta AS SELECT * FROM _meta")
    con.execute("CREATE TABLE scenario_patterns AS SELECT * FROM _pats")
    run_rules(con, load_rules(rules_dir), upto)
    return con


# --- judge cache ---------------------------------------------------------------------------------
def _cached_judgements(root: Path, rubric: str, judge_name: str) -> pl.DataFrame:
    """The latest YES/NO answer per run for this rubric and judge (ERRORs are asked again)."""
    j = read_table(root, "judgements")
    return (
        j.filter(
            (pl.col("rubric_hash") == rubric)
            & (pl.col("judge") == judge_name)
            & pl.col("verdict").is_in(["YES", "NO"])
        )
        .sort("judged_at")
        .group_by("run_id", maintain_order=True)
        .last()
        .select("run_id", "verdict", "raw_output")
    )


def _judge(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    judge: judging.Judge | None,
    rubric_path: Path | None,
    write: bool,
) -> tuple[int, list[str]]:
    """Register `judge_verdicts` (cached answers + new ones); return (calls made, error lines)."""
    needed = con.sql("SELECT run_id, seq, text FROM final_message").pl()
    verdicts = pl.DataFrame(schema={"run_id": pl.String, "verdict": pl.String, "raw_output": pl.String})
    calls, errors = 0, []
    if needed.height:
        judge = judge or judging.default_judge()
        rubric = judging.rubric_hash(rubric_path)
        cached = _cached_judgements(root, rubric, judge.name).join(needed.select("run_id"), on="run_id")
        todo = needed.join(cached.select("run_id"), on="run_id", how="anti")
        records = judging.judge_many(
            judge,
            list(zip(todo["run_id"].to_list(), todo["text"].to_list(), strict=True)),
            rubric_path=rubric_path,
        )
        calls = len(records)
        errors = [f"{r.run_id}: {r.raw_output.strip()[:200]}" for r in records if r.verdict == "ERROR"]
        if write and records:
            Archive(root).append_rows("judgements", records)
        fresh = pl.DataFrame(
            [{"run_id": r.run_id, "verdict": r.verdict, "raw_output": r.raw_output} for r in records],
            schema=verdicts.schema,
        )
        verdicts = pl.concat([cached, fresh])
    con.register("_judge_verdicts", verdicts)
    con.execute("CREATE OR REPLACE TABLE judge_verdicts AS SELECT * FROM _judge_verdicts")
    return calls, errors


# --- scoring -------------------------------------------------------------------------------------
def _latest(root: Path) -> pl.DataFrame:
    scores = read_table(root, "scores")
    return scores.sort("scored_at").group_by("run_id", maintain_order=True).last()


def _ab(col: str) -> pl.Expr:
    return (
        pl.when(pl.col(col).is_null())
        .then(pl.lit("-"))
        .when(pl.col(col))
        .then(pl.lit("PASS"))
        .otherwise(pl.lit("FAIL"))
    )


def compute_flips(previous: pl.DataFrame, current: pl.DataFrame) -> pl.DataFrame:
    """Verdicts that changed between each run's latest previous score and the current one."""
    keys = ["run_id", "variant", "model_alias", "rep"]
    old = previous.select(
        "run_id", _ab("axis_a").alias("A"), _ab("axis_b").alias("B"), "verdict", "checker_hash"
    )
    new = current.select(*keys, _ab("axis_a").alias("A"), _ab("axis_b").alias("B"), "verdict")
    joined = new.join(old, on="run_id", suffix="_old")
    parts = [
        joined.filter(pl.col(ax) != pl.col(f"{ax}_old")).select(
            *keys,
            pl.lit(ax).alias("axis"),
            pl.col(f"{ax}_old").alias("old"),
            pl.col(ax).alias("new"),
            pl.col("checker_hash").alias("old_checker_hash"),
        )
        for ax in ("A", "B", "verdict")
    ]
    return pl.concat(parts).sort("variant", "model_alias", "rep", "run_id", "axis")


def score_archive(
    root: Path | str,
    *,
    judge: judging.Judge | None = None,
    write: bool = True,
    rescore: bool = False,
    variant: str | None = None,
    model: str | None = None,
    rules_dir: Path | None = None,
    scenarios_dir: Path | None = None,
    rubric_path: Path | None = None,
) -> ScorePass:
    """Score every run in the archive (or those of one variant/model); write a scores pass.

    A run's new row is written when it has no score yet, when its latest score came from another
    checker hash, when its verdict moved, or always with `rescore=True`. `judge` defaults to
    `analysis.judge.default_judge()` and is only built when some W run needs it.
    """
    root = Path(root)
    chash = checker_hash(rules_dir, rubric_path)
    con = rule_connection(
        root, variant=variant, model=model, scenarios_dir=scenarios_dir, rules_dir=rules_dir
    )
    calls, errors = _judge(con, root, judge, rubric_path, write)
    run_rule(con, next(r for r in load_rules(rules_dir) if r.name == FINAL))
    scored_at = dt.datetime.now(dt.UTC)
    scores = (
        con.sql(f"SELECT * FROM {FINAL}")
        .pl()
        .with_columns(
            checker_hash=pl.lit(chash),
            scored_at=pl.lit(scored_at).cast(pl.Datetime("us", "UTC")),
            rep=pl.col("rep").cast(pl.Int64),
            evidence_a=pl.col("evidence_a").cast(pl.List(pl.Int64)),
            evidence_b=pl.col("evidence_b").cast(pl.List(pl.Int64)),
        )
        .sort("variant", "model_alias", "rep", "started_at", "run_id")
    )
    con.close()
    previous = _latest(root).join(scores.select("run_id"), on="run_id")
    flips = compute_flips(previous, scores)
    result = ScorePass(scores=scores, flips=flips, checker_hash=chash, judge_calls=calls, judge_errors=errors)
    if write and scores.height:
        if rescore:
            changed = scores
        else:
            same = previous.filter(pl.col("checker_hash") == chash).select("run_id", *_COMPARED)
            changed = scores.join(same, on=["run_id", *_COMPARED], how="anti", nulls_equal=True)
        if changed.height:
            rows = changed.select(columns("scores")).to_dicts()
            result.written = Archive(root).append_rows("scores", rows)
    return result


def latest_scores(root: Path | str) -> pl.DataFrame:
    """The latest score row of every scored run, joined with its runs columns (see RUN_COLUMNS)."""
    root = Path(root)
    Archive(root).check_readable()
    latest = _latest(root)
    runs = read_table(root, "runs", columns=["run_id", *RUN_COLUMNS])
    return latest.join(runs, on="run_id", how="left").select([*columns("scores"), *RUN_COLUMNS])
