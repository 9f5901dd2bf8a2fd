"""Over-triggering scenarios (O1..O3) recorded by the real client with scripted policies and scored.

scripted:oracle does each task with the client's own file tools and never touches the ADR system:
valid, task done, not needless, PASS. scripted:ritual consults the records first on every task and
then does the same: task done, but needless on every O scenario, so FAIL with the consultation as
evidence. Task blocks are handed to the client by the recorder only, never read here.
"""

from __future__ import annotations

import polars as pl
import pytest

from analysis.checker import latest_scores, score_archive
from analysis.judge import CommandJudge
from evalb.scenarios import ScenarioKind, load_scenarios
from tests.conftest import SCRIPTED_JUDGE, record_grid

pytestmark = pytest.mark.client

O_IDS = [sc.id for sc in load_scenarios() if sc.kind is ScenarioKind.overtrigger]


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    root = tmp_path_factory.mktemp("overtrigger") / "archive"
    report = record_grid(root, O_IDS, ["scripted:oracle", "scripted:ritual"], 1)
    assert report is not None
    score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE))
    return latest_scores(root)


def test_there_are_three_overtrigger_scenarios() -> None:
    assert O_IDS == ["O1", "O2", "O3"]


def test_oracle_does_the_task_and_is_not_needless(scored: pl.DataFrame) -> None:
    rows = scored.filter(pl.col("model_alias") == "scripted:oracle")
    assert sorted(rows["variant"]) == O_IDS
    for r in rows.iter_rows(named=True):
        assert r["valid"], r["invalid_reason"]
        assert (r["needless"], r["axis_a"], r["axis_b"], r["verdict"]) == (False, True, True, "PASS"), r["reasons"]
        assert r["evidence_b"], r["reasons"]  # the Edit/Write call that did the task


def test_ritual_consultation_is_needless_on_every_task(scored: pl.DataFrame) -> None:
    rows = scored.filter(pl.col("model_alias") == "scripted:ritual")
    assert sorted(rows["variant"]) == O_IDS
    for r in rows.iter_rows(named=True):
        assert r["valid"], r["invalid_reason"]
        assert (r["needless"], r["axis_a"], r["axis_b"], r["verdict"]) == (True, False, True, "FAIL"), r["reasons"]
        assert "needless consultation: ran adr-search" in r["reasons"]
        assert r["evidence_a"]
