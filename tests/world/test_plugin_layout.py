"""The reference plugin's layout: manifest, hook (speaks only with docs/adr/), skills; the real client sees them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from evalb import paths
from tests.world.conftest import PLUGIN

HOOK = PLUGIN / "hooks" / "session-start.py"


def run_hook(cwd: Path, stdin: dict | None = None, env_root: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_")}
    if env_root:
        env["CLAUDE_PLUGIN_ROOT"] = str(PLUGIN)
    return subprocess.run(
        ["python3", str(HOOK)],
        input=json.dumps(stdin) if stdin is not None else "",
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_manifest_and_hooks_json() -> None:
    meta = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert meta["name"] == "os-adr" and meta["version"]
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())
    (entry,) = hooks["hooks"]["SessionStart"]
    (cmd,) = entry["hooks"]
    assert cmd["type"] == "command" and "${CLAUDE_PLUGIN_ROOT}/hooks/session-start.py" in cmd["command"]


def test_hook_note_only_when_project_has_docs_adr(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    r = run_hook(bare, {"cwd": str(bare), "hook_event_name": "SessionStart"})
    assert r.returncode == 0 and r.stdout == ""
    (tmp_path / "withadr" / "docs" / "adr").mkdir(parents=True)
    for stdin, env_root in (({"cwd": str(tmp_path / "withadr")}, True), (None, False)):
        r = run_hook(tmp_path / "withadr", stdin, env_root)
        out = json.loads(r.stdout)["hookSpecificOutput"]
        assert out["hookEventName"] == "SessionStart"
        note = out["additionalContext"]
        assert note.startswith("[os-adr]") and "docs/adr/" in note
        assert "os-adr:adr-search" in note and "os-adr:adr-new" in note
        assert f"{PLUGIN.resolve()}/bin" in note
        assert len(note) < 600


def test_skills_frontmatter_and_cli_paths() -> None:
    for name in ("adr-new", "adr-search"):
        text = (PLUGIN / "skills" / name / "SKILL.md").read_text()
        front = yaml.safe_load(text.split("---\n")[1])
        assert front["name"] == name and len(front["description"]) > 20
        assert f"${{CLAUDE_PLUGIN_ROOT}}/bin/{name}" in text


@pytest.mark.client
def test_real_client_gets_hook_note_and_skills(tmp_path: Path) -> None:
    """The pinned client, pointed at a dead loopback port: hook and init events precede any model call."""
    client = paths.client_binary()
    assert client.exists(), f"client not installed at {client}: run scripts/setup"
    from evalb.sandbox import build_sandbox

    sb = build_sandbox("R1", tmp_path / "sb").path
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "x",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    proc = subprocess.Popen(
        [
            str(client),
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--plugin-dir",
            str(PLUGIN),
            "ping",
        ],
        cwd=sb,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    hook, init, deadline = None, None, time.monotonic() + 60
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            if ev.get("subtype") == "hook_response":
                hook = ev
            if ev.get("subtype") == "init":
                init = ev
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.kill()
        proc.wait()
    assert hook is not None and "[os-adr]" in hook.get("output", "") + hook.get("stdout", "")
    assert init is not None and {"os-adr:adr-new", "os-adr:adr-search"} <= set(init["skills"])
