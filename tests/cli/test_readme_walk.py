"""A new user's walk through README's "Everyday use" with deliberate mistakes: each gets one line on
stderr and the documented exit code (2), and nothing is recorded."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.helpers import ROOT, SCRIPTS, call, command_paths

README = (ROOT / "README.md").read_text()


def everyday_commands() -> list[tuple[str, list[str]]]:
    block = README.split("## Everyday use", 1)[1].split("```", 2)[1]
    out = []
    for line in block.splitlines():
        words = shlex.split(re.sub(r"\[[^]]*\]", "", line.split("#")[0].split(">")[0]))
        if words and words[0].startswith(".venv/bin/") and Path(words[0]).name in SCRIPTS:
            out.append((Path(words[0]).name, words[1:]))
    return out


WALK = everyday_commands()


def test_the_walk_covers_the_readme() -> None:
    assert len(WALK) >= 10 and {s for s, _ in WALK} == {
        "evalb",
        "evalb-record",
        "evalb-score",
        "evalb-self-test",
    }


@pytest.mark.parametrize(("script", "args"), WALK, ids=[" ".join([s, *a])[:60] for s, a in WALK])
def test_a_misspelt_option(script: str, args: list[str], tmp_path: Path) -> None:
    res = call(script, *args, "--archvie", tmp_path / "a")
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith("error: No such option: --archvie"), res.err
    assert not (tmp_path / "a").exists()


SUBCOMMANDS = [(s, a) for s, a in WALK if a and (a[0],) in command_paths(s)]


@pytest.mark.parametrize(
    ("script", "args"), SUBCOMMANDS, ids=[" ".join([s, *a])[:60] for s, a in SUBCOMMANDS]
)
def test_a_misspelt_command(script: str, args: list[str]) -> None:
    res = call(script, args[0] + "s", *args[1:])
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith(f"error: No such command '{args[0]}s'"), res.err
    assert f"see '{script} --help'" in res.lines[0]
