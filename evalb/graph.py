"""The fixture's code graph: build it with the real graphify tool and check the R4 one-hop invariant.

graphify (PyPI `graphifyy`) parses the Ruby sources with tree-sitter, no LLM. Files are linked only
by cross-file calls and mixins; `file_hops` measures distance between files the way the reference
plugin's `adr-search --file` does (the plugin carries its own stdlib copy of the same logic).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from evalb import paths
from evalb.errors import FixtureError

GRAPH_DIR = "graphify-out"
GRAPH_JSON = f"{GRAPH_DIR}/graph.json"
#: What a sandbox that keeps the graph receives (the rest of graphify-out/ is build state with
#: absolute paths and timestamps).
GRAPH_OUTPUTS = ("graph.json", "GRAPH_REPORT.md", "graph.html")
R4_CHANGED = "lib/relay/reports.rb"
R4_GOVERNED = "lib/relay/delivery.rb"
R4_HOPS = 1
#: Stamp in graphify-out/: the fixture tree hash the cached graph was built from.
STAMP = ".evalb-source-hash"


@dataclass(frozen=True)
class GraphInfo:
    """A built graph: where it is, its size, the R4 hop count and how long the build took."""

    graph_json: Path
    nodes: int
    links: int
    r4_hops: int | None
    seconds: float


def graphify_executable() -> Path:
    """The `graphify` installed next to this Python (the project's pinned graphifyy)."""
    exe = Path(sys.executable).parent / "graphify"
    if not exe.exists():
        raise FixtureError(f"graphify not found at {exe}", hint="run scripts/setup (installs graphifyy)")
    return exe


def file_adjacency(graph_json: Path) -> dict[str, set[str]]:
    """File-to-file adjacency: an edge between nodes of two different non-empty source files links them."""
    try:
        data = json.loads(graph_json.read_text(encoding="utf-8"))
    except OSError as e:
        raise FixtureError(
            f"cannot read graph {graph_json}: {e.strerror}", hint="run `evalb build-graph`"
        ) from e
    except ValueError as e:
        raise FixtureError(f"{graph_json} is not JSON: {e}", hint="run `evalb build-graph`") from e
    file_of = {n["id"]: n.get("source_file") or "" for n in data.get("nodes", [])}
    adj: dict[str, set[str]] = {}
    for link in data.get("links", data.get("edges", [])):
        a, b = file_of.get(link.get("source"), ""), file_of.get(link.get("target"), "")
        if a and b and a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)
    return adj


def file_hops(graph_json_path: Path, a: str, b: str) -> int | None:
    """Shortest number of file-to-file hops from `a` to `b` (project-relative paths); None if unconnected."""
    adj = file_adjacency(Path(graph_json_path))
    if a == b:
        return 0
    seen, queue = {a}, deque([(a, 0)])
    while queue:
        cur, dist = queue.popleft()
        for nxt in sorted(adj.get(cur, ())):
            if nxt == b:
                return dist + 1
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, dist + 1))
    return None


def check_invariant(graph_json: Path) -> int:
    """Assert the R4 invariant (reports.rb exactly one hop from delivery.rb); return the hop count."""
    hops = file_hops(graph_json, R4_CHANGED, R4_GOVERNED)
    if hops != R4_HOPS:
        found = "not connected at all" if hops is None else f"{hops} file-to-file hops away"
        raise FixtureError(
            f"R4 graph invariant broken: {R4_CHANGED} is {found} from {R4_GOVERNED} (expected exactly {R4_HOPS})",
            hint="fix the fixture's call graph (a method in delivery.rb must call into Relay::Reports), not the checker",
        )
    return hops


def _run_graphify(project_copy: Path, home: Path) -> None:
    env = {
        **os.environ,
        "HOME": str(home),
        "GRAPHIFY_NO_AUTO_REFRESH": "1",
        "GRAPHIFY_NO_TIPS": "1",
        "GIT_CEILING_DIRECTORIES": str(project_copy.parent),
    }
    env.pop("GRAPHIFY_OUT", None)
    proc = subprocess.run(
        [str(graphify_executable()), "update", str(project_copy), "--force"],
        cwd=project_copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not (project_copy / GRAPH_JSON).is_file():
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise FixtureError(f"graphify update failed (exit {proc.returncode}): {tail[0]}")


def build_graph(project_dir: Path = paths.FIXTURE_PROJECT, *, check: bool = True) -> GraphInfo:
    """Rebuild `project_dir/graphify-out/` from scratch and (by default) assert the R4 invariant.

    The build runs on a temporary copy outside any git repository (so graph.json carries no
    `built_at_commit`) with a throwaway HOME. The old output is replaced only when the new graph
    passes the invariant.
    """
    project_dir = Path(project_dir).resolve()
    if not (project_dir / "lib").is_dir():
        raise FixtureError(f"{project_dir} does not look like the fixture project (no lib/)")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evalb-graph-") as tmp:
        copy = Path(tmp) / "webhook-relay"
        shutil.copytree(project_dir, copy, ignore=shutil.ignore_patterns(GRAPH_DIR, ".git", "__pycache__"))
        home = Path(tmp) / "home"
        home.mkdir()
        _run_graphify(copy, home)
        built = copy / GRAPH_JSON
        hops = check_invariant(built) if check else file_hops(built, R4_CHANGED, R4_GOVERNED)
        data = json.loads(built.read_text(encoding="utf-8"))
        out = project_dir / GRAPH_DIR
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(copy / GRAPH_DIR, out)
        (out / STAMP).write_text(_source_hash(project_dir) + "\n")
    return GraphInfo(
        graph_json=out / "graph.json",
        nodes=len(data.get("nodes", [])),
        links=len(data.get("links", [])),
        r4_hops=hops,
        seconds=round(time.perf_counter() - start, 3),
    )


def _source_hash(project_dir: Path) -> str:
    from evalb.manifest import hash_tree  # manifest imports nothing from here; avoid a cycle anyway

    return hash_tree(project_dir)


def ensure_graph(project_dir: Path = paths.FIXTURE_PROJECT) -> Path:
    """The cached graph.json of `project_dir`, rebuilt when missing or built from other sources.

    The invariant is checked either way.
    """
    graph_json = Path(project_dir) / GRAPH_JSON
    stamp = Path(project_dir) / GRAPH_DIR / STAMP
    fresh = stamp.is_file() and stamp.read_text().strip() == _source_hash(Path(project_dir))
    if not graph_json.is_file() or not fresh:
        return build_graph(project_dir).graph_json
    check_invariant(graph_json)
    return graph_json
