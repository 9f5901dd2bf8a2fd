"""Scenario files: they parse, their metadata points at ADRs that fit, and Task blocks stay clean.

HELD-OUT: Task blocks are read only to check they exist and avoid giveaway words; never printed.
"""

from __future__ import annotations

import re

import pytest

from evalb import graph, paths
from evalb.scenarios import ScenarioKind, all_variant_ids, load_scenarios, parse_task_block
from tests.world.conftest import load_plugin_lib

FORBIDDEN = ("adr", "docs/adr", "decision record", "os-adr", "decision", "decided", "record")
SCENARIOS = {s.id: s for s in load_scenarios()}


def adrs() -> dict:
    return {a.id: a for a in load_plugin_lib().load_all(paths.FIXTURE_PROJECT)}


def test_every_scenario_file_and_its_variants() -> None:
    """One scenario per scenarios/*.md; the variants are the scenarios plus their declared variants."""
    assert sorted(SCENARIOS) == sorted(p.stem for p in paths.SCENARIOS_DIR.glob("*.md"))
    declared = [v.id for s in SCENARIOS.values() for v in s.variants]
    assert sorted(all_variant_ids()) == sorted([*SCENARIOS, *declared])
    assert "R4-nograph" in declared
    assert [v.id for v in SCENARIOS["R4"].all_variants() if v.graph] == ["R4"]
    (nograph,) = SCENARIOS["R4"].variants
    assert nograph.expect_b == "fail" and not nograph.graph
    assert not any(s.graph for i, s in SCENARIOS.items() if i != "R4")


@pytest.mark.parametrize("sid", sorted(SCENARIOS))
def test_metadata_points_at_fitting_adrs(sid: str) -> None:
    sc, a = SCENARIOS[sid], adrs()
    if sc.kind is ScenarioKind.overtrigger:  # no ADR bears on it (tests/world/test_overtrigger_world.py)
        assert (paths.FIXTURE_PROJECT / sc.policy.touch_file).is_file() is (sc.policy.edit_old is not None)
        assert not (sc.correct_adr or sc.topic_patterns or sc.policy.record_title)
        return
    assert (paths.FIXTURE_PROJECT / sc.policy.touch_file).is_file()
    if sc.policy.search_file:
        assert (paths.FIXTURE_PROJECT / sc.policy.search_file).is_file()
    if sc.kind is ScenarioKind.retrieval:
        assert a[sc.correct_adr].status == "Accepted"
        for d in sc.distractors:
            assert a[d].status == "Superseded"
            assert a[d].meta["superseded_by"] == sc.correct_adr
    else:
        for old in filter(None, (sc.supersedes, sc.policy.record_supersedes)):
            assert a[old].status == "Accepted"
        # a sensible new record on the topic (the ideal agent's title) matches the patterns
        slug = load_plugin_lib().slugify(sc.policy.record_title)
        assert any(re.search(p, f"docs/adr/0007-{slug}.md", re.I) for p in sc.topic_patterns)


def test_specific_scenario_shapes() -> None:
    assert SCENARIOS["R1"].correct_adr == "0002"
    assert (SCENARIOS["R2"].correct_adr, SCENARIOS["R2"].distractors) == ("0003", ["0001"])
    r3 = SCENARIOS["R3"]
    assert (r3.correct_adr, r3.match, r3.require_conflict) == ("0005", "content", False)
    body = adrs()["0005"].body
    assert all(re.search(p, body, re.I) for p in r3.content_patterns)
    assert not re.search(r3.content_patterns[0], "utcnow", re.I)
    r4 = SCENARIOS["R4"]
    assert (r4.correct_adr, r4.graph, r4.policy.search_file) == ("0003", True, graph.R4_CHANGED)
    assert SCENARIOS["W3"].supersedes == "0004"


@pytest.mark.parametrize("sid", sorted(SCENARIOS))
def test_task_block_exists_and_gives_nothing_away(sid: str) -> None:
    sc = SCENARIOS[sid]
    task = parse_task_block(sc.source.read_text(encoding="utf-8"), sc.source)
    assert len(task.split()) >= 30, f"{sid}: Task block is too short to be a real request"
    hits = [w for w in FORBIDDEN if re.search(rf"\b{re.escape(w)}", task, re.I)]
    assert not hits, f"{sid}: Task block mentions {hits}"  # names the words only, never the text
