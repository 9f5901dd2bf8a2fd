"""Every notebook under notebooks/ runs top to bottom against a small archive, in the project's kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from evalb.paths import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))


def _inject(nb: nbformat.NotebookNode, archive: Path) -> None:
    """Papermill-style: put a cell setting ARCHIVE right after the cell tagged 'parameters'."""
    idx = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    cell = nbformat.v4.new_code_cell(f"ARCHIVE = {str(archive)!r}")
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(idx + 1, cell)


def test_there_are_notebooks():
    """The variance and compare-variants notebooks exist."""
    assert {p.name for p in NOTEBOOKS} >= {"variance.ipynb", "compare-variants.ipynb"}


@pytest.mark.parametrize("archive", ["small_archive", "stochastic_archive"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_without_error(path: Path, archive: str, request: pytest.FixtureRequest):
    """Executing the notebook raises on any cell error; the kernel is this environment's Python.

    Run against a simulated archive (two plugins, two models) and one recorded with the real client
    and the stochastic scripted policy, then scored.
    """
    nb = nbformat.read(path, as_version=4)
    _inject(nb, request.getfixturevalue(archive))
    # nbclient raises CellExecutionError on the first failing cell.
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    streams = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream"
    )
    assert f"kernel python: {sys.executable}" in streams
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


def _run(nb: nbformat.NotebookNode, path: Path) -> str:
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream"
    )


def test_relative_evalb_archive_is_taken_from_where_jupyter_started(
    small_archive: Path, monkeypatch: pytest.MonkeyPatch
):
    """`EVALB_ARCHIVE=NAME jupyter lab notebooks/` started in the archive's parent: the kernel runs in
    notebooks/, yet finds NAME next to where the user was (no cell injected)."""
    monkeypatch.setenv("PWD", str(small_archive.parent))
    monkeypatch.setenv("EVALB_ARCHIVE", small_archive.name)
    path = REPO_ROOT / "notebooks" / "variance.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells = nb.cells[:3]  # parameters, then the cell that loads the archive
    streams = _run(nb, path)
    assert "scored runs" in streams, streams


def test_archive_path_resolution(tmp_path: Path):
    """In a process running in notebooks/: relative to $PWD, absolute as given, unset = repo archive/."""
    code = "from analysis.notebook import archive_path; print(archive_path())"

    def resolved(env: dict[str, str]) -> str:
        base = {k: v for k, v in os.environ.items() if k not in ("EVALB_ARCHIVE", "PWD")}
        res = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO_ROOT / "notebooks", env={**base, **env},
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return res.stdout.strip()

    assert resolved({"EVALB_ARCHIVE": "arch", "PWD": str(tmp_path)}) == str(tmp_path / "arch")
    assert resolved({"EVALB_ARCHIVE": str(tmp_path / "x"), "PWD": "/"}) == str(tmp_path / "x")
    assert resolved({}) == str(REPO_ROOT / "archive")
    # no usable $PWD: the process's own directory
    assert resolved({"EVALB_ARCHIVE": "arch"}) == str(REPO_ROOT / "notebooks" / "arch")


@pytest.mark.parametrize(
    "generated", ["notebooks/variance.html", "notebooks/variance.nbconvert.ipynb", "report.html"]
)
def test_generated_output_is_ignored(generated: str):
    res = subprocess.run(["git", "check-ignore", "-q", generated], cwd=REPO_ROOT, timeout=30, check=False)
    assert res.returncode == 0, f"{generated} is not ignored by .gitignore"
