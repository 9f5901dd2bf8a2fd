"""`evalb-self-test`: the model-free harness self-test (analysis.selftest), printed as a table."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from cli.app import new_app, run_app
from evalb.errors import UsageError

app = new_app("Model-free harness self-test.", no_args_is_help=False)


@app.command()
def selftest(
    workdir: Annotated[
        Path | None, typer.Argument(help="Keep the self-test archive here (default: a temp dir).")
    ] = None,
    scenarios: Annotated[Path | None, typer.Option(help="Scenario directory (default: scenarios/).")] = None,
    adrs: Annotated[
        Path | None, typer.Option(help="ADR directory (default: the fixture's docs/adr).")
    ] = None,
) -> None:
    """Fabricate perfect, untouched and control transcripts; score them; exit 0 only if all hold."""
    import polars as pl

    from analysis.selftest import run_selftest

    for option, given in (("--scenarios", scenarios), ("--adrs", adrs)):
        if given is not None and not given.is_dir():
            raise UsageError(f"{option} {given} is not a directory", hint=f"drop {option} to use the default")
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evalb-selftest-")))
        table = run_selftest(workdir, scenarios_dir=scenarios, adr_dir=adrs)
    width = max(len(c) for c in table["case"].to_list())
    print(f"{'variant':<11} {'case':<{width}} {'expect A/B/verdict':<20} {'got':<20} ok")
    for r in table.iter_rows(named=True):
        mark = "ok" if r["ok"] else "MISMATCH  " + r["reasons"]
        print(f"{r['variant']:<11} {r['case']:<{width}} {r['expect']:<20} {r['got']:<20} {mark}")
    bad = table.filter(~pl.col("ok")).height
    print(f"{table.height - bad}/{table.height} cases hold", file=sys.stderr)
    raise typer.Exit(1 if bad else 0)


def main() -> None:
    """Entry point `evalb-self-test`."""
    run_app(app, "evalb-self-test")
