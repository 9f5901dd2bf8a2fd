"""evalb-self-test holds on the real scenarios without reading a Task block; a new scenario needs no code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import fabricate as fab
from analysis.selftest import run_selftest
from evalb import paths
from evalb.scenarios import Scenario, all_variant_ids, load_scenarios
from tests.checker.helpers import Runs, hooked


def test_selftest_all_cases_hold_without_task_blocks(tmp_path, monkeypatch) -> None:
    """Every case holds, and nothing calls Scenario.task_prompt (it raises here)."""

    def forbidden(self: Scenario) -> str:
        raise AssertionError("Task block read")

    monkeypatch.setattr(Scenario, "task_prompt", forbidden)
    table = run_selftest(tmp_path)
    assert table["ok"].all(), table.filter(~table["ok"]).to_dicts()
    variants = set(table["variant"].to_list())
    assert variants == set(all_variant_ids())
    cases = set(zip(table["variant"].to_list(), table["case"].to_list(), strict=True))
    for control in [
        ("R1", "prose-only"),
        ("R2", "distractor-live"),
        ("R3", "wrong-content"),
        ("R1", "no-hook"),
    ]:
        assert control in cases
    for v in variants:
        assert {(v, "perfect"), (v, "untouched")} <= cases


def test_selftest_cli_exit_0(tmp_path) -> None:
    """The entry point prints the table and exits 0."""
    p = subprocess.run(
        [str(Path(sys.executable).parent / "evalb-self-test"), str(tmp_path)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "R4-nograph  perfect" in p.stdout and p.stderr.strip().endswith("cases hold")


def test_selftest_fails_when_a_scenario_is_inconsistent(tmp_path) -> None:
    """A scenario whose topic patterns its own ideal record does not match makes the self-test fail."""
    sdir = tmp_path / "scenarios"
    sdir.mkdir()
    text = (paths.SCENARIOS_DIR / "W1.md").read_text()
    head, rest = text.split("topic_patterns:\n", 1)
    (sdir / "W1.md").write_text(head + "topic_patterns:\n  - 'zzz-never'\n" + rest[rest.index("policy:") :])
    table = run_selftest(tmp_path / "work", scenarios_dir=sdir)
    bad = table.filter(~table["ok"])
    assert bad["case"].to_list() == ["perfect"]


def test_new_scenario_needs_no_checker_change(tmp_path) -> None:
    """A scenario file the checker has never seen (X1 -> ADR 0006) is scored from its metadata alone."""
    sdir = tmp_path / "scenarios"
    shutil.copytree(paths.SCENARIOS_DIR, sdir)
    (sdir / "X1.md").write_text(
        "---\nid: X1\nkind: retrieval\ntitle: header names\ncorrect_adr: '0006'\nmatch: id\n"
        "require_conflict: true\nconflict_patterns: ['clash']\npolicy:\n  touch_file: lib/relay/headers.rb\n---\n\n"
        "## Task\n\nheld out\n"
    )
    runs = Runs(tmp_path / "archive")
    good = hooked().bash("ls docs/adr").text("That would clash with ADR-6.").result("ok")
    runs.add("good", good.lines, "X1")
    runs.add(
        "no-clash",
        hooked().bash("ls docs/adr").text("This conflicts with ADR-0006.").result("ok").lines,
        "X1",
    )
    rows = runs.score(scenarios_dir=sdir)
    assert rows["good"]["verdict"] == "PASS"
    assert (
        rows["no-clash"]["verdict"] == "FAIL" and "did not flag the conflict" in rows["no-clash"]["reasons"]
    )


@pytest.mark.parametrize("builder", [fab.untouched, fab.oblivious])
def test_fabricated_lines_are_client_shaped(builder) -> None:
    """Fabricated lines are compact JSON objects with the client's top-level keys."""
    sc = next(s for s in load_scenarios() if s.id == "R1")
    for line in builder(sc).lines:
        obj = json.loads(line)
        assert {"type", "session_id", "uuid"} <= obj.keys() and ", " not in line[:20]
