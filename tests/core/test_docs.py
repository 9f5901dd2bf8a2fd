"""README and docs stay true: the two commands, every console script, every command shown, every doc linked."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_two_commands_and_ci_agree() -> None:
    """The README's two commands exist, and .ci/run runs exactly the test one."""
    block = README.split("## Two commands", 1)[1].split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    for c in commands:
        assert (ROOT / c).stat().st_mode & 0o111, f"{c} is not executable"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec bash scripts/test\s*$", ci, re.M)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_console_script_is_documented_and_runs(script: str) -> None:
    """Each entry point is named in the README and answers --help."""
    assert script in README
    res = subprocess.run(
        [ROOT / ".venv" / "bin" / script, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr
    assert "Usage" in res.stdout


def test_commands_shown_in_the_readme_exist() -> None:
    """Every `.venv/bin/evalb SUB` and `.venv/bin/evalb-record SUB` in the README is a real command."""
    shown = set(re.findall(r"\.venv/bin/(evalb(?:-record)?) ([a-z-]+)", README))
    assert shown, "README shows no commands"
    for exe, sub in sorted(shown):
        res = subprocess.run(
            [ROOT / ".venv" / "bin" / exe, sub, "--help"], capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, f"{exe} {sub}: {res.stderr}"


def test_linked_docs_exist() -> None:
    for doc in set(re.findall(r"`(docs/[\w.-]+\.md)`", README)):
        assert (ROOT / doc).is_file(), f"README names {doc}, which does not exist"
