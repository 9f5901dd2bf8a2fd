"""The code graph: real graphify build, the R4 invariant, a rewired fixture failing it, file-hop logic."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from evalb import graph
from evalb.errors import FixtureError
from tests.world.conftest import copy_fixture, graph_json_for, load_plugin_lib, write_graph


def test_build_graph_from_scratch_passes_invariant(tmp_path: Path) -> None:
    copy = copy_fixture(tmp_path / "project")
    info = graph.build_graph(copy)
    assert info.r4_hops == 1 and info.nodes > 50
    data = json.loads((copy / graph.GRAPH_JSON).read_text())
    assert "built_at_commit" not in data
    assert not any(n.get("source_file", "").endswith(".md") for n in data["nodes"])
    assert {"lib/relay/delivery.rb"} <= graph.file_adjacency(copy / graph.GRAPH_JSON)["lib/relay/reports.rb"]


def test_rewired_fixture_fails_with_hop_count(tmp_path: Path) -> None:
    copy = copy_fixture(tmp_path / "project")
    delivery = copy / "lib" / "relay" / "delivery.rb"
    src = delivery.read_text()
    call = "      Reports.record(subscriber: @subscriber.name, outcome: outcome, attempts: attempts, at: @clock.now)\n"
    assert call in src
    delivery.write_text(src.replace(call, ""))
    with pytest.raises(FixtureError) as err:
        graph.build_graph(copy)
    msg = str(err.value)
    assert "lib/relay/reports.rb is 2 file-to-file hops away from lib/relay/delivery.rb" in msg
    assert "expected exactly 1" in msg
    assert not (copy / graph.GRAPH_DIR).exists()  # a failing graph is not installed


def test_file_hops_semantics(tmp_path: Path) -> None:
    stub = {"id": "stub", "label": "Base", "source_file": ""}
    data = graph_json_for([("a.rb", "b.rb"), ("c.rb", "b.rb"), ("d.rb", "d.rb")], extra_nodes=[stub])
    data["links"].append({"source": "n:d.rb", "target": "stub", "relation": "inherits"})
    data["links"].append({"source": "n:a.rb", "target": "stub", "relation": "inherits"})
    g = write_graph(tmp_path, data)
    assert graph.file_hops(g, "a.rb", "a.rb") == 0
    assert graph.file_hops(g, "b.rb", "a.rb") == 1  # direction ignored
    assert graph.file_hops(g, "a.rb", "c.rb") == 2
    assert graph.file_hops(g, "a.rb", "d.rb") is None  # stub nodes with no file do not link files
    with pytest.raises(FixtureError):
        graph.file_hops(tmp_path / "nope.json", "a", "b")


def test_plugin_and_evalb_agree_on_hops(fixture_graph: Path) -> None:
    lib = load_plugin_lib()
    adj = graph.file_adjacency(fixture_graph)
    assert adj == lib.file_adjacency(fixture_graph)
    files = sorted(adj)
    for a, b in combinations(files, 2):
        assert graph.file_hops(fixture_graph, a, b) == lib.file_hops(fixture_graph, a, b), (a, b)
        assert (b in lib.file_neighbours(fixture_graph, a)) == (graph.file_hops(fixture_graph, a, b) == 1)


def test_ensure_graph_rebuilds_when_sources_change(tmp_path: Path) -> None:
    copy = copy_fixture(tmp_path / "project")
    first = graph.ensure_graph(copy)
    stamp = (copy / graph.GRAPH_DIR / graph.STAMP).read_text()
    mtime = first.stat().st_mtime_ns
    assert graph.ensure_graph(copy).stat().st_mtime_ns == mtime  # cached
    (copy / "lib" / "relay" / "clock.rb").write_text((copy / "lib" / "relay" / "clock.rb").read_text() + "\n")
    graph.ensure_graph(copy)
    assert (copy / graph.GRAPH_DIR / graph.STAMP).read_text() != stamp
