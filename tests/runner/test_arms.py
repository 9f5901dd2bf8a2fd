"""Arms in one grid (no client): the grid file's plugins:/seed:, the interleaved order, slot keys,
the frozen-part refusals, and the test wordings the scripted model honours."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from evalb import manifest, paths
from evalb.archive import Archive
from evalb.errors import FixtureError, UsageError
from evalb.schema import run_record
from runner.grid import Arm, arms_from, check_arms, expand, expand_arms, load_grid_file
from runner.record import slot_key
from runner.scripted.policies import wording_params
from tests.cli.helpers import call
from tests.runner.wordings import wording_plugin

REF = paths.REFERENCE_PLUGIN


@pytest.fixture(scope="module")
def wordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wordings")
    return {
        "low": wording_plugin(root / "low", p_consult=0.2),
        "high": wording_plugin(root / "high", p_consult=0.9, extra="Always check docs/adr first."),
        "high2": wording_plugin(root / "high2", p_consult=0.9, extra="Always check docs/adr first."),
    }


# --- the grid file --------------------------------------------------------------------------------
def test_grid_file_names_arms_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    low = wording_plugin(tmp_path / "plugins" / "low", p_consult=0.2)
    f = tmp_path / "g" / "grid.yaml"
    f.write_text(
        f"scenarios: [R1]\nmodels: [scripted:oracle]\nplugins: {{current: {REF}, cand: ../plugins/low, none: null}}\nseed: 7\n"
    )
    spec = load_grid_file(f)
    assert spec.seed == 7 and spec.plugins is not None
    arms = arms_from(spec.plugins, f.parent)
    assert [(a.name, a.plugin_dir) for a in arms] == [
        ("current", REF),
        ("cand", f.parent / "../plugins/low"),
        ("none", None),
    ]
    assert arms[1].plugin_hash == manifest.plugin_identity(low)[2] != arms[0].plugin_hash


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ({}, "plugins: names no arm"),
        ({"bad name": None}, "arm name 'bad name' in plugins: is not a short name"),
        ({"a|b": None}, "is not a short name"),
        ({"x": "/nonexistent/plugin"}, "arm 'x': plugin directory /nonexistent/plugin does not exist"),
    ],
)
def test_bad_arms_are_one_line_errors(plugins: dict, message: str) -> None:
    with pytest.raises(UsageError) as err:
        arms_from(plugins, Path("/"))
    assert message in err.value.one_line() and "\n" not in err.value.one_line()


def test_an_arm_directory_that_is_no_plugin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FixtureError) as err:
        arms_from({"x": str(tmp_path)}, Path("/"))
    assert "not a Claude Code plugin" in err.value.one_line()


def test_misspelt_plugins_key_is_named(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("models: [scripted:oracle]\nplugin: {a: null}\n")
    with pytest.raises(UsageError) as err:
        load_grid_file(f)
    assert "unknown key 'plugin', did you mean 'plugins'?" in err.value.one_line()


# --- the interleaved order ---------------------------------------------------------------------------
ARMS3 = [Arm("current", REF), Arm("candidate", REF), Arm("none", None)]


def test_blocks_hold_every_arm_of_one_variant_model_rep() -> None:
    slots = expand_arms(["all"], ["scripted:oracle", "scripted:oblivious"], 3, ARMS3, seed=11)
    n = len(ARMS3)
    assert len(slots) % n == 0 and [s.position for s in slots] == list(range(len(slots)))
    blocks = [slots[i : i + n] for i in range(0, len(slots), n)]
    for block in blocks:
        assert len({(s.variant, s.model, s.rep) for s in block}) == 1
        assert sorted(s.arm for s in block) == sorted(a.name for a in ARMS3)
    # each (variant, model, rep) once, and no arm always first
    assert len({(b[0].variant, b[0].model, b[0].rep) for b in blocks}) == len(blocks)
    assert {b[0].arm for b in blocks} == {a.name for a in ARMS3}
    # the blocks are shuffled: not in plan order
    plan = [
        (s.variant, s.model, s.rep)
        for s in expand(["all"], ["scripted:oracle", "scripted:oblivious"], 3, "h")
    ]
    assert [(b[0].variant, b[0].model, b[0].rep) for b in blocks] != plan


def test_the_seed_fixes_the_order() -> None:
    def order(seed: int) -> list[tuple[str, int, str]]:
        return [(s.variant, s.rep, s.arm) for s in expand_arms(["all"], ["scripted:oracle"], 4, ARMS3, seed)]

    assert order(3) == order(3)
    assert order(3) != order(4)
    assert sorted(order(3)) == sorted(order(4))


def test_slot_keys_default_arm_unchanged_named_arms_distinct() -> None:
    h = manifest.plugin_identity(REF)[2]
    default = expand_arms(["R1"], ["scripted:oracle"], 2, [Arm("default", REF)], seed=1)
    assert {s.key for s in default} == {slot_key("R1", "scripted:oracle", h, r) for r in (0, 1)}
    assert {s.key for s in default} == {s.key for s in expand(["R1"], ["scripted:oracle"], 2, h)}
    slots = expand_arms(["R1"], ["scripted:oracle"], 1, ARMS3, seed=1)
    keys = {s.arm: s.key for s in slots}
    assert len(set(keys.values())) == 3  # current and candidate have one plugin dir, two slots
    assert keys["current"] == f"R1|scripted:oracle|{h[:16]}|0|current"
    assert keys["none"] == "R1|scripted:oracle|no-plugin|0|none"


def test_later_rounds_name_their_rep_indices() -> None:
    """'Run more reps of these cells': the slot list may start past the first plan."""
    slots = expand_arms(["R1"], ["scripted:oracle"], range(30, 33), ARMS3, seed=5)
    assert sorted({s.rep for s in slots}) == [30, 31, 32] and len(slots) == 9
    assert {s.rep for s in expand(["R1"], ["scripted:oracle"], [5, 6], "h")} == {5, 6}


def test_chosen_cells_get_more_reps_interleaved() -> None:
    """`expand_cells`: only the cells named, each with its own rep indices, every arm, in blocks."""
    from runner.grid import expand_cells

    slots = expand_cells(
        [("R1", "scripted:oracle", range(4, 6)), ("R2", "scripted:oblivious", [9])], ARMS3, 2
    )
    assert sorted({(s.variant, s.model, s.rep) for s in slots}) == [
        ("R1", "scripted:oracle", 4),
        ("R1", "scripted:oracle", 5),
        ("R2", "scripted:oblivious", 9),
    ]
    assert len(slots) == 9 and [s.position for s in slots] == list(range(9))
    for i in range(0, 9, 3):
        assert len({(s.variant, s.rep) for s in slots[i : i + 3]}) == 1
    with pytest.raises(UsageError, match="unknown"):
        expand_cells([("R99", "scripted:oracle", [0])], ARMS3, 2)


def test_duplicate_arm_names_are_refused() -> None:
    with pytest.raises(UsageError, match="distinct names"):
        expand_arms(["R1"], ["scripted:oracle"], 1, [Arm("a", REF), Arm("a", None)], seed=1)


# --- frozen parts ---------------------------------------------------------------------------------------
def _recorded(archive: Archive, arm: str, plugin_hash: str | None, frozen: dict[str, str]) -> None:
    """A committed run of `arm` recorded with `frozen` (as an earlier grid would have left it)."""
    now = dt.datetime.now(dt.UTC)
    archive.ensure()
    run = run_record(
        run_id=uuid.uuid4().hex, slot=f"R1|scripted:oracle|{(plugin_hash or 'no-plugin')[:16]}|0|{arm}",
        source="record", scenario="R1", variant="R1", model_alias="scripted:oracle", model_id=None, rep=0,
        attempt=1, started_at=now, ended_at=now, duration_ms=1, exit_code=0, outcome="completed",
        outcome_detail="", reached_model=True, hook_seen=True, hook_note=None, client_version=None,
        client_path="c", session_id=None, result_subtype=None, num_turns=None, cost_usd=None,
        input_tokens=None, output_tokens=None, cache_read_tokens=None, cache_creation_tokens=None,
        api_retries=0, plugin_name=None, plugin_version=None, plugin_hash=plugin_hash, plugin_dir=None,
        arm=arm, fixture_hash=None, scenario_hash=None, rubric_hash=None, rules_hash=None,
        manifest_json=json.dumps(frozen), confinement="n/a", stderr="", n_lines=0, n_malformed=0,
        recorder_version="t", host="t",
    )  # fmt: skip
    archive.commit_run(run, [], [])


def test_arm_identities_and_the_no_plugin_manifest(tmp_path: Path, wordings: dict[str, Path]) -> None:
    arms = [Arm("low", wordings["low"]), Arm("none", None)]
    idents = check_arms(arms, Archive(tmp_path / "a"))
    assert idents["none"].plugin_hash is None and idents["none"].frozen["plugin"] == "none"
    assert idents["low"].frozen["plugin"] == idents["low"].plugin_hash == arms[0].plugin_hash
    assert {k: v for k, v in idents["low"].frozen.items() if k != "plugin"} == {
        k: v for k, v in idents["none"].frozen.items() if k != "plugin"
    }


def test_a_grid_refuses_arms_recorded_with_other_frozen_parts(
    tmp_path: Path, wordings: dict[str, Path]
) -> None:
    """Adding reps to arms whose runs were recorded with another fixture is refused, naming the
    part; another rubric or rules (scoring-time parts) and a scenario added since are not."""
    arms = [Arm("low", wordings["low"]), Arm("none", None)]
    now = check_arms(arms, Archive(tmp_path / "fresh"))
    ok = Archive(tmp_path / "ok")
    _recorded(ok, "none", None, now["none"].frozen | {"judge_rubric": "0" * 64, "checker_rules": "1" * 64})
    _recorded(
        ok, "low", arms[0].plugin_hash, {k: v for k, v in now["low"].frozen.items() if k != "scenario:R1"}
    )
    check_arms(arms, ok)
    bad = Archive(tmp_path / "bad")
    _recorded(bad, "none", None, now["none"].frozen | {"fixture": "0" * 64})
    with pytest.raises(UsageError) as err:
        check_arms(arms, bad)
    assert err.value.one_line().startswith("arm 'none': the frozen part 'fixture' differs")


def test_an_arm_whose_plugin_changed_is_refused(tmp_path: Path, wordings: dict[str, Path]) -> None:
    arms = [Arm("cand", wordings["low"]), Arm("none", None)]
    now = check_arms(arms, Archive(tmp_path / "fresh"))
    archive = Archive(tmp_path / "a")
    _recorded(archive, "cand", manifest.plugin_identity(wordings["high"])[2], now["cand"].frozen)
    with pytest.raises(UsageError) as err:
        check_arms(arms, archive)
    assert "arm 'cand': its plugin changed since its runs" in err.value.one_line()


def test_cli_refusals_are_one_line_and_record_nothing(tmp_path: Path, wordings: dict[str, Path]) -> None:
    archive = Archive(tmp_path / "a")
    now = check_arms([Arm("none", None)], Archive(tmp_path / "fresh"))
    _recorded(archive, "none", None, now["none"].frozen | {"fixture": "0" * 64})
    before = sorted(p.name for p in (archive.root / "runs").iterdir())
    f = tmp_path / "grid.yaml"
    f.write_text(
        f"scenarios: [R1]\nmodels: [scripted:oracle]\nplugins: {{low: {wordings['low']}, none: null}}\n"
    )
    cases = [
        ([f, "--archive", archive.root], "error: arm 'none': the frozen part 'fixture' differs"),
        (
            [f, "--archive", archive.root, "--plugin-dir", REF],
            "names its plugins: and --plugin-dir names another",
        ),
        ([f, "--archive", archive.root, "--seed", "-1"], "error: --seed -1 is negative"),
    ]
    for args, message in cases:
        res = call("evalb-record", "grid", *args)
        assert res.code == 2 and message in res.err and len(res.lines) <= 2, res.err
    assert sorted(p.name for p in (archive.root / "runs").iterdir()) == before


# --- wordings the scripted model honours -------------------------------------------------------------
def test_a_wording_copy_puts_its_marker_in_the_hook_note(tmp_path: Path, wordings: dict[str, Path]) -> None:
    """The copied hook, run as the client runs it, prints a note whose marker sets p_consult;
    the reference plugin's note carries none."""
    (tmp_path / "docs" / "adr").mkdir(parents=True)

    def note(plugin: Path) -> str:
        out = subprocess.run(
            ["python3", plugin / "hooks" / "session-start.py"],
            input=json.dumps({"cwd": str(tmp_path)}), capture_output=True, text=True, check=True,
            env={"CLAUDE_PLUGIN_ROOT": str(plugin), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        return json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]

    assert wording_params(note(wordings["low"])) == {"p_consult": 0.2}
    assert wording_params(note(wordings["high"])) == {"p_consult": 0.9}
    assert note(wordings["high"]).startswith("[os-adr] ") and "Always check docs/adr first." in note(
        wordings["high"]
    )
    assert wording_params(note(REF)) == {}
    assert manifest.hash_tree(wordings["high"]) == manifest.hash_tree(wordings["high2"])


@pytest.mark.parametrize(
    ("note", "params"),
    [
        ("[os-adr] x [evalb-scripted p_consult=0.9 p_cite=1] y", {"p_consult": 0.9, "p_cite": 1.0}),
        ("[evalb-scripted p_consult=.25 p_unknown=0.5]", {"p_consult": 0.25}),
        ("[evalb-scripted p_consult=1.5]", {}),  # out of range: no marker
        ("[evalb-scripted seed=3]", {}),
        ("evalb-scripted p_consult=0.1", {}),
        (None, {}),
    ],
)
def test_wording_marker_parse(note: str | None, params: dict[str, float]) -> None:
    assert wording_params(note) == params
