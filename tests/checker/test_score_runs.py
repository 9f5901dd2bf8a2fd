"""Per-rep scoring: `score_runs` loads and scores only the runs it is given, one score row each."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.checker import score_archive, score_runs
from analysis.judge import KeywordJudge
from evalb.archive import Archive
from runner.grid import expand, plugin_hash_of, run_grid
from runner.record import RecordOptions
from tests.checker.helpers import Runs, hooked


def _verdicts(df) -> dict[str, tuple]:  # type: ignore[no-untyped-def]
    return {r["run_id"]: (r["axis_a"], r["axis_b"], r["verdict"]) for r in df.iter_rows(named=True)}


def test_scores_only_the_given_runs(tmp_path: Path) -> None:
    """Each call scores its runs alone and writes one row per run; the verdicts equal a full pass."""
    runs = Runs(tmp_path / "a")
    runs.add("r1", hooked().text("ADR-0002 conflicts").result("x").lines, "R1")
    runs.add("w1", hooked().text("Shall I record this as an ADR?").result("y").lines, "W1")
    runs.add("r2", hooked().text("Done.").result("Done.").lines, "R2")
    for name in ("r1", "w1", "r2"):
        sp = score_runs(runs.archive, [runs.ids[name]], judge=KeywordJudge())
        assert sp.scores["run_id"].to_list() == [runs.ids[name]]
        assert sp.written is not None and Archive(sp.written.parent.parent).read("scores").height >= 1
    scores = runs.archive.read("scores")
    assert len(runs.archive.files("scores")) == 3 and scores.height == 3
    full = score_archive(runs.archive, judge=KeywordJudge(), write=False, rescore=True)
    assert _verdicts(full.scores) == _verdicts(scores)
    again = score_runs(runs.archive, [runs.ids["r1"]], judge=KeywordJudge())
    assert again.written is None  # unchanged verdict, same checker: nothing new to write


@pytest.mark.client
def test_a_grid_writes_one_score_row_per_rep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid of N reps scored rep by rep (as evalb-record does) writes N score rows, not O(N²);
    W runs of scripted models are judged by the scripted judge with no ADR_EVAL_B_JUDGE_CMD set;
    the verdicts equal a full rescore."""
    monkeypatch.delenv("ADR_EVAL_B_JUDGE_CMD", raising=False)
    root = tmp_path / "archive"
    archive = Archive.create_or_open(root)
    opts = RecordOptions()
    slots = expand(
        ["R1", "W1"], ["scripted:oracle", "scripted:oblivious"], 2, plugin_hash_of(opts.plugin_dir)
    )
    seen: list[str] = []

    def after(run):  # type: ignore[no-untyped-def]
        sp = score_runs(archive, [run.run_id])
        assert sp.scores["run_id"].to_list() == [run.run_id]
        seen.append(str(sp.scores["verdict"][0]))
        return seen[-1]

    report = run_grid(slots, archive, opts, jobs=2, after_rep=after, progress_stream=None)
    n = len(slots)
    assert report.planned == n and len(seen) == n
    scores = archive.read("scores")
    assert scores.height == n and len(archive.files("scores")) == n
    assert set(archive.read("judgements")["judge"]) == {"scripted:judge"}
    full = score_archive(archive, write=False, rescore=True)
    assert _verdicts(full.scores) == _verdicts(scores)
    assert "INVALID" not in seen and "PASS" in seen and "FAIL" in seen
