"""The `evalb report` command: write the static HTML report for an archive (thin over analysis.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import new_app
from evalb.paths import DEFAULT_ARCHIVE


def report(
    archive: Annotated[
        Path, typer.Option("--archive", help="The archive directory to report on.")
    ] = DEFAULT_ARCHIVE,
    out: Annotated[Path, typer.Option("--out", help="Where to write the HTML file.")] = Path("report.html"),
    title: Annotated[str, typer.Option("--title", help="Page title.")] = "evalb report",
) -> None:
    """Write the report for ARCHIVE to OUT (one self-contained file; opens offline)."""
    from analysis.report import build_report

    build_report(archive, out, title=title)
    typer.echo(str(out))


#: `report` alone, as a one-command app (what `evalb report` runs; handy for in-process tests)
app = new_app("Write a static HTML report with error bars and per-run drill-down.", no_args_is_help=False)
app.command()(report)
