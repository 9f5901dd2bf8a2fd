"""The labelled axis (a) cases (analysis/rules/cases/consulted.yaml) through the real rule path.

Each case is one tool call in an otherwise valid run, archived like a real run; the `consulted`
view (DuckDB, with the tree-sitter `shell_ops` table) must say `ok` exactly as labelled, with the
call as evidence.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analysis.rules import shell
from tests.checker.helpers import Runs, hooked

CASES_FILE = Path(shell.__file__).parent / "cases" / "consulted.yaml"
CASES: list[dict] = yaml.safe_load(CASES_FILE.read_text(encoding="utf-8"))["cases"]
TOOL_SEQ = 3  # seq 0-2: hook_started, hook_response, init


def case_lines(case: dict) -> list[str]:
    b = hooked()
    b.tool(case["tool"], case["input"], "ok")
    b.text("Done.").result("Done.")
    return b.lines


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    runs = Runs(tmp_path_factory.mktemp("consulted-cases"))
    for case in CASES:
        runs.add(case["name"], case_lines(case))
    return runs.rule("consulted")


def test_the_file_is_a_real_corpus() -> None:
    """Enough cases, unique names, both labels, every case with a class and a reason."""
    names = [c["name"] for c in CASES]
    assert len(names) >= 40
    assert len(set(names)) == len(names)
    assert {c["ok"] for c in CASES} == {True, False}
    for c in CASES:
        assert set(c) == {"name", "class", "ok", "tool", "input", "why"}, c["name"]
        assert isinstance(c["ok"], bool) and c["why"].strip(), c["name"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(rows: dict[str, dict], case: dict) -> None:
    row = rows[case["name"]]
    assert row["ok"] is case["ok"], f"{case['name']}: {case['why']} ({row['reason']})"
    assert row["evidence"] == ([TOOL_SEQ] if case["ok"] else [])


def test_selftest_has_the_mention_and_hook_controls() -> None:
    """evalb-self-test carries both directions of 'axis (a) by mention' and 'foreign hook' per scenario."""
    from analysis import fabricate as fab
    from analysis.selftest import build_cases
    from evalb.scenarios import load_scenarios

    scenarios = load_scenarios()
    cases = build_cases(scenarios, fab.load_adrs())
    got = {(c.variant, c.name): (c.expect_a, c.expect_verdict) for c in cases}
    for sc in scenarios:
        assert got[(sc.id, "foreign-hook")] == (None, "INVALID")
        assert got[(sc.id, "foreign-and-own-hook")][0] == "PASS"
        if sc.kind.value == "overtrigger":  # here axis (a) reads "not needless": both directions
            assert got[(sc.id, "looks-around-not-at-adrs")] == ("PASS", "PASS")
            assert got[(sc.id, "ritual-ls-adr")] == ("FAIL", "FAIL")
        elif sc.kind.value != "write":
            assert got[(sc.id, "a-by-mention")] == ("FAIL", "FAIL")
            assert got[(sc.id, "a-by-pipeline-read")][0] == "PASS"


def test_hostile_commands_do_not_break_the_parse() -> None:
    """Nesting deeper than Python's stack keeps the facts found before it; huge input is parsed."""
    deep = "cat docs/adr/a.md; " + "(" * 5000 + "cat docs/adr/x" + ")" * 5000
    assert shell.command_ops(deep) == (("read", "docs/adr/a.md", False),)
    assert shell.command_ops("x" * 1_000_000) == ()
    assert [p for _, p, _ in shell.command_ops("\x00\xff cat docs/adr/b.md")] == ["docs/adr/b.md"]
