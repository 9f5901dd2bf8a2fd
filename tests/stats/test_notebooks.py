"""Every notebook under notebooks/ runs top to bottom against a small archive, in the project's kernel."""

from __future__ import annotations

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
