"""`evalb`: the umbrella command (world commands, summary, report, judge-check), thin over the libraries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.app import new_app, run_app
from cli.archive import app as archive_app
from cli.compare import compare
from cli.push import pull, push
from cli.report import report
from cli.world import app as world_app
from evalb import paths

app = new_app("evalb: Eval B for os-adr. See also evalb-record, evalb-score, evalb-self-test.")
app.add_typer(world_app)  # sandbox, build-graph, manifest
app.command("report")(report)
app.command("compare")(compare)
archive_app.command("push")(push)
archive_app.command("pull")(pull)
app.add_typer(archive_app, name="archive")  # merge, compact, push, pull


@app.command()
def summary(
    archive: Annotated[Path, typer.Option("--archive", help="Archive directory.")] = paths.DEFAULT_ARCHIVE,
) -> None:
    """Per-cell pass rates with 95% intervals (valid runs only) and the grid mean per model."""
    from analysis.summary import summary_text

    typer.echo(summary_text(archive), nl=False)


@app.command("judge-check")
def judge_check(
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="Judge command (prompt on stdin, prints YES/NO); default: ADR_EVAL_B_JUDGE_CMD, else claude -p --model haiku.",
        ),
    ] = None,
    cases: Annotated[
        Path | None,
        typer.Option("--cases", help="Labelled messages (YAML); default analysis/judge_cases.yaml."),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", help="Answers asked per message (2+ measures self-consistency).")
    ] = 2,
    jobs: Annotated[int, typer.Option("--jobs", help="Questions in flight at once.")] = 4,
    min_kappa: Annotated[
        float, typer.Option("--min-kappa", help="Required lower bound of kappa's 95% interval.")
    ] = 0.8,
    min_consistency: Annotated[
        float, typer.Option("--min-consistency", help="Required self-consistency.")
    ] = 0.95,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the full result here.")] = None,
) -> None:
    """Does the judge agree with the rubric? Confusion matrix, kappa, self-consistency; exit 0 pass, 1 fail."""
    from analysis import judge as judging
    from analysis import judge_check as jc
    from evalb.errors import UsageError

    if repeat < 1 or jobs < 1:
        raise UsageError("--repeat and --jobs must be at least 1")
    if not -1 <= min_kappa <= 1 or not 0 <= min_consistency <= 1:
        raise UsageError("--min-kappa must lie in [-1, 1] and --min-consistency in [0, 1]")
    if json_out is not None and not json_out.parent.is_dir():
        raise UsageError(f"--json {json_out}: the directory {json_out.parent} does not exist")
    path = cases or jc.DEFAULT_CASES
    labelled, chash = jc.load_cases(path)
    chosen = judging.CommandJudge(judge) if judge and judge.strip() else judging.default_judge()
    res = jc.run_check(
        chosen,
        labelled,
        repeat=repeat,
        jobs=jobs,
        cases_file=str(path),
        cases_hash=chash,
        min_kappa=min_kappa,
        min_consistency=min_consistency,
    )
    typer.echo(jc.report_text(res), nl=False)
    if json_out is not None:
        jc.write_json(res, json_out)
    raise typer.Exit(0 if res.passed() else 1)


def main() -> None:
    run_app(app, "evalb")
