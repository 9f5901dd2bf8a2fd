"""The world commands: thin over the library, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli.world import app
from evalb import manifest
from evalb.errors import UsageError

runner = CliRunner()


def test_sandbox_command(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sandbox", "R2", str(tmp_path / "sb"), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["variant"] == "R2" and info["graph"] is False and len(info["head_commit"]) == 40
    again = runner.invoke(app, ["sandbox", "R2", str(tmp_path / "sb")])
    assert isinstance(again.exception, UsageError)


def test_manifest_and_diff(tmp_path: Path) -> None:
    r = runner.invoke(app, ["manifest"])
    assert r.exit_code == 0
    saved = json.loads(r.output)
    assert saved == manifest.frozen_manifest()
    f = tmp_path / "m.json"
    f.write_text(json.dumps(saved))
    same = runner.invoke(app, ["manifest", "diff", str(f)])
    assert same.exit_code == 0 and "unchanged" in same.output
    f.write_text(json.dumps({**saved, "fixture": "0" * 64, "scenario:R1": "1" * 64}))
    changed = runner.invoke(app, ["manifest", "diff", str(f)])
    assert changed.exit_code == 1
    assert changed.output.splitlines() == ["changed: fixture", "changed: scenario:R1"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    code = "from cli.app import run_app; from cli.world import app; run_app(app, 'evalb')"
    r = subprocess.run(
        [sys.executable, "-c", code, "sandbox", "R9", str(tmp_path / "x")], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.startswith("error: unknown scenario 'R9'") and len(r.stderr.splitlines()) == 1
