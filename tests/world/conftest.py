"""Shared fixtures for the world tests: plugin CLIs, fixture copies, the built graph."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalb import graph, paths

PLUGIN = paths.REFERENCE_PLUGIN
BIN = PLUGIN / "bin"


def run_cli(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a plugin CLI the way an agent would (executable, python3 from PATH)."""
    return subprocess.run([str(BIN / name), *args], cwd=cwd, capture_output=True, text=True, timeout=30)


def load_plugin_lib():
    """The plugin's own stdlib module, imported from its file (it is not a package of this repo)."""
    spec = importlib.util.spec_from_file_location("os_adr_under_test", PLUGIN / "lib" / "os_adr.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # keep the plugin dir clean
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = before
    return mod


def copy_fixture(dest: Path) -> Path:
    shutil.copytree(paths.FIXTURE_PROJECT, dest, ignore=shutil.ignore_patterns("graphify-out", ".git"))
    return dest


@pytest.fixture(scope="session")
def fixture_graph() -> Path:
    """The fixture's cached graph.json (built once if missing; invariant checked)."""
    return graph.ensure_graph(paths.FIXTURE_PROJECT)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project directory for CLI tests."""
    p = tmp_path / "proj"
    p.mkdir()
    return p


def graph_json_for(edges: list[tuple[str, str]], extra_nodes: list[dict] | None = None) -> dict:
    """A minimal graphify-like graph.json: one node per file, one edge per pair."""
    files = sorted({f for e in edges for f in e})
    nodes = [{"id": f"n:{f}", "label": Path(f).name, "source_file": f} for f in files]
    links = [
        {"source": f"n:{a}", "target": f"n:{b}", "relation": "calls", "confidence": "EXTRACTED"}
        for a, b in edges
    ]
    return {
        "directed": True,
        "multigraph": False,
        "graph": {},
        "nodes": nodes + (extra_nodes or []),
        "links": links,
    }


def write_graph(root: Path, data: dict) -> Path:
    out = root / "graphify-out" / "graph.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    return out
