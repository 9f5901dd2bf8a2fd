"""Integrity manifest: hashes of the frozen parts, plugin identity, and the diff."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from evalb import manifest, paths
from evalb.errors import FixtureError, UsageError
from evalb.scenarios import load_scenarios

HEX = re.compile(r"^[0-9a-f]{64}$")


def test_frozen_manifest_parts() -> None:
    m = manifest.frozen_manifest()
    expected_scenarios = {f"scenario:{p.stem}" for p in paths.SCENARIOS_DIR.glob("*.md")}
    assert set(m) == {"fixture", "plugin", "judge_rubric", "checker_rules"} | expected_scenarios
    assert expected_scenarios == {f"scenario:{s.id}" for s in load_scenarios()}
    assert all(HEX.match(v) or v == manifest.MISSING for v in m.values())
    assert HEX.match(m["fixture"]) and HEX.match(m["plugin"])
    assert m["scenario:R2"] == manifest.hash_file(paths.SCENARIOS_DIR / "R2.md")


def test_tree_hash_ignores_output_and_follows_content(tmp_path: Path) -> None:
    a = tmp_path / "a"
    shutil.copytree(paths.REFERENCE_PLUGIN, a)
    base = manifest.hash_tree(a)
    assert base == manifest.hash_tree(paths.REFERENCE_PLUGIN)  # location-independent
    (a / "graphify-out").mkdir()
    (a / "graphify-out" / "graph.json").write_text("{}")
    (a / "lib" / "__pycache__").mkdir()
    (a / "lib" / "__pycache__" / "x.pyc").write_bytes(b"0")
    assert manifest.hash_tree(a) == base
    skill = a / "skills" / "adr-new" / "SKILL.md"
    skill.write_text(skill.read_text() + " ")
    assert manifest.hash_tree(a) != base
    skill.rename(a / "skills" / "adr-new" / "OTHER.md")
    assert manifest.hash_tree(a) != base


def test_missing_parts_and_diff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "JUDGE_RUBRIC", tmp_path / "judge-rubric.md")
    before = manifest.frozen_manifest()
    assert before["judge_rubric"] == manifest.MISSING
    (tmp_path / "judge-rubric.md").write_text("rubric")
    after = manifest.frozen_manifest()
    assert manifest.diff_manifests(before, after) == ["judge_rubric"]
    assert manifest.diff_manifests(after, after) == []
    assert manifest.diff_manifests({"fixture": "x"}, {"plugin": "y"}) == ["fixture", "plugin"]


def test_plugin_identity(tmp_path: Path) -> None:
    name, version, digest = manifest.plugin_identity(paths.REFERENCE_PLUGIN)
    assert (name, version) == ("os-adr", "0.3.0") and HEX.match(digest)
    with pytest.raises(FixtureError, match="does not exist"):
        manifest.plugin_identity(tmp_path / "nope")
    with pytest.raises(FixtureError, match="not a Claude Code plugin"):
        manifest.plugin_identity(tmp_path)
    (tmp_path / ".claude-plugin").mkdir()
    (tmp_path / ".claude-plugin" / "plugin.json").write_text("{nope")
    with pytest.raises(FixtureError, match="not valid JSON"):
        manifest.plugin_identity(tmp_path)


def test_load_manifest(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"run": 1, "manifest": {"fixture": "abc"}}))
    assert manifest.load_manifest(f) == {"fixture": "abc"}
    f.write_text("[1]")
    with pytest.raises(UsageError):
        manifest.load_manifest(f)
    with pytest.raises(UsageError):
        manifest.load_manifest(tmp_path / "none.json")
