"""Scoring batch by batch (analysis/batches.py) gives exactly what one pass over all runs at once gives.

The reference is the whole archive loaded into one DuckDB connection and every rule run over all
runs together (`rule_connection`, as the checker scored before batching). The archive holds every
self-test case (each scenario, passing, failing and invalid behaviours) and the golden transcripts;
it is scored with batches of a few runs, per-run files, and with most runs folded into shared
files sorted by run_id (what compaction leaves), per-run files and an orphan file beside them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analysis import batches
from analysis import fabricate as fab
from analysis import judge as judging
from analysis.checker import load_rules, rule_connection, run_rule, score_archive
from analysis.judge import KeywordJudge
from analysis.rules import FINAL
from analysis.selftest import build_cases, task_blocks_forbidden
from evalb.archive import Archive
from evalb.scenarios import load_scenarios
from tests.checker.helpers import GOLDEN, Runs, read_golden

COMPARED = (
    "run_id",
    "variant",
    "model_alias",
    "rep",
    "valid",
    "invalid_reason",
    "axis_a",
    "axis_b",
    "passed",
    "verdict",
    "reasons",
    "evidence_a",
    "evidence_b",
)


def one_pass(root: Path) -> pl.DataFrame:
    """Every run scored in one connection over all of them (the reference)."""
    con = rule_connection(root)
    needed = con.sql("SELECT run_id, text FROM final_message ORDER BY run_id").fetchall()
    records = judging.judge_many(KeywordJudge(), [(r, t) for r, t in needed])
    verdicts = pl.DataFrame(
        [{"run_id": r.run_id, "verdict": r.verdict, "raw_output": r.raw_output} for r in records],
        schema={"run_id": pl.String, "verdict": pl.String, "raw_output": pl.String},
    )
    con.register("_jv", verdicts)
    con.execute("CREATE TABLE judge_verdicts AS SELECT * FROM _jv")
    run_rule(con, next(r for r in load_rules() if r.name == FINAL))
    out = con.sql(f"SELECT * FROM {FINAL}").pl()
    con.close()
    return _norm(out)


def _norm(df: pl.DataFrame) -> pl.DataFrame:
    return (
        df.select(COMPARED)
        .with_columns(
            pl.col("rep").cast(pl.Int64),
            pl.col("evidence_a").cast(pl.List(pl.Int64)),
            pl.col("evidence_b").cast(pl.List(pl.Int64)),
        )
        .sort("run_id")
    )


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = Runs(tmp_path_factory.mktemp("stream") / "archive")
    with task_blocks_forbidden():
        for i, c in enumerate(build_cases(load_scenarios(), fab.load_adrs())):
            fab.archive_transcript(
                runs.archive,
                c.made.lines,
                variant=c.variant,
                scenario=c.scenario,
                model_alias=c.name,
                rep=i,
                files=c.made.files,
            )
    for name in sorted(p.name for p in GOLDEN.glob("*.jsonl")):
        variant = name.removeprefix("real-").split("-")[0]
        runs.add(name, read_golden(name), variant if variant[:1] in "RW" else "R1")
    return runs.archive.root


def compact_copy(src: Path, dst: Path, keep: int) -> None:
    """A copy whose runs, but for `keep` of them, are folded into one shared file per table,
    sorted by run_id in row groups of 50 rows (not named compacted-*: those are read only once a
    compaction manifest publishes them); plus an orphan events file of no committed run."""
    import shutil

    shutil.copytree(src, dst)
    arch = Archive(dst)
    ids = sorted(arch.read("runs", ["run_id"])["run_id"].to_list())
    folded = set(ids[keep:])
    for table in ("runs", "events", "artifacts"):
        files = [f for f in arch.files(table) if Path(f).stem in folded]
        frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed").sort("run_id")
        frame.write_parquet(dst / table / "folded-0001.parquet", row_group_size=50, statistics=True)
        for f in files:
            Path(f).unlink()
    orphan = pl.read_parquet(arch.files("events")[0]).with_columns(run_id=pl.lit("orphan"))
    orphan.write_parquet(dst / "events" / "orphan.parquet")


def test_batches_equal_one_pass(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 7 runs: same verdicts, reasons, evidence as all runs in one connection."""
    reference = one_pass(archive)
    assert reference.height > 50 and set(reference["verdict"]) == {"PASS", "FAIL", "INVALID"}
    monkeypatch.setattr(batches, "BATCH_RUNS", 7)
    monkeypatch.setattr(batches, "_FILES_PER_SCAN", 11)  # the runs files read a few at a time too
    got = score_archive(archive, judge=KeywordJudge(), write=False)
    assert _norm(got.scores).equals(reference)


def test_compacted_files_score_the_same(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most runs in shared sorted files, the rest per run, an orphan beside: the same scores."""
    reference = one_pass(archive)
    dst = tmp_path / "compacted"
    compact_copy(archive, dst, keep=9)
    assert len(Archive(dst).files("runs")) == 10
    for size in (5, 10_000):
        monkeypatch.setattr(batches, "BATCH_RUNS", size)
        got = score_archive(dst, judge=KeywordJudge(), write=False)
        assert _norm(got.scores).equals(reference)


def test_batched_writes_and_flips(archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched pass writes one scores file with a row per run; a second pass writes nothing;
    a rescore writes every row again; a changed verdict is written and reported as a flip."""
    import shutil

    root = tmp_path / "a"
    shutil.copytree(archive, root)
    monkeypatch.setattr(batches, "BATCH_RUNS", 6)
    first = score_archive(root, judge=KeywordJudge())
    arch = Archive(root)
    assert first.written is not None and len(arch.files("scores")) == 1
    assert arch.read("scores").height == first.scores.height
    assert score_archive(root, judge=KeywordJudge()).written is None
    assert first.judge_calls > 0 and len(arch.files("judgements")) >= 1
    again = score_archive(root, judge=KeywordJudge(), rescore=True)
    assert again.judge_calls == 0  # cached
    assert again.written is not None and pl.read_parquet(again.written).height == first.scores.height
    # tamper with one run's latest score: the next pass writes that run alone and reports its flip
    victim = first.scores.filter(pl.col("verdict") == "PASS")["run_id"][0]
    for f in arch.files("scores"):
        Path(f).unlink()
    edited = first.scores.with_columns(
        verdict=pl.when(pl.col("run_id") == victim).then(pl.lit("FAIL")).otherwise(pl.col("verdict"))
    )
    arch.append_rows("scores", edited.drop("started_at").to_dicts())
    fixed = score_archive(root, judge=KeywordJudge())
    assert fixed.written is not None and pl.read_parquet(fixed.written)["run_id"].to_list() == [victim]
    assert fixed.flips.filter(pl.col("axis") == "verdict").select("run_id", "old", "new").rows() == [
        (victim, "FAIL", "PASS")
    ]


class _Broken:
    """Answers the first batch, then cannot run: the probe (asked in the calling thread, before
    the pool) of every later batch fails, as a judge whose credentials expired would."""

    name = "broken"

    def __init__(self) -> None:
        self.probes = 0

    def ask(self, prompt: str) -> str:
        import threading

        if threading.current_thread() is threading.main_thread():
            self.probes += 1
            if self.probes > 1:
                raise OSError("no credentials")
        return "NO"


def test_a_judge_failing_mid_pass_leaves_nothing(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge that stops running in a later batch: ConfigurationError, no scores file and no temp
    file is left behind (the half-written scores file is removed); the answers given are kept."""
    import shutil

    from evalb.errors import ConfigurationError

    root = tmp_path / "a"
    shutil.copytree(archive, root)
    monkeypatch.setattr(batches, "BATCH_RUNS", 3)
    streamed: list[int] = []
    write = batches.ParquetStream.write

    def spy(self: batches.ParquetStream, frame: pl.DataFrame) -> None:
        write(self, frame)
        streamed.append(frame.height)

    monkeypatch.setattr(batches.ParquetStream, "write", spy)
    with pytest.raises(ConfigurationError, match="cannot run"):
        score_archive(root, judge=_Broken())  # type: ignore[arg-type]
    assert sum(streamed) > 0  # batches before the failing one had been written to the temp file
    assert sorted(p.name for p in (root / "scores").iterdir()) == []
    # the answers of the batches before stay (paid for, and cached for the rerun); no temp file anywhere
    kept = Archive(root).read("judgements")
    assert kept.height >= 1 and set(kept["verdict"]) == {"NO"} and set(kept["judge"]) == {"broken"}
    assert not [p for p in root.rglob("*.tmp")]


@pytest.mark.client
def test_recorded_archive_batches_equal_one_pass(
    stochastic_archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On runs recorded with the real client (stochastic scripted policy), batches of 2 runs give
    the same verdicts, reasons and evidence as one pass over all of them."""
    reference = one_pass(stochastic_archive)
    assert reference.height >= 4
    monkeypatch.setattr(batches, "BATCH_RUNS", 2)
    got = score_archive(stochastic_archive, judge=KeywordJudge(), write=False)
    assert _norm(got.scores).equals(reference)
