"""Validity per arm: the labelled cases (analysis/rules/cases/valid_run.yaml) through the real rule path.

Each case is one archived run of R1 (its arm, plugin identity, SessionStart hook and ending as the
case says) scored by the `valid_run` view in DuckDB; a no-plugin arm's valid run is then scored on
both axes by the whole checker.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest
import yaml

from analysis import fabricate as fab
from analysis.judge import KeywordJudge
from evalb import paths
from evalb.archive import Archive
from evalb.schema import run_record
from evalb.transcript import TranscriptSummary, parse_lines

CASES_FILE = paths.RULES_DIR / "cases" / "valid_run.yaml"
CASES: list[dict] = yaml.safe_load(CASES_FILE.read_text(encoding="utf-8"))["cases"]
FOREIGN_NOTE = "[other-plugin] Read CONTRIBUTING.md before you start."


def case_lines(case: dict) -> list[str]:
    b = fab.TranscriptBuilder()
    hook = case["hook"]
    if hook != "absent":
        note = FOREIGN_NOTE if hook == "foreign" else fab.HOOK_NOTE
        b.hook(note, outcome="error" if hook == "failed" else "success")
    b.init()
    if case.get("turns", True):
        b.bash("ls lib", "app.rb").text("Done.")
        if case.get("result", True):
            b.result("Done.")
    return b.lines


def commit(archive: Archive, lines: list[str], *, arm: str, plugin: bool, outcome: str, rep: int) -> str:
    """Archive lines as a recorded run of R1 in `arm` (plugin identity null when `plugin` is false)."""
    run_id = uuid.uuid4().hex
    summary = TranscriptSummary()
    for line in lines:
        summary.feed(line)
    now = dt.datetime.now(dt.UTC)
    ident = ("os-adr", "0.3.0", "f" * 64, "/plugins/os-adr") if plugin else (None, None, None, None)
    run = run_record(
        summary,
        run_id=run_id, slot=f"R1|m|{(ident[2] or 'no-plugin')[:16]}|{rep}|{arm}", source="record",
        scenario="R1", variant="R1", model_alias="m", rep=rep, attempt=1, started_at=now,
        ended_at=now, duration_ms=1000, exit_code=0 if outcome == "completed" else 1, outcome=outcome,
        outcome_detail="labelled case", client_path="(case)", plugin_name=ident[0],
        plugin_version=ident[1], plugin_hash=ident[2], plugin_dir=ident[3], arm=arm,
        fixture_hash=None, scenario_hash=None, rubric_hash=None, rules_hash=None, manifest_json=None,
        confinement="n/a", stderr="", recorder_version="case", host="case", options_json="{}",
    )  # fmt: skip
    archive.commit_run(run, parse_lines(run_id, lines), [])
    return run_id


def _arm(case: dict) -> tuple[str, bool]:
    """(runs.arm, has a plugin identity) of a case."""
    kind = case["arm"]
    plugin = case.get("plugin", kind != "none")
    return {"default": "default", "named": "candidate", "none": "none"}[kind], plugin


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    from analysis.checker import rule_connection

    archive = Archive(tmp_path_factory.mktemp("valid-cases") / "a")
    archive.ensure()
    ids = {}
    for i, case in enumerate(CASES):
        arm, plugin = _arm(case)
        ids[case["name"]] = commit(
            archive, case_lines(case), arm=arm, plugin=plugin, outcome=case["outcome"], rep=i
        )
    df = rule_connection(archive.root).sql("SELECT * FROM valid_run").pl()
    by_id = {r["run_id"]: r for r in df.iter_rows(named=True)}
    return {name: by_id[rid] for name, rid in ids.items()}


def test_the_file_is_a_real_corpus() -> None:
    """Unique names, both labels in each class, every arm kind, a reason for every invalid case."""
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names) >= 15
    for klass in ("plugin-arm", "baseline"):
        assert {c["ok"] for c in CASES if c["class"] == klass} == {True, False}, klass
    assert {c["arm"] for c in CASES} == {"default", "named", "none"}
    for c in CASES:
        assert c["why"].strip() and (c["ok"] or c["reason"]), c["name"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(rows: dict[str, dict], case: dict) -> None:
    row = rows[case["name"]]
    assert row["ok"] is case["ok"], f"{case['name']}: {case['why']} ({row['reason']})"
    if not case["ok"]:
        assert case["reason"] in row["reason"], row["reason"]


def _without_hook(lines: list[str]) -> list[str]:
    return [ln for ln in lines if '"subtype":"hook_' not in ln]


def test_a_valid_baseline_run_is_scored_on_both_axes(tmp_path: Path) -> None:
    """The fabricated ideal R1 run and the oblivious one, without the hook, in the no-plugin arm:
    both valid; the ideal one PASSes both axes, the oblivious one FAILs axis (a). The baseline is
    measured, not set aside; the same ideal run in the default arm is INVALID (no note)."""
    from analysis.checker import score_archive
    from evalb.scenarios import load_scenarios, resolve_variant

    sc = next(s for s in load_scenarios() if s.id == "R1")
    perfect = _without_hook(fab.perfect(sc, resolve_variant("R1")[1], fab.load_adrs()).lines)
    blind = _without_hook(fab.oblivious(sc).lines)
    assert len(perfect) < len(fab.perfect(sc, resolve_variant("R1")[1], fab.load_adrs()).lines)
    archive = Archive(tmp_path / "a")
    archive.ensure()
    a = commit(archive, perfect, arm="none", plugin=False, outcome="completed", rep=0)
    b = commit(archive, blind, arm="none", plugin=False, outcome="completed", rep=1)
    c = commit(archive, perfect, arm="default", plugin=True, outcome="completed", rep=2)
    scores = score_archive(archive.root, judge=KeywordJudge()).scores
    got = {r["run_id"]: r for r in scores.iter_rows(named=True)}
    assert (got[a]["verdict"], got[a]["axis_a"], got[a]["axis_b"]) == ("PASS", True, True), got[a]["reasons"]
    assert (got[b]["verdict"], got[b]["axis_a"]) == ("FAIL", False), got[b]["reasons"]
    assert got[c]["verdict"] == "INVALID"
