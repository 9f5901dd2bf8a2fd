"""The `evalb report` command: write the static HTML report for an archive (thin over analysis.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalb.errors import EvalbError
from evalb.paths import DEFAULT_ARCHIVE

app = typer.Typer(
    add_completion=False, help="Write a static HTML report with error bars and per-run drill-down."
)


# A callback rather than a command, so the app runs standalone and as `evalb report` via add_typer.
@app.callback(invoke_without_command=True)
def report(
    archive: Annotated[
        Path, typer.Option("--archive", help="The archive directory to report on.")
    ] = DEFAULT_ARCHIVE,
    out: Annotated[Path, typer.Option("--out", help="Where to write the HTML file.")] = Path("report.html"),
    title: Annotated[str, typer.Option("--title", help="Page title.")] = "evalb report",
) -> None:
    """Write the report for ARCHIVE to OUT (one self-contained file; opens offline)."""
    from analysis.report import build_report

    try:
        build_report(archive, out, title=title)
    except EvalbError as e:
        typer.echo(f"evalb report: {e.one_line()}", err=True)
        raise typer.Exit(e.exit_code) from None
    typer.echo(str(out))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
