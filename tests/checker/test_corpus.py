"""Every labelled case of every rule (analysis/rules/cases/*.yaml) gets the `ok` its label says.

The cases run as fabricated transcripts through the real rule connection (`connect_frames`, all
rules, DuckDB), not through a private entry into the rule modules; see tests/checker/corpus.py.
"""

from __future__ import annotations

import polars as pl
import pytest

from analysis.rules import RULES
from tests.checker.corpus import CASES_DIR, Case, load_cases, score_cases

CASES = load_cases()
PROSE_ROLES = ("cite", "content", "conflict", "distractor")


@pytest.fixture(scope="module")
def scored() -> dict[str, dict]:
    table = score_cases(CASES)
    return {r["run_id"]: r for r in table.iter_rows(named=True)}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.run_id}-{c.cls}" for c in CASES])
def test_case(scored: dict[str, dict], case: Case) -> None:
    """The rule's `ok` for the case's text is the labelled one (or, for a documented known limit,
    the answer the case records, so that fixing the limit shows up here)."""
    row = scored[case.run_id]
    assert row["got"] is case.rule_says, f"{case.why}: {case.messages!r} -> {row['reason']}"


def test_every_prose_rule_has_a_corpus() -> None:
    """Each axis (b) prose rule has its cases file with at least 25 cases, both outcomes, and every
    case names a class and a reason; no cases file names an undeclared rule."""
    declared = {r.name for r in RULES}
    files = {p.stem for p in CASES_DIR.glob("*.yaml")}
    assert files <= declared
    for spec in RULES:
        if spec.role not in PROSE_ROLES:
            continue
        mine = [c for c in CASES if c.rule == spec.name]
        assert len(mine) >= 25, spec.name
        assert {c.ok for c in mine} == {True, False}, spec.name
        assert all(c.cls and c.why for c in mine), spec.name


def test_cases_cover_the_classes() -> None:
    """The classes issue 13 named are all present across the corpus."""
    classes = set(pl.Series([c.cls for c in CASES]).unique().to_list())
    needed = {
        "negated",
        "history",
        "negated-qualifier",
        "unrelated-qualifier",
        "reversed",
        "false-citation",
        "hedge",
        "question",
        "hook-quote",
        "multi-adr",
        "code-block",
        "non-english",
        "long",
    }
    assert needed <= classes, needed - classes
