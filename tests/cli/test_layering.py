"""The layers, read from the source with `ast`: evalb <- runner <- (callbacks) ; analysis ; cli on top.

`evalb` (the core) imports neither `runner`, `analysis` nor `cli`; `runner` imports neither `analysis`
nor `cli` (scoring after each rep comes in as a callback from the CLI layer); `analysis` does not
import `cli`. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "evalb": {"runner", "analysis", "cli"},
    "runner": {"analysis", "cli"},
    "analysis": {"cli"},
}


def imported_packages(path: Path) -> set[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file, at any depth."""
    out: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {(node.lineno, a.name.split(".")[0]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add((node.lineno, node.module.split(".")[0]))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_library_packages_do_not_import_upwards(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    bad = [
        f"{f.relative_to(ROOT)}:{line} imports {pkg}"
        for f in files
        for line, pkg in sorted(imported_packages(f))
        if pkg in FORBIDDEN[package]
    ]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The parser finds imports at module level, inside functions, and `from x.y import z`."""
    f = tmp_path / "m.py"
    f.write_text("import os\ndef f():\n    from analysis.checker import score_archive\n    import cli.app\n")
    assert {pkg for _, pkg in imported_packages(f)} == {"os", "analysis", "cli"}


def test_console_scripts_live_in_the_cli_layer() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts and all(target.startswith("cli.") for target in scripts.values()), scripts


HEAVY = ("polars", "duckdb", "pyarrow", "pydantic", "scipy", "plotly")


@pytest.mark.parametrize(
    "module", ["cli.main", "cli.record", "cli.score", "cli.selftest", "cli.scripted_judge"]
)
def test_the_cli_layer_imports_no_heavy_library_until_a_command_runs(module: str) -> None:
    """`--help` and argument errors start fast: the data libraries are imported inside the commands
    (the start-up figures are measured by a benchmark, not asserted here)."""
    import subprocess
    import sys

    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [], f"{module} imports {res.stdout.strip()} at start-up"


#: Library modules allowed to print, each with its reason.
MAY_PRINT = {
    "evalb/schema_doc.py": "a developer script (`python -m evalb.schema_doc --check`), not reached by any command",
}


def console_output(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every `print(` call and every use of sys.stdout / sys.stderr in a file."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            out.append((node.lineno, "print("))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in {"stdout", "stderr", "__stdout__", "__stderr__"}
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            out.append((node.lineno, f"sys.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            out += [(node.lineno, f"from sys import {a.name}") for a in node.names if "std" in a.name]
    return out


@pytest.mark.parametrize("package", ["evalb", "runner", "analysis"])
def test_library_packages_never_print(package: str) -> None:
    """Library code warns through `logging` (the CLI layer prints `warning: …`) and writes progress
    only to a stream it is given; output on the console is the CLI layer's."""
    bad = [
        f"{rel}:{line} {what}"
        for f in sorted((ROOT / package).rglob("*.py"))
        if (rel := str(f.relative_to(ROOT))) not in MAY_PRINT
        for line, what in console_output(f)
    ]
    assert not bad, "\n".join(bad)


def test_the_print_check_sees_console_output(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "import sys\nfrom sys import stderr\ndef f(s=sys.stderr):\n    print('x')\n    sys.stdout.write('y')\n"
    )
    assert [w for _, w in console_output(f)] == [
        "from sys import stderr",
        "sys.stderr",
        "print(",
        "sys.stdout",
    ]


def test_a_library_warning_reaches_stderr_as_one_line() -> None:
    """The CLI layer's handler prints library warnings as `warning: …` on the stderr of the moment."""
    import io
    import logging
    import sys

    from cli.app import install_warnings

    install_warnings()
    install_warnings()  # once per process, however often
    err, old = io.StringIO(), sys.stderr
    sys.stderr = err
    try:
        logging.getLogger("runner.grid").warning("scoring run %s failed:\n %s", "abc", "boom")
    finally:
        sys.stderr = old
    assert err.getvalue() == "warning: scoring run abc failed: boom\n"
