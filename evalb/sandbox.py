"""Sandboxes: a fresh, git-initialised copy of the fixture project for one scenario variant.

Only variants with `graph: true` (R4) get `graphify-out/` (graph.json, GRAPH_REPORT.md, graph.html);
the fixture's .gitignore keeps it out of the commit. The single initial commit has a fixed identity
and date, so the same fixture always gives the same head commit.

The builder also returns the sandbox's *initial tree* (relative path -> kind, size, mode, sha256),
computed from the fixture itself (`initial_tree`), so that the end state can be compared with it
without trusting anything inside the sandbox (its `.git` included): the agent owns the sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
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


#: Names the copy leaves out, at any depth (as `shutil.ignore_patterns` does).
_IGNORED = (graph.GRAPH_DIR, ".git", "__pycache__")
_GRAPH_DIR_MODE = 0o755


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a tree: kind ('file', 'dir', 'symlink'), size in bytes (0 for a directory),
    permission bits, sha256 of a file's bytes (None otherwise), a link's target (None otherwise)."""

    kind: str
    size: int
    mode: int
    sha256: str | None = None
    target: str | None = None


#: relative POSIX path -> Entry; never includes the sandbox root or its `.git`.
Tree = dict[str, Entry]


def _file_entry(path: Path, st: os.stat_result) -> Entry:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Entry("file", st.st_size, stat.S_IMODE(st.st_mode), digest)


def _source_tree(project: Path, graph_json: Path | None) -> Tree:
    """What `build_sandbox` copies from `project` (links followed, as the copy follows them)."""
    tree: Tree = {}

    def walk(src: Path, rel: str) -> None:
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            if entry.name in _IGNORED:
                continue
            r = f"{rel}{entry.name}"
            st = entry.stat(follow_symlinks=True)
            if stat.S_ISDIR(st.st_mode):
                tree[r] = Entry("dir", 0, stat.S_IMODE(st.st_mode))
                walk(Path(entry.path), r + "/")
            else:
                tree[r] = _file_entry(Path(entry.path), st)

    walk(project, "")
    if graph_json is not None:
        tree[graph.GRAPH_DIR] = Entry("dir", 0, _GRAPH_DIR_MODE)
        for out in graph.GRAPH_OUTPUTS:
            src = graph_json.parent / out
            tree[f"{graph.GRAPH_DIR}/{out}"] = _file_entry(src, src.stat())
    return tree


def initial_tree(
    variant_id: str, *, project_dir: Path | None = None, scenarios_dir: Path | None = None
) -> Tree:
    """The tree `build_sandbox(variant_id, ...)` makes, recomputed from the fixture alone
    (for `evalb-record import --sandbox`: never read back from the sandbox)."""
    _, variant = resolve_variant(variant_id, scenarios_dir)
    project = Path(project_dir or paths.FIXTURE_PROJECT).resolve()
    return _source_tree(project, graph.ensure_graph(project) if variant.graph else None)


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
    #: The initial tree, kept in the recorder's memory (see `initial_tree`); not in `--json` output.
    initial_tree: Tree = field(default_factory=dict, repr=False, compare=False)


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
    tree = _source_tree(project, graph_json)
    try:
        shutil.copytree(
            project,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(graph.GRAPH_DIR, ".git", "__pycache__"),
        )
        if graph_json is not None:
            (dest / graph.GRAPH_DIR).mkdir()
            os.chmod(dest / graph.GRAPH_DIR, _GRAPH_DIR_MODE)  # as the initial tree says, whatever the umask
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
        initial_tree=tree,
    )


def remove_tree(path: Path) -> None:
    """Delete a sandbox (or its work directory) whatever the agent left in it, never following a link;
    best effort, never raises. `shutil.rmtree` recurses once per level and fails on a tree deeper than
    Python's recursion limit (an agent can make one in a second), so `rm -rf` finishes the job then."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, check=False, timeout=600)
