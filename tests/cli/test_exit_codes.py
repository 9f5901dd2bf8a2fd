"""One table of exit codes: the code's (cli.app.EXIT_CODES), README's and docs/cli.md's are the same,
and every error type maps to its documented code through the one boundary."""

from __future__ import annotations

import io
import re

import pytest
import typer

from cli.app import EXIT_CODES, exit_code_for, invoke, new_app
from evalb import errors
from tests.cli.helpers import ROOT


def documented_table(text: str, after: str) -> dict[int, str]:
    section = text.split(after, 1)[1]
    return {
        int(code): meaning.strip() for code, meaning in re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)
    }


@pytest.mark.parametrize(
    ("doc", "heading"), [("README.md", "## Exit codes"), ("docs/cli.md", "## Exit codes")]
)
def test_documented_table_is_the_codes_table(doc: str, heading: str) -> None:
    table = documented_table((ROOT / doc).read_text(), heading)
    assert table == EXIT_CODES


def test_docs_cli_names_each_error_type_with_its_code() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| (.+) \| (\d+) \|$", text, re.M)
    documented = {name: int(code) for cell, code in rows for name in re.findall(r"`(\w+Error)`", cell)}
    types = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.EvalbError) and cls is not errors.EvalbError
    }
    assert set(documented) == set(types)
    for name, cls in types.items():
        assert exit_code_for(cls("x")) == documented[name], name
        assert documented[name] in EXIT_CODES


def _app_raising(exc: BaseException) -> typer.Typer:
    app = new_app("t", no_args_is_help=False)

    @app.command()
    def boom() -> None:
        raise exc

    return app


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (
            errors.UsageError("--reps 0 is wrong", hint="give 1 or more"),
            2,
            "error: --reps 0 is wrong (give 1 or more)",
        ),
        (errors.ConfigurationError("the judge cannot run"), 2, "error: the judge cannot run"),
        (
            errors.ArchiveError("x is not an archive\nsecond line"),
            2,
            "error: x is not an archive second line",
        ),
        (errors.HarnessError("1 rep(s) failed", hint="rerun"), 3, "error: 1 rep(s) failed (rerun)"),
        (KeyboardInterrupt(), 130, "error: interrupted; what was recorded is kept (rerun to resume)"),
        (ZeroDivisionError("boom"), 3, "error: evalb failed unexpectedly: ZeroDivisionError: boom"),
        (typer.Exit(1), 1, None),
    ],
)
def test_the_boundary_maps_each_error_to_one_line(exc: BaseException, code: int, line: str | None) -> None:
    err = io.StringIO()
    assert invoke(_app_raising(exc), "t", [], err) == code
    assert code in EXIT_CODES
    if line is None:
        assert err.getvalue() == ""
    else:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith(line), lines
