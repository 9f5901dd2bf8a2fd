"""Scoring over the whole archive: the rules in analysis/rules run as DuckDB queries, a batch of runs at a time.

One scoring pass: the runs in scope are taken in run_id order, BATCH_RUNS at a time
(analysis/batches.py); each batch's runs/events/artifacts are read (only the columns the rules
read) into an in-memory DuckDB with the scenario metadata as two small tables, the rules run in
order, the judge is asked only for W runs that need it and were not judged before (judgements are
cached by run, rubric hash and judge), and the batch's new score rows are streamed into the pass's
one scores file, stamped with the checker hash; the verdicts that flipped against each run's latest
previous score are reported. Every rule is per run, so a batch scores exactly as a pass over all
runs at once would (tests/checker/test_streaming.py); the prose rules (Python,
analysis/rules/prose.py) read a batch's retrieval text rows once, each distinct message analysed once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import os
import sys
import tempfile
import types
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from analysis import batches as batching
from analysis import judge as judging
from analysis.rules import FINAL, JUDGE_INPUT, RULES
from analysis.rules.shell import register_shell_table
from evalb import paths
from evalb.archive import LATEST_RUN_COLUMNS, Archive
from evalb.errors import ScenarioError
from evalb.scenarios import load_scenarios
from evalb.schema import polars_schema, to_frame

#: Columns of `latest_scores` taken from the runs table (after every ScoreRecord column).
RUN_COLUMNS: tuple[str, ...] = LATEST_RUN_COLUMNS

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
    "arm",
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
    attempts: pl.DataFrame | None = None
    """run_id, slot, attempt of the runs scored (read with them, so no caller reads the runs again)."""

    def with_attempts(self) -> pl.DataFrame:
        """The scores with each run's slot and attempt (for `evalb.archive.last_attempts`)."""
        attempts = self.attempts
        if attempts is None:
            attempts = pl.DataFrame(schema={"run_id": pl.String, "slot": pl.String, "attempt": pl.Int64})
        return self.scores.join(attempts, on="run_id", how="left")


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
    """(scenario_meta, scenario_patterns): one row per variant, one row per (variant, role, pattern);
    an O scenario's done checks are patterns too, role 'done_present' / 'done_absent', with the
    file they apply to in `path` (null for every other role)."""
    meta: list[dict[str, object]] = []
    pats: list[dict[str, str | None]] = []
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
                pats.extend({"variant": v.id, "role": role, "pattern": p, "path": None} for p in patterns)
            for check in sc.done:
                for role, patterns in (("done_present", check.present), ("done_absent", check.absent)):
                    pats.extend(
                        {"variant": v.id, "role": role, "pattern": p, "path": check.path} for p in patterns
                    )
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
    pat_schema = {"variant": pl.String, "role": pl.String, "pattern": pl.String, "path": pl.String}
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


def as_archive(archive: Archive | Path | str) -> Archive:
    """`archive` itself, or the archive opened (and validated) at that path."""
    return archive if isinstance(archive, Archive) else Archive.open(archive)


def load_inputs(
    archive: Archive,
    variant: str | None = None,
    model: str | None = None,
    run_ids: list[str] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(runs, events, artifacts) of the runs in scope, with the columns the rules read.

    Polars, not DuckDB's read_parquet, reads the files: with one small file per run and table,
    per-file overhead dominates, and Polars opens ~5x faster per file here (see docs/scoring.md).
    """
    runs_lf = archive.scan("runs").select(_RUN_COLUMNS_READ)
    if run_ids is not None:
        runs_lf = runs_lf.filter(pl.col("run_id").is_in(run_ids))
    if variant:
        runs_lf = runs_lf.filter(pl.col("variant").str.to_lowercase() == variant.lower())
    if model:
        runs_lf = runs_lf.filter(pl.col("model_alias") == model)
    runs = runs_lf.collect()
    ids = runs.select("run_id").lazy()
    scoped = variant is not None or model is not None or run_ids is not None
    events_lf = _events(archive.scan("events"))
    artifacts_lf = _artifacts(archive.scan("artifacts"))
    if scoped:
        events_lf = events_lf.join(ids, on="run_id", how="semi")
        artifacts_lf = artifacts_lf.join(ids, on="run_id", how="semi")
    events, artifacts = pl.collect_all([events_lf, artifacts_lf])
    return runs, events, artifacts


def _events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """What of the events the rules read (see _EVENT_COLUMNS)."""
    return lf.select(
        *_EVENT_COLUMNS,
        "text",
        raw=pl.when(pl.col("subtype") == "hook_response").then(pl.col("raw")),
    ).filter(pl.col("type").is_in(["assistant", "result", "system"]))


def _artifacts(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.select(_ARTIFACT_COLUMNS)


def rule_connection(
    archive: Archive | Path | str,
    *,
    variant: str | None = None,
    model: str | None = None,
    run_ids: list[str] | None = None,
    scenarios_dir: Path | None = None,
    rules_dir: Path | None = None,
    upto: str = JUDGE_INPUT,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the inputs loaded and the rules run up to `upto` (for notebooks too)."""
    runs, events, artifacts = load_inputs(as_archive(archive), variant, model, run_ids)
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
    if "arm" not in runs.columns:  # a frame built without arms (schema v3): the one plugin's arm
        runs = runs.with_columns(arm=pl.lit("default"))
    con = _connection(scenarios_dir)
    _load(con, runs, events, artifacts)
    run_rules(con, load_rules(rules_dir), upto)
    return con


#: DuckDB's cap for one rule connection: a batch's inputs take a few hundred MB at most.
DUCKDB_MEMORY_LIMIT = "1GB"
#: Beyond the cap DuckDB spills to disk: into the system temp folder, never a `.tmp` in the cwd.
_DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "memory_limit": DUCKDB_MEMORY_LIMIT,
    "temp_directory": os.path.join(tempfile.gettempdir(), f"evalb-duckdb-{os.getpid()}"),
}


def _connection(scenarios_dir: Path | None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the scenario tables, its memory and threads capped (one batch of
    runs at a time never needs more)."""
    con = duckdb.connect(config=_DUCKDB_CONFIG | {"threads": max(1, min(4, os.cpu_count() or 1))})
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    meta, pats = scenario_tables(scenarios_dir)
    _check_patterns(con, pats)
    con.register("_meta", meta)
    con.register("_pats", pats)
    con.execute("CREATE TABLE scenario_meta AS SELECT * FROM _meta")
    con.execute("CREATE TABLE scenario_patterns AS SELECT * FROM _pats")
    con.unregister("_meta")
    con.unregister("_pats")
    return con


def _load(
    con: duckdb.DuckDBPyConnection, runs: pl.DataFrame, events: pl.DataFrame, artifacts: pl.DataFrame
) -> None:
    """(Re)load the input tables of the rules (one batch of runs) and the `shell_ops` they derive."""
    for name, frame in (("runs", runs), ("events", events), ("artifacts", artifacts)):
        # One chunk per file read; handing DuckDB 10,000 chunks costs 10x more than rechunking first.
        con.register(f"_{name}", frame.rechunk())
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _{name}")
        con.unregister(f"_{name}")
    register_shell_table(con)  # what each Bash command reads/lists/searches/writes/runs


# --- judge cache ---------------------------------------------------------------------------------
def _cached_judgements(archive: Archive, rubric: str) -> pl.DataFrame:
    """The latest YES/NO answer per (run, judge) for this rubric (ERRORs are asked again)."""
    j = archive.read("judgements")
    return (
        j.filter((pl.col("rubric_hash") == rubric) & pl.col("verdict").is_in(["YES", "NO"]))
        .sort("judged_at")
        .group_by("run_id", "judge", maintain_order=True)
        .last()
        .select("run_id", "judge", "verdict", "raw_output")
    )


def _judges_for(
    runs: pl.DataFrame, needed: pl.DataFrame, judge: judging.Judge | None
) -> dict[str, judging.Judge]:
    """run_id -> the judge that answers for it: `judge` when given, else `judging.select_judge` of
    the judge the run expects (options_json.judge, or its model alias); `runs` holds model_alias
    and options_json of (at least) the runs `needed`."""
    ids = needed["run_id"].to_list()
    if judge is not None:
        return dict.fromkeys(ids, judge)
    built: dict[str, judging.Judge] = {}
    out: dict[str, judging.Judge] = {}
    for r in runs.filter(pl.col("run_id").is_in(ids)).iter_rows(named=True):
        kind = judging.expected_judge(r["model_alias"] or "", r["options_json"])
        out[r["run_id"]] = built.setdefault(kind, judging.select_judge(kind))
    return out


@dataclass
class _JudgeState:
    """The judge side of one scoring pass: the cache (read once, when a run first needs it)."""

    archive: Archive
    judge: judging.Judge | None
    rubric_path: Path | None
    write: bool
    cached: pl.DataFrame | None = None
    calls: int = 0
    errors: list[str] = field(default_factory=list)


def _judge(con: duckdb.DuckDBPyConnection, runs: pl.DataFrame, state: _JudgeState) -> None:
    """Register `judge_verdicts` for the runs loaded in `con` (cached answers + new ones).

    Each judge in use is probed with its first question alone: one that cannot run raises
    ConfigurationError before anything is written. New judgements are written (one file per
    batch) after every judge of the batch has answered."""
    needed = con.sql("SELECT run_id, seq, text FROM final_message").pl()
    verdicts = pl.DataFrame(schema={"run_id": pl.String, "verdict": pl.String, "raw_output": pl.String})
    if needed.height:
        judges = _judges_for(runs, needed, state.judge)
        rubric = judging.rubric_hash(state.rubric_path)
        if state.cached is None:
            state.cached = _cached_judgements(state.archive, rubric)
        wanted = needed.with_columns(
            judge=pl.col("run_id").replace_strict(
                {k: j.name for k, j in judges.items()}, default=None, return_dtype=pl.String
            )
        )
        cached = state.cached.join(wanted.select("run_id", "judge"), on=["run_id", "judge"])
        todo = wanted.join(cached.select("run_id"), on="run_id", how="anti")
        records = []
        for _, group in todo.group_by("judge", maintain_order=True):
            ids = group["run_id"].to_list()
            records += judging.judge_many(
                judges[ids[0]],
                list(zip(ids, group["text"].to_list(), strict=True)),
                rubric_path=state.rubric_path,
                probe=True,
            )
        state.calls += len(records)
        state.errors += [f"{r.run_id}: {r.raw_output.strip()[:200]}" for r in records if r.verdict == "ERROR"]
        if state.write and records:
            state.archive.append_rows("judgements", records)
        fresh = pl.DataFrame(
            [{"run_id": r.run_id, "verdict": r.verdict, "raw_output": r.raw_output} for r in records],
            schema=verdicts.schema,
        )
        verdicts = pl.concat([cached.select(verdicts.columns), fresh])
    con.register("_judge_verdicts", verdicts)
    con.execute("CREATE OR REPLACE TABLE judge_verdicts AS SELECT * FROM _judge_verdicts")
    con.unregister("_judge_verdicts")


# --- scoring -------------------------------------------------------------------------------------
#: The digest of what decides whether a new score row is written (see `_score`), the same SQL
#: over the previous scores and the new verdicts.
_DIGEST = "hash(valid, axis_a, axis_b, verdict, reasons)"


def _previous(archive: Archive, ids: pl.DataFrame) -> pl.DataFrame:
    """The latest score of each run in `ids`: run_id, axis_a, axis_b, verdict, checker_hash and the
    digest of the compared columns (not the reasons themselves: ~50 bytes a run). DuckDB reduces
    the scores files to one row per run, reading only these columns."""
    files = archive.files("scores")
    schema = {
        "run_id": pl.String,
        "axis_a": pl.Boolean,
        "axis_b": pl.Boolean,
        "verdict": pl.String,
        "checker_hash": pl.String,
        "digest": pl.UInt64,
    }
    if not files or not ids.height:
        return pl.DataFrame(schema=schema)
    con = duckdb.connect(config=dict(_DUCKDB_CONFIG))
    try:
        con.execute("SET enable_progress_bar = false")
        con.read_parquet(files, union_by_name=True).create_view("scores")
        con.register("_ids", ids.select("run_id"))
        latest = con.sql(
            f"""SELECT run_id, unnest(max_by({{'axis_a': axis_a, 'axis_b': axis_b, 'verdict': verdict,
                    'checker_hash': checker_hash, 'digest': {_DIGEST}}}, scored_at))
                FROM scores SEMI JOIN _ids USING (run_id) GROUP BY run_id"""
        ).pl()
    finally:
        con.close()
    return latest.cast(schema)


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
    archive: Archive | Path | str,
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
    checker hash, when its verdict moved, or always with `rescore=True`. `judge` defaults to the
    judge each run expects (`analysis.judge.select_judge`) and is only built when some W run needs
    it; a judge that cannot run raises ConfigurationError and no scores are written (judge answers
    already given in earlier batches are kept: they were paid for and are cached for the rerun).
    """
    return _score(
        as_archive(archive),
        judge=judge,
        write=write,
        rescore=rescore,
        variant=variant,
        model=model,
        run_ids=None,
        rules_dir=rules_dir,
        scenarios_dir=scenarios_dir,
        rubric_path=rubric_path,
    )


def score_runs(
    archive: Archive | Path | str,
    run_ids: list[str],
    *,
    judge: judging.Judge | None = None,
    write: bool = True,
    rules_dir: Path | None = None,
    scenarios_dir: Path | None = None,
    rubric_path: Path | None = None,
) -> ScorePass:
    """Score only the given runs (what a recorder does after each rep): loads their rows alone and
    writes one score row for each run whose verdict is new (a just-recorded run always is)."""
    return _score(
        as_archive(archive),
        judge=judge,
        write=write,
        rescore=False,
        variant=None,
        model=None,
        run_ids=list(run_ids),
        rules_dir=rules_dir,
        scenarios_dir=scenarios_dir,
        rubric_path=rubric_path,
    )


def _score(
    archive: Archive,
    *,
    judge: judging.Judge | None,
    write: bool,
    rescore: bool,
    variant: str | None,
    model: str | None,
    run_ids: list[str] | None,
    rules_dir: Path | None,
    scenarios_dir: Path | None,
    rubric_path: Path | None,
) -> ScorePass:
    """One pass, batch by batch (analysis/batches.py): a batch's inputs are read, its rules run, its
    W runs judged, its new score rows streamed into the pass's one scores file; only the score rows
    themselves (what the caller prints) and the previous verdicts (~50 bytes a run) stay in memory."""
    chash = checker_hash(rules_dir, rubric_path)
    rules = load_rules(rules_dir)
    final = next(r for r in rules if r.name == FINAL)
    runs_lf, where = batching.read_runs(
        archive, (*_RUN_COLUMNS_READ, "options_json", "slot", "attempt"), ("events", "artifacts")
    )
    if run_ids is not None:
        runs_lf = runs_lf.filter(pl.col("run_id").is_in(run_ids))
    if variant:
        runs_lf = runs_lf.filter(pl.col("variant").str.to_lowercase() == variant.lower())
    if model:
        runs_lf = runs_lf.filter(pl.col("model_alias") == model)
    runs = runs_lf.collect()
    attempts = runs.select("run_id", "slot", "attempt")
    runs = runs.drop("slot", "attempt")
    previous = _previous(archive, runs)
    same = previous.filter(pl.col("checker_hash") == chash).select("run_id", "digest")
    state = _JudgeState(archive, judge, rubric_path, write)
    parts: list[pl.DataFrame] = []
    flips: list[pl.DataFrame] = []
    scored_at = dt.datetime.now(dt.UTC)
    dest = archive.table_dir("scores") / f"{scored_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
    con = _connection(scenarios_dir)
    try:
        with batching.ParquetStream(dest, "scores") as out:
            for batch in batching.batches(runs):
                ids = batch["run_id"].to_list()
                events = batching.batch_scan(where, "events", ids)
                artifacts = batching.batch_scan(where, "artifacts", ids)
                ev, art = pl.collect_all(
                    [
                        _events(events if events is not None else to_frame("events", []).lazy()),
                        _artifacts(artifacts if artifacts is not None else to_frame("artifacts", []).lazy()),
                    ]
                )
                _load(con, batch.drop("options_json"), ev, art)
                run_rules(con, rules, JUDGE_INPUT)
                _judge(con, batch, state)
                run_rule(con, final)
                scored = con.sql(f"SELECT *, {_DIGEST} AS _digest FROM {FINAL}").pl()
                scored = scored.with_columns(
                    checker_hash=pl.lit(chash),
                    scored_at=pl.lit(scored_at).cast(pl.Datetime("us", "UTC")),
                    rep=pl.col("rep").cast(pl.Int64),
                    evidence_a=pl.col("evidence_a").cast(pl.List(pl.Int64)),
                    evidence_b=pl.col("evidence_b").cast(pl.List(pl.Int64)),
                )
                flips.append(compute_flips(previous.join(batch.select("run_id"), on="run_id"), scored))
                if write:
                    changed = scored
                    if not rescore:
                        changed = scored.join(
                            same, left_on=["run_id", "_digest"], right_on=["run_id", "digest"], how="anti"
                        )
                    out.write(changed)
                parts.append(scored.drop("_digest"))
    finally:
        con.close()
    scores = (
        pl.concat(parts, rechunk=False)
        if parts
        else pl.DataFrame(schema={**polars_schema("scores"), "started_at": pl.Datetime("us", "UTC")})
    )
    parts.clear()  # the batches' rows are held once, not twice, while they are sorted
    scores = scores.sort("variant", "model_alias", "rep", "started_at", "run_id")
    return ScorePass(
        scores=scores,
        flips=pl.concat(flips).sort("variant", "model_alias", "rep", "run_id", "axis")
        if flips
        else compute_flips(previous, scores),
        checker_hash=chash,
        written=out.written,
        judge_calls=state.calls,
        judge_errors=state.errors,
        attempts=attempts,
    )


def latest_scores(archive: Archive | Path | str) -> pl.DataFrame:
    """The latest score row of every scored run, joined with its runs columns (see RUN_COLUMNS)."""
    return as_archive(archive).latest_scores()
