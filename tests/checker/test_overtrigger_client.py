"""Over-triggering scenarios (O1..O3) recorded by the real client with scripted policies and scored.

scripted:oracle does each task with the client's own file tools and never touches the ADR system:
valid, task done, not needless, PASS. scripted:ritual consults the records first on every task and
then does the same: task done, but needless on every O scenario, so FAIL with the consultation as
evidence. Task blocks are handed to the client by the recorder only, never read here.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analysis.checker import latest_scores, score_archive
from analysis.judge import CommandJudge
from analysis.report import build_report
from analysis.summary import summary_text
from evalb.scenarios import ScenarioKind, load_scenarios
from tests.conftest import SCRIPTED_JUDGE, record_grid

pytestmark = pytest.mark.client

O_IDS = [sc.id for sc in load_scenarios() if sc.kind is ScenarioKind.overtrigger]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("overtrigger") / "archive"
    record_grid(root, O_IDS, ["scripted:oracle", "scripted:ritual"], 1)
    score_archive(root, judge=CommandJudge(SCRIPTED_JUDGE))
    return root


@pytest.fixture(scope="module")
def scored(recorded: Path) -> pl.DataFrame:
    return latest_scores(recorded)


def test_there_are_three_overtrigger_scenarios() -> None:
    assert O_IDS == ["O1", "O2", "O3"]


def test_oracle_does_the_task_and_is_not_needless(scored: pl.DataFrame) -> None:
    rows = scored.filter(pl.col("model_alias") == "scripted:oracle")
    assert sorted(rows["variant"]) == O_IDS
    for r in rows.iter_rows(named=True):
        assert r["valid"], r["invalid_reason"]
        assert (r["needless"], r["axis_a"], r["axis_b"], r["verdict"]) == (False, True, True, "PASS"), r[
            "reasons"
        ]
        assert r["evidence_b"], r["reasons"]  # the Edit/Write call that did the task


def test_ritual_consultation_is_needless_on_every_task(scored: pl.DataFrame) -> None:
    rows = scored.filter(pl.col("model_alias") == "scripted:ritual")
    assert sorted(rows["variant"]) == O_IDS
    for r in rows.iter_rows(named=True):
        assert r["valid"], r["invalid_reason"]
        assert (r["needless"], r["axis_a"], r["axis_b"], r["verdict"]) == (True, False, True, "FAIL"), r[
            "reasons"
        ]
        assert "needless consultation: ran adr-search" in r["reasons"]
        assert r["evidence_a"]


def test_summary_and_report_show_the_needless_rate_beside_the_grid(recorded: Path, tmp_path: Path) -> None:
    """The needless rate has its own lines (oracle 0/3, ritual 3/3); O runs stay out of the grid mean."""
    text = summary_text(recorded)
    head, _, tail = text.partition("needless rate (over-triggering scenarios O*")
    assert tail, text
    rows = {ln.split()[0]: ln for ln in tail.splitlines()[1:3]}
    assert " 0/3 valid runs" in rows["scripted:oracle"] and "O pass 3/3" in rows["scripted:oracle"]
    assert " 3/3 valid runs" in rows["scripted:ritual"] and "O pass 0/3" in rows["scripted:ritual"]
    grid = head[head.index("grid pass rate") :].splitlines()[1:]
    assert all("over 3 scenario" not in ln for ln in grid), head  # no O scenario in the grid mean
    html = build_report(recorded, tmp_path / "report.html")
    assert "id='needless'" in html and "scripted:ritual" in html
