"""The self-test on the over-triggering scenarios: both directions and the needless controls hold,
a new O scenario is picked up from its metadata alone, and an inconsistent one makes it fail.
Task blocks are never read (Scenario.task_prompt raises throughout)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from analysis import fabricate as fab
from analysis.selftest import run_selftest
from evalb import paths
from evalb.scenarios import Scenario

CONTROLS = {name for name, *_ in fab.OVERTRIGGER_CONTROLS}


@pytest.fixture(autouse=True)
def no_task_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(self: Scenario) -> str:
        raise AssertionError("Task block read")

    monkeypatch.setattr(Scenario, "task_prompt", forbidden)


def o_dir(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    sdir = tmp_path / "scenarios"
    sdir.mkdir()
    for p in sorted(paths.SCENARIOS_DIR.glob("O*.md")):
        shutil.copy(p, sdir / p.name)
    for name, text in (extra or {}).items():
        (sdir / name).write_text(text, encoding="utf-8")
    return sdir


def test_o_cases_hold_both_directions(tmp_path: Path) -> None:
    table = run_selftest(tmp_path / "work", scenarios_dir=o_dir(tmp_path))
    assert table["ok"].all(), table.filter(~pl.col("ok")).to_dicts()
    for v in ("O1", "O2", "O3"):
        cases = set(table.filter(pl.col("variant") == v)["case"])
        assert {"perfect", "untouched", "oblivious", "symlinked", "gutted", "no-hook"} | CONTROLS <= cases
    got = {(r["variant"], r["case"]): r["got"] for r in table.iter_rows(named=True)}
    assert got[("O2", "perfect")] == "PASS/PASS/PASS"
    assert got[("O2", "ritual-adr-search")] == "FAIL/PASS/FAIL"
    assert got[("O3", "proposes-adr-in-prose")] == "FAIL/PASS/FAIL"
    assert got[("O3", "gutted")] == "PASS/FAIL/FAIL"


NEW = """---
id: O9
kind: overtrigger
title: "Needless: reword a README sentence"
done:
  - path: README.md
    present: ['and forwards them to the', '## Running']
    absent: ['and relays them to the']
policy:
  touch_file: README.md
  edit_old: "and relays them to the"
  edit_new: "and forwards them to the"
---

## Task

held out
"""


def test_a_new_o_scenario_needs_no_code(tmp_path: Path) -> None:
    table = run_selftest(tmp_path / "work", scenarios_dir=o_dir(tmp_path, {"O9.md": NEW}))
    o9 = table.filter(pl.col("variant") == "O9")
    assert o9.height >= 15 and o9["ok"].all(), o9.filter(~pl.col("ok")).to_dicts()


def test_an_inconsistent_o_scenario_fails_the_selftest(tmp_path: Path) -> None:
    """Done checks the ideal change does not satisfy: every case that must do the task fails."""
    bad = NEW.replace("'## Running'", "'zzz-never'")
    table = run_selftest(tmp_path / "work", scenarios_dir=o_dir(tmp_path, {"O9.md": bad}))
    failed = set(table.filter(~pl.col("ok"))["case"])
    assert "perfect" in failed and "looks-around-not-at-adrs" in failed
    assert set(table.filter(~pl.col("ok"))["variant"]) == {"O9"}
