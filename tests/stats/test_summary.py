"""The per-cell summary and the report on archives with no valid run at all (every rate undefined)."""

from __future__ import annotations

from pathlib import Path

from analysis.checker import score_archive
from analysis.report import build_report
from analysis.summary import summary_text
from evalb.archive import Archive
from runner.importer import import_transcript
from tests.conftest import GOLDEN


def _all_invalid(tmp_path: Path) -> Path:
    root = tmp_path / "a"
    import_transcript(GOLDEN / "killed-mid-line.jsonl", Archive(root), scenario="R1", model="haiku")
    score_archive(root)
    return root


def test_summary_says_no_data_instead_of_inventing_rates(tmp_path: Path) -> None:
    text = summary_text(_all_invalid(tmp_path))
    assert "0/0     - [   -,    -]" in text and "no-data" in text
    assert "1 invalid runs excluded from every rate" in text


def test_report_builds_with_no_valid_run(tmp_path: Path) -> None:
    root = _all_invalid(tmp_path)
    out = tmp_path / "r.html"
    build_report(root, out)
    html = out.read_text()
    assert "INVALID" in html and "crashed" in html
