"""Sandboxes: for each variant (W1-W3, R1-R4, R4-nograph, O1-O3), the fixture and nothing more, one commit, clean status."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalb import graph, manifest, paths
from evalb.errors import FixtureError, UsageError
from evalb.sandbox import build_sandbox
from evalb.scenarios import all_variant_ids


def git(sb: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=sb, capture_output=True, text=True, check=True).stdout


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


@pytest.fixture(scope="module")
def fixture_files(fixture_graph: Path) -> set[str]:
    return {rel for rel, _ in manifest._files(paths.FIXTURE_PROJECT)}


@pytest.mark.parametrize("variant", all_variant_ids())
def test_sandbox_holds_fixture_and_graph_only_for_r4(
    variant: str, tmp_path: Path, fixture_files: set[str]
) -> None:
    info = build_sandbox(variant, tmp_path / "sb")
    sb = info.path
    graph_files = {f"{graph.GRAPH_DIR}/{n}" for n in graph.GRAPH_OUTPUTS}
    expected = fixture_files | (graph_files if variant == "R4" else set())
    assert tree(sb) == expected
    assert info.graph is (variant == "R4") and info.variant == variant
    assert manifest.hash_tree(sb) == manifest.hash_tree(paths.FIXTURE_PROJECT) == info.fixture_hash
    assert git(sb, "status", "--porcelain") == ""
    assert git(sb, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(sb, "rev-parse", "HEAD").strip() == info.head_commit
    assert set(git(sb, "ls-files").split()) == fixture_files  # graph output is ignored, not committed
    assert (
        git(sb, "log", "-1", "--format=%an <%ae> %aI").strip()
        == "Relay Maintainers <maintainers@webhook-relay.example> 2025-03-10T09:00:00+00:00"
    )
    assert (info.plugin_name, info.plugin_version) == ("os-adr", "0.3.0")


def test_same_fixture_same_commit(tmp_path: Path) -> None:
    """Two variants' sandboxes start from the same commit (how fast: benchmarks/bench_sandbox.py)."""
    a = build_sandbox("R1", tmp_path / "a")
    b = build_sandbox("W2", tmp_path / "b")
    assert a.head_commit == b.head_commit
    assert a.seconds > 0 and b.seconds > 0


def test_destination_rules(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build_sandbox("R2", empty).path == empty
    with pytest.raises(UsageError, match="not empty"):
        build_sandbox("R2", empty)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        build_sandbox("R2", afile)
    with pytest.raises(UsageError, match="unknown scenario"):
        build_sandbox("R9", tmp_path / "r9")
    with pytest.raises(FixtureError, match="not a Claude Code plugin"):
        build_sandbox("R2", tmp_path / "p", plugin_dir=tmp_path)
    assert not (tmp_path / "p").exists()
