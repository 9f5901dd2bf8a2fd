"""Sandboxes: a fresh, git-initialised copy of the fixture project for one scenario variant.

Only variants with `graph: true` (R4) get `graphify-out/` (graph.json, GRAPH_REPORT.md, graph.html);
the fixture's .gitignore keeps it out of the commit. The single initial commit has a fixed identity
and date, so the same fixture always gives the same head commit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from evalb import graph, manifest, paths
from evalb.errors import FixtureError, UsageError
from evalb.scenarios import resolve_variant

GIT_NAME = "Relay Maintainers"
GIT_EMAIL = "maintainers@webhook-relay.example"
GIT_DATE = "2025-03-10T09:00:00Z"
COMMIT_MESSAGE = "webhook-relay 1.4.0"
_GIT_CONFIG = (
    f"user.name={GIT_NAME}",
    f"user.email={GIT_EMAIL}",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.hooksPath=/dev/null",
    "init.defaultBranch=main",
    "core.autocrlf=false",
)


@dataclass(frozen=True)
class SandboxInfo:
    """What `build_sandbox` made: where, for which variant, whether the graph is in, and identities."""

    path: Path
    variant: str
    scenario: str
    graph: bool
    head_commit: str
    fixture_hash: str
    plugin_name: str
    plugin_version: str
    plugin_hash: str
    seconds: float


def _git(args: list[str], cwd: Path) -> str:
    cfg = [x for c in _GIT_CONFIG for x in ("-c", c)]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": GIT_NAME,
        "GIT_AUTHOR_EMAIL": GIT_EMAIL,
        "GIT_COMMITTER_NAME": GIT_NAME,
        "GIT_COMMITTER_EMAIL": GIT_EMAIL,
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    try:
        proc = subprocess.run(["git", *cfg, *args], cwd=cwd, env=env, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise FixtureError("git is not installed", hint="install git") from e
    if proc.returncode != 0:
        raise FixtureError(f"git {args[0]} failed in {cwd}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip()


def _check_dest(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise UsageError(
            f"sandbox destination {dest} exists and is not a directory", hint="choose a new path"
        )
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(
            f"sandbox destination {dest} is not empty", hint="choose a new path or remove it first"
        )


def build_sandbox(
    variant_id: str,
    dest: Path,
    *,
    plugin_dir: Path | None = None,
    project_dir: Path | None = None,
    scenarios_dir: Path | None = None,
) -> SandboxInfo:
    """Build the sandbox for `variant_id` (e.g. 'R2', 'R4-nograph') at `dest` (absent or empty).

    `plugin_dir` (default: the reference plugin) is not copied in — the client loads it with
    `--plugin-dir` — but it must be a readable plugin, and its identity is returned.
    """
    start = time.perf_counter()
    scenario, variant = resolve_variant(variant_id, scenarios_dir)
    project = Path(project_dir or paths.FIXTURE_PROJECT).resolve()
    name, version, plugin_hash = manifest.plugin_identity(Path(plugin_dir or paths.REFERENCE_PLUGIN))
    dest = Path(dest).absolute()
    _check_dest(dest)
    graph_json = graph.ensure_graph(project) if variant.graph else None
    try:
        shutil.copytree(
            project,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(graph.GRAPH_DIR, ".git", "__pycache__"),
        )
        if graph_json is not None:
            (dest / graph.GRAPH_DIR).mkdir()
            for out in graph.GRAPH_OUTPUTS:
                shutil.copy2(graph_json.parent / out, dest / graph.GRAPH_DIR / out)
    except OSError as e:
        raise UsageError(f"cannot write sandbox {dest}: {e.strerror or e}") from e
    _git(["init", "-q"], dest)
    for c in _GIT_CONFIG[:2]:
        _git(["config", *c.split("=", 1)], dest)
    _git(["add", "-A"], dest)
    _git(["commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE], dest)
    head = _git(["rev-parse", "HEAD"], dest)
    return SandboxInfo(
        path=dest,
        variant=variant.id,
        scenario=scenario.id,
        graph=variant.graph,
        head_commit=head,
        fixture_hash=manifest.hash_tree(project),
        plugin_name=name,
        plugin_version=version,
        plugin_hash=plugin_hash,
        seconds=round(time.perf_counter() - start, 3),
    )
