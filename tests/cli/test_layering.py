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
