"""The console scripts as apps, and running one in-process through the CLI's error boundary."""

from __future__ import annotations

import importlib
import io
import tomllib
from dataclasses import dataclass
from pathlib import Path

import typer

from cli.app import invoke

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def app_of(script: str) -> typer.Typer:
    """The typer app behind a console script (`cli.X:main` -> `cli.X.app`)."""
    module = SCRIPTS[script].split(":")[0]
    return importlib.import_module(module).app


def command_paths(script: str) -> list[tuple[str, ...]]:
    """Every command and subcommand of a script, as the words after its name (() = the script itself)."""
    out: list[tuple[str, ...]] = []

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if path or not subs or getattr(cmd, "invoke_without_command", False):
            out.append(path)
        for name, sub in sorted((subs or {}).items()):
            if not getattr(sub, "hidden", False):
                walk(sub, (*path, name))

    walk(typer.main.get_command(app_of(script)), ())
    return out


@dataclass
class Result:
    code: int
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()


def call(script: str, *args: object) -> Result:
    """Run a console script's app in-process through the boundary: exit code and stderr."""
    err = io.StringIO()
    code = invoke(app_of(script), script, [str(a) for a in args], err)
    return Result(code, err.getvalue())
