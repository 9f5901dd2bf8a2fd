"""`evalb`: the umbrella command; it only wires the sub-commands that live beside their libraries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analysis.cli_report import app as report_app
from evalb import paths
from evalb.cli_errors import new_app, run_cli
from evalb.cli_world import app as world_app

app = new_app("evalb: Eval B for os-adr. See also evalb-record, evalb-score, evalb-self-test.")
app.add_typer(world_app)  # sandbox, build-graph, manifest
app.add_typer(report_app, name="report")


@app.command()
def summary(
    archive: Annotated[Path, typer.Option("--archive", help="Archive directory.")] = paths.DEFAULT_ARCHIVE,
) -> None:
    """Per-cell pass rates with 95% intervals (valid runs only) and the grid mean per model."""
    from analysis.summary import summary_text

    typer.echo(summary_text(archive), nl=False)


def main() -> None:
    run_cli(app, "evalb")
