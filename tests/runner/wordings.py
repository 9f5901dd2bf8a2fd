"""Test plugin variants ("wordings"): copies of the reference plugin whose SessionStart note carries
a scripted-behaviour marker that `scripted:stochastic` honours (runner.scripted.policies.wording_params).

The marker travels the real path: the copied hook prints it, the client puts the note in front of
the model, and the scripted model reads it there, so the wording really drives the behaviour.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from evalb import paths

#: The sentence of the reference hook's note the marker is put after (the note's first paragraph).
ANCHOR = "os-adr:adr-new (record a new decision). "


def wording_plugin(dest: Path, *, p_consult: float, extra: str = "") -> Path:
    """A copy of the reference plugin at `dest` whose note says `[evalb-scripted p_consult=P]` (and
    `extra` words, to make two wordings with the same behaviour differ in content)."""
    shutil.copytree(paths.REFERENCE_PLUGIN, dest, ignore=shutil.ignore_patterns("__pycache__"))
    hook = dest / "hooks" / "session-start.py"
    text = hook.read_text(encoding="utf-8")
    assert text.count(ANCHOR) == 1, "the reference hook's note changed: update tests/runner/wordings.py"
    marker = f"[evalb-scripted p_consult={p_consult:g}] {extra}".rstrip() + " "
    hook.write_text(text.replace(ANCHOR, ANCHOR + marker), encoding="utf-8")
    return dest
