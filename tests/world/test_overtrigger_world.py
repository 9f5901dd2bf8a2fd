"""Over-triggering scenarios (O1..O3) in the world: their metadata, the fixture they rest on, the
sandbox builder and the grid. Task blocks are checked to parse, never printed.

An O scenario is a task no decision record bears on; its frontmatter says what success is (done
checks on the end state) and what an ideal agent changes (policy.edit_old/edit_new). The ideal
change applied to the fixture must satisfy the done checks, and the untouched fixture must not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.fabricate import done_content
from evalb import paths
from evalb.errors import ScenarioError
from evalb.sandbox import build_sandbox
from evalb.scenarios import ScenarioKind, all_variant_ids, load_scenarios, parse_scenario
from runner.grid import expand

O_SCENARIOS = [sc for sc in load_scenarios() if sc.kind is ScenarioKind.overtrigger]


def holds(sc, path: str, text: str) -> bool:  # type: ignore[no-untyped-def]
    """The done checks on one file, in Python's regex engine (the checker runs them in RE2)."""
    check = next(c for c in sc.done if c.path == path)
    return all(re.search(p, text) for p in check.present) and not any(
        re.search(p, text) for p in check.absent
    )


def test_three_o_scenarios_listed_after_w_and_r() -> None:
    ids = [sc.id for sc in load_scenarios()]
    assert [sc.id for sc in O_SCENARIOS] == ["O1", "O2", "O3"]
    assert ids == ["W1", "W2", "W3", "R1", "R2", "R3", "R4", "O1", "O2", "O3"]
    assert all_variant_ids()[-3:] == ["O1", "O2", "O3"]
    assert [s.variant for s in expand(["all"], ["scripted:oracle"], 1, "p")][-3:] == ["O1", "O2", "O3"]


@pytest.mark.parametrize("sc", O_SCENARIOS, ids=[s.id for s in O_SCENARIOS])
def test_ideal_change_is_done_and_the_fixture_is_not(sc) -> None:  # type: ignore[no-untyped-def]
    (check,) = sc.done
    assert check.path == sc.policy.touch_file
    assert holds(sc, check.path, done_content(sc))
    before = paths.FIXTURE_PROJECT / check.path
    assert not before.exists() or not holds(sc, check.path, before.read_text(encoding="utf-8"))
    assert sc.task_prompt().strip()  # the Task block parses (never printed)
    assert not sc.graph and not sc.variants


def test_the_fixture_carries_the_o1_typo_once() -> None:
    text = (paths.FIXTURE_PROJECT / "README.md").read_text(encoding="utf-8")
    assert text.count("recieve") == 1


@pytest.mark.parametrize("sc", O_SCENARIOS, ids=[s.id for s in O_SCENARIOS])
def test_sandbox_for_o_is_the_plain_fixture(sc, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    info = build_sandbox(sc.id, tmp_path / "sb")
    assert info.variant == sc.id and info.graph is False
    target = info.path / sc.policy.touch_file
    if sc.policy.edit_old is None:
        assert not target.exists()
    else:
        assert sc.policy.edit_old in target.read_text(encoding="utf-8")


BASE = "---\nid: {id}\nkind: {kind}\ntitle: t\n{extra}policy:\n  touch_file: README.md\n{policy}---\n\n## Task\n\nheld out\n"


@pytest.mark.parametrize(
    ("sid", "kind", "extra", "policy", "message"),
    [
        ("O9", "overtrigger", "", "  edit_new: x\n", "overtrigger scenarios need done checks"),
        (
            "Z9",
            "overtrigger",
            "done: [{path: README.md, absent: [x]}]\n",
            "  edit_new: x\n",
            "ids start with 'O'",
        ),
        ("O9", "overtrigger", "done: [{path: README.md, absent: [x]}]\n", "", "need policy.edit_new"),
        ("O9", "overtrigger", "done: [{path: README.md}]\n", "  edit_new: x\n", "needs present or absent"),
        ("O9", "overtrigger", "done: [{path: ../x, absent: [x]}]\n", "  edit_new: x\n", "without '..'"),
        ("O9", "overtrigger", "done: [{path: README.md, absent: ['(']}]\n", "  edit_new: x\n", "done"),
        ("O9", "retrieval", "correct_adr: '0002'\n", "", "ids starting with 'O' are for overtrigger"),
    ],
)
def test_bad_o_metadata_is_refused_in_one_line(tmp_path: Path, sid, kind, extra, policy, message) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / f"{sid}.md"
    f.write_text(BASE.format(id=sid, kind=kind, extra=extra, policy=policy))
    with pytest.raises(ScenarioError) as e:
        parse_scenario(f)
    assert message in str(e.value) and "\n" not in str(e.value)


# --- the scripted policies on an O task (the generators alone; the client runs them in
# tests/checker/test_overtrigger_client.py) ------------------------------------------------------------
NOTE = "[os-adr] Decisions live in docs/adr/. Search them with /opt/p/os-adr/bin/adr-search."


def actions(policy: str, sc, **params: float) -> list:  # type: ignore[no-untyped-def]
    from runner.scripted.policies import POLICIES, Final, Observation, RepContext

    ctx = RepContext(variant=sc.id, kind=sc.kind.value, hints=sc.policy, policy=policy, params=params, seed=3)
    gen = POLICIES[policy](ctx, Observation(hook_note=NOTE, cwd="/sb"))
    out = [next(gen)]
    while not isinstance(out[-1], Final):
        out.append(gen.send("ok"))
    return out


@pytest.mark.parametrize("sc", O_SCENARIOS, ids=[s.id for s in O_SCENARIOS])
def test_oracle_does_the_task_with_file_tools_and_never_consults(sc) -> None:  # type: ignore[no-untyped-def]
    import json

    acts = actions("oracle", sc)
    names = [a.name for a in acts[:-1]]
    path = f"/sb/{sc.policy.touch_file}"
    if sc.policy.edit_old is None:
        assert names == ["Write"] and acts[0].input == {"file_path": path, "content": sc.policy.edit_new}
    else:
        assert names == ["Read", "Edit"] and acts[1].input["old_string"] == sc.policy.edit_old
        assert acts[1].input.get("replace_all", False) is sc.policy.replace_all
    assert "adr" not in json.dumps([a.input for a in acts[:-1]]).lower()
    assert "adr" not in acts[-1].text.lower() and "decision" not in acts[-1].text.lower()


@pytest.mark.parametrize("sc", O_SCENARIOS, ids=[s.id for s in O_SCENARIOS])
def test_ritual_and_stochastic_consult_then_do_the_task(sc) -> None:  # type: ignore[no-untyped-def]
    ritual = actions("ritual", sc)
    assert ritual[0].input["command"].startswith("/opt/p/os-adr/bin/adr-search ")
    assert [a.name for a in ritual[1:-1]] == [a.name for a in actions("oracle", sc)[:-1]]
    always, never = actions("stochastic", sc, p_consult=1.0), actions("stochastic", sc, p_consult=0.0)
    assert "adr-search" in always[0].input.get("command", "")
    assert all("adr" not in str(a.input) for a in never[:-1])
    assert [a.name for a in never[:-1]] == [a.name for a in actions("oracle", sc)[:-1]]
