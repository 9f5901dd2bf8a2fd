"""The whole command tree: every command of every console script has help, is documented, and a
deliberate mistake exits by the table (docs/cli.md) with one line on stderr."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.helpers import ROOT, SCRIPTS, app_of, call, command_paths

TREE = [(script, path) for script in sorted(SCRIPTS) for path in command_paths(script)]
DOCS = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def _id(script: str, path: tuple[str, ...]) -> str:
    return " ".join((script, *path))


def test_the_tree_is_what_docs_cli_lists() -> None:
    """Guards the walk itself: it finds the commands we know are there."""
    names = {_id(s, p) for s, p in TREE}
    assert {"evalb-record grid", "evalb manifest show", "evalb manifest diff", "evalb report"} <= names
    assert {"evalb-score", "evalb-scripted-judge", "evalb-self-test"} <= names


@pytest.mark.parametrize(("script", "path"), TREE, ids=[_id(*t) for t in TREE])
def test_help_and_documented(script: str, path: tuple[str, ...]) -> None:
    """`--help` exits 0 and shows this command's usage and its options; the command is named in README or docs."""
    res = CliRunner().invoke(app_of(script), [*path, "--help"], prog_name=script)
    assert res.exit_code == 0, res.output
    usage = next(line for line in res.output.splitlines() if "Usage:" in line)
    assert _id(script, path) in usage, usage
    assert "--help" in res.output
    assert f"`{_id(script, path)}" in DOCS or f"{_id(script, path)} " in DOCS, (
        f"{_id(script, path)} is not documented"
    )


@pytest.mark.parametrize(("script", "path"), TREE, ids=[_id(*t) for t in TREE])
def test_unknown_option_is_one_line_exit_2(script: str, path: tuple[str, ...]) -> None:
    res = call(script, *path, "--no-such-option")
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith("error: No such option: --no-such-option"), res.err
    assert f"see '{_id(script, path)} --help'" in res.lines[0]


def _mistakes(tmp: Path) -> dict[str, tuple[list[object], int, str]]:
    """A deliberate mistake per command: (arguments, exit code by the table, start of the line)."""
    missing = tmp / "missing"
    inside = ROOT / "fixture" / "x"
    return {
        "evalb archive": (["no-such-command"], 2, "error: No such command 'no-such-command'"),
        "evalb archive compact": (["--archive", missing], 2, f"error: {missing} is not an evalb archive"),
        "evalb archive push": ([missing, "s3://bucket/p"], 2, f"error: {missing} is not an evalb archive"),
        "evalb archive pull": (["bucket/p", tmp / "a"], 2, "error: bucket/p is not an s3:// address"),
        "evalb archive merge": ([missing, tmp / "a"], 2, f"error: cannot merge {missing}: {missing} is not"),
        "evalb build-graph": (
            ["--project", missing],
            2,
            f"error: {missing} does not look like the fixture project",
        ),
        "evalb compare": (["--archive", missing], 2, f"error: {missing} is not an evalb archive"),
        "evalb judge-check": (["--repeat", "0"], 2, "error: --repeat and --jobs must be at least 1"),
        "evalb manifest": (["--plugin-dir", missing], 2, f"error: --plugin-dir {missing} is not a directory"),
        "evalb manifest diff": ([missing], 2, f"error: cannot read manifest {missing}"),
        "evalb manifest show": (
            ["abcdef12", "--archive", missing],
            2,
            f"error: {missing} is not an evalb archive",
        ),
        "evalb report": (
            ["--archive", missing, "--out", tmp / "r.html"],
            2,
            f"error: {missing} is not an evalb archive",
        ),
        "evalb sandbox": (["R9", tmp / "sb"], 2, "error: unknown scenario 'R9'"),
        "evalb summary": (["--archive", missing], 2, f"error: {missing} is not an evalb archive"),
        "evalb-record grid": (
            [missing, "--archive", tmp / "a"],
            2,
            f"error: cannot read grid file {missing}",
        ),
        "evalb-record import": (
            [missing, "--scenario", "R1", "--model", "haiku", "--archive", tmp / "a"],
            2,
            f"error: cannot read transcript {missing}",
        ),
        "evalb-record migrate": (
            ["--archive", inside],
            2,
            f"error: --archive {inside} is inside the fixture",
        ),
        "evalb-record recover": (
            ["--archive", inside],
            2,
            f"error: --archive {inside} is inside the fixture",
        ),
        "evalb-record run": (
            ["R9", "scripted:oracle", "--archive", tmp / "a"],
            2,
            "error: unknown scenario 'R9'",
        ),
        "evalb-score": (["--archive", missing], 2, f"error: {missing} is not an evalb archive"),
        "evalb-self-test": (["--scenarios", missing], 2, f"error: --scenarios {missing} is not a directory"),
    }


# evalb-scripted-judge reads stdin: its mistake (no prompt) is test_scripted_judge_without_a_prompt
ARGV_TREE = [t for t in TREE if t[0] != "evalb-scripted-judge"]


@pytest.mark.parametrize(("script", "path"), ARGV_TREE, ids=[_id(*t) for t in ARGV_TREE])
def test_a_deliberate_mistake_exits_by_the_table(script: str, path: tuple[str, ...], tmp_path: Path) -> None:
    args, code, start = _mistakes(tmp_path)[_id(script, path)]
    res = call(script, *path, *args)
    assert res.code == code, res.err
    assert len(res.lines) == 1 and res.lines[0].startswith(start), res.err
    assert not (tmp_path / "a").exists(), "a refused command created the archive"


def test_every_command_has_a_mistake(tmp_path: Path) -> None:
    known = set(_mistakes(tmp_path)) | {"evalb-scripted-judge"}
    assert {_id(*t) for t in TREE} == known


def _script(name: str) -> str:
    return str(ROOT / ".venv" / "bin" / name)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_script_help_does_not_wait_on_stdin(script: str) -> None:
    """`--help` with stdin left open (a terminal would be) answers at once; evalb-scripted-judge used to wait."""
    with subprocess.Popen(
        [_script(script), "--help"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        out, err = proc.communicate(timeout=60)  # stdin is never closed before the answer
    assert proc.returncode == 0, err
    assert f"Usage: {script}" in out


def test_scripted_judge_without_a_prompt() -> None:
    res = subprocess.run(
        [_script("evalb-scripted-judge")], input="", capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    assert res.stderr.splitlines() == ["error: the judge prompt on stdin is empty (pipe the prompt in)"]
