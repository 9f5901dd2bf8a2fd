"""Integrity manifest: content hashes of the frozen parts (fixture, plugin, scenarios, judge rubric, checker rules).

Every recorded run carries `frozen_manifest()`; `diff_manifests` says which parts changed since.
A tree hash is sha256 over the sorted relative paths and bytes of its files, ignoring graph output,
caches and VCS data, so it is independent of where the tree lives and of file times.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from evalb import paths
from evalb.errors import FixtureError, UsageError

IGNORED_DIRS = frozenset({"graphify-out", "__pycache__", ".git", ".pytest_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc",)
MISSING = "missing"
PARTS_FIXED = ("fixture", "plugin", "judge_rubric", "checker_rules")


def _files(root: Path) -> list[tuple[str, Path]]:
    out = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part in IGNORED_DIRS for part in rel.parts) or p.name.endswith(IGNORED_SUFFIXES):
            continue
        if p.is_file():
            out.append((rel.as_posix(), p))
    return sorted(out)


def hash_tree(root: Path) -> str:
    """sha256 over the sorted relative paths and contents of the files under `root`."""
    h = hashlib.sha256()
    for rel, p in _files(root):
        h.update(rel.encode("utf-8") + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def hash_file(path: Path) -> str:
    """sha256 of one file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hash_or_missing(path: Path) -> str:
    if path.is_dir():
        return hash_tree(path)
    if path.is_file():
        return hash_file(path)
    return MISSING


def plugin_identity(plugin_dir: Path) -> tuple[str, str, str]:
    """(name, version, tree hash) of a Claude Code plugin directory, from `.claude-plugin/plugin.json`."""
    plugin_dir = Path(plugin_dir)
    manifest = plugin_dir / ".claude-plugin" / "plugin.json"
    if not plugin_dir.is_dir():
        raise FixtureError(f"plugin directory {plugin_dir} does not exist or is not a directory")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FixtureError(
            f"{plugin_dir} is not a Claude Code plugin (no .claude-plugin/plugin.json)",
            hint="pass the plugin's root directory",
        ) from None
    except OSError as e:
        raise FixtureError(f"cannot read {manifest}: {e.strerror}") from e
    except ValueError as e:
        raise FixtureError(f"{manifest} is not valid JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise FixtureError(f"{manifest} has no 'name'")
    try:
        digest = hash_tree(plugin_dir)
    except OSError as e:
        raise FixtureError(f"cannot read plugin directory {plugin_dir}: {e.strerror}") from e
    return data["name"], str(data.get("version") or "unversioned"), digest


def frozen_manifest(*, plugin_dir: Path | None = None, scenarios_dir: Path | None = None) -> dict[str, str]:
    """Content hashes of every frozen part: fixture, plugin, scenario:<ID> each, judge_rubric, checker_rules.

    Parts that do not exist (yet) get the value 'missing'.
    """
    scenarios_dir = Path(scenarios_dir or paths.SCENARIOS_DIR)
    out = {
        "fixture": _hash_or_missing(paths.FIXTURE_PROJECT),
        "plugin": _hash_or_missing(Path(plugin_dir or paths.REFERENCE_PLUGIN)),
    }
    for f in sorted(scenarios_dir.glob("*.md")):
        out[f"scenario:{f.stem}"] = hash_file(f)
    out["judge_rubric"] = _hash_or_missing(paths.JUDGE_RUBRIC)
    out["checker_rules"] = _hash_or_missing(paths.RULES_DIR)
    return out


def diff_manifests(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Parts whose hash differs, or that exist in only one of the two, in a stable order."""
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def load_manifest(path: Path) -> dict[str, str]:
    """A saved manifest: the JSON `evalb manifest` prints, or any JSON object holding it under 'manifest'."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read manifest {path}: {e.strerror}") from e
    except ValueError as e:
        raise UsageError(f"{path} is not JSON: {e}", hint="save one with `evalb manifest > FILE`") from e
    if isinstance(data, dict) and isinstance(data.get("manifest"), dict):
        data = data["manifest"]
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise UsageError(f"{path} is not a manifest (expected an object of part -> hash)")
    return data
