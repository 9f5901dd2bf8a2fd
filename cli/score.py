"""evalb-score: score the archive with the two-axis checker; one row per run, TSV for autoresearch.

Exit codes (docs/cli.md): 0 every valid run passes, except expected failures; 1 some valid run
fails unexpectedly; 2 usage or configuration error. An expected failure is a run of a degradation
variant (expect_b: fail, e.g. R4-nograph) with A:PASS and B:FAIL; its row still reads FAIL.
INVALID runs never count as failures. Without --tsv the output ends with the degradation checks
(R4-nograph's B FAIL read against R4's B PASS, same model and plugin); --tsv prints only the rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.app import new_app, run_app
from evalb import paths
from evalb.errors import ArchiveError, UsageError

if TYPE_CHECKING:  # the libraries are imported where used: --help and refusals start fast
    import polars as pl

    from analysis.checker import ScorePass

app = new_app(__doc__ or "", no_args_is_help=False)


def _ab(v: bool | None) -> str:
    return "-" if v is None else ("PASS" if v else "FAIL")


def _clean(s: str) -> str:
    return " ".join(s.split())  # a TSV field holds no tab or newline


def tsv_rows(scores: pl.DataFrame) -> list[str]:
    """The spec's row per run: scenario, model, A:…, B:…, PASS|FAIL|INVALID, reasons."""
    return [
        "\t".join(
            (
                r["variant"],
                r["model_alias"],
                f"A:{_ab(r['axis_a'])}",
                f"B:{_ab(r['axis_b'])}",
                r["verdict"],
                _clean(r["reasons"]),
            )
        )
        for r in scores.iter_rows(named=True)
    ]


def _with_plugin(scores: pl.DataFrame) -> pl.DataFrame:
    """The scores with plugin_hash (for the degradation checks), from the runs if the scores lack it."""
    import polars as pl

    if "plugin_hash" in scores.columns:
        return scores.with_columns(pl.col("plugin_hash").fill_null("(none)"))
    return scores.with_columns(plugin_hash=pl.lit("(none)"))


def _print_flips(sp: ScorePass, stream: object) -> None:
    if not sp.flips.height:
        return
    print(f"{sp.flips.height} verdict(s) flipped since each run's previous score:", file=stream)  # type: ignore[call-overload]
    for r in sp.flips.iter_rows(named=True):
        line = f"  {r['run_id'][:12]}  {r['variant']}  {r['model_alias']}  rep {r['rep']}  {r['axis']}: {r['old']} -> {r['new']}"
        print(line, file=stream)  # type: ignore[call-overload]


def _print_table(checker: str, s: pl.DataFrame, counted: pl.DataFrame) -> None:
    """The runs shown (`s`), then the per-cell counts of the runs that count (one per slot)."""
    print(f"checker {checker}: {s.height} run(s)")
    for r in s.iter_rows(named=True):
        print(
            f"{r['run_id'][:12]}  {r['variant']:<11} {r['model_alias']:<20} rep {r['rep']:<3} "
            f"A:{_ab(r['axis_a']):<4} B:{_ab(r['axis_b']):<4} {r['verdict']:<7}  {_clean(r['reasons'])}"
        )
    from analysis.summary import cell_counts

    print("\nper cell:")  # variant × model × plugin, as in `evalb summary` (frames.CELL_KEYS)
    print(f"{'variant':<11} {'model':<20} {'plugin':<8} {'pass':>9} {'A':>7} {'B':>7} {'invalid':>8}")
    for c in cell_counts(_with_plugin(counted)).iter_rows(named=True):
        v = c["valid"]
        print(
            f"{c['variant']:<11} {c['model_alias']:<20} {c['plugin_hash'][:8]:<8} {c['passed']:>4}/{v:<4} "
            f"{c['a_pass']:>3}/{v:<3} {c['b_pass']:>3}/{v:<3} {c['invalid']:>8}"
        )


@app.command()
def score(
    archive: Annotated[Path, typer.Option(help="The archive directory.")] = paths.DEFAULT_ARCHIVE,
    tsv: Annotated[
        bool, typer.Option("--tsv", help="Print only the TSV rows (one per slot: its last attempt).")
    ] = False,
    all_attempts: Annotated[
        bool,
        typer.Option(
            "--all-attempts",
            help="Print every attempt of a retried rep, not only the last one (which is the one that counts).",
        ),
    ] = False,
    scenario: Annotated[str | None, typer.Option(help="Only this variant, e.g. R2 or R4-nograph.")] = None,
    model: Annotated[str | None, typer.Option(help="Only this model alias, e.g. haiku.")] = None,
    rescore: Annotated[
        bool, typer.Option("--rescore", help="Write a new score row for every run, changed or not.")
    ] = False,
    write: Annotated[
        bool, typer.Option("--write/--no-write", help="Write scores back to the archive.")
    ] = True,
    rules: Annotated[
        Path | None, typer.Option(help="Score with the rules in this directory instead of analysis/rules.")
    ] = None,
) -> None:
    """Score every run (or one variant/model) and print one row per run.

    Exit codes: 0 = every valid run passes, except expected failures.

    1 = some valid run fails unexpectedly. 2 = usage or configuration error.

    Expected failure: a run of a degradation variant (expect_b: fail, e.g. R4-nograph) with A:PASS, B:FAIL.

    Its TSV row still reads FAIL. INVALID runs never count as failures.

    A rep retried at once (client_error or timeout before the model spoke) keeps every attempt in the
    archive; only the last attempt of each slot is printed and counted (--all-attempts prints all).
    """
    from analysis.checker import score_archive
    from analysis.degradation import (
        degradation_lines,
        degradation_table,
        expected_fail_variants,
        unexpected_failures,
    )
    from evalb import objectstore
    from evalb.archive import Archive, last_attempts
    from evalb.scenarios import resolve_variant

    if objectstore.is_s3(archive):  # read through its cache mirror (evalb/objectstore.py), never written
        if write:
            raise UsageError(
                f"cannot write scores to {objectstore.S3Url.parse(archive)}",
                hint="pass --no-write, or score a local copy (evalb archive pull) and push it",
            )
        archive = Archive.open(archive).root
    elif not Archive(archive).exists():
        raise ArchiveError(f"{archive} is not an evalb archive (no archive.json)", hint="pass --archive DIR")
    if rules is not None and not rules.is_dir():
        raise UsageError(f"--rules {rules} is not a directory")
    if scenario:
        scenario = resolve_variant(scenario)[1].id
    sp = score_archive(archive, write=write, rescore=rescore, variant=scenario, model=model, rules_dir=rules)
    if model and sp.scores.is_empty():
        raise UsageError(
            f"no run in {archive} with model {model!r}" + (f" and scenario {scenario}" if scenario else ""),
            hint="give a model alias as recorded, e.g. haiku or scripted:oracle",
        )
    for err in sp.judge_errors:
        print(f"warning: judge failed for run {err}", file=sys.stderr)
    counted = last_attempts(sp.with_attempts()).drop("slot", "attempt")
    shown = sp.scores if all_attempts else counted
    if tsv:
        for row in tsv_rows(shown):
            print(row)
        _print_flips(sp, sys.stderr)
    else:
        _print_table(sp.checker_hash, shown, counted)
        if sp.flips.height:
            print()
        _print_flips(sp, sys.stdout)
    expected = expected_fail_variants()
    if not tsv and not scenario:  # the checks pair two variants; one --scenario has only one of them
        lines = degradation_lines(degradation_table(_with_plugin(counted), expected))
        if lines:
            print("\n" + "\n".join(lines))
    raise typer.Exit(1 if unexpected_failures(counted, expected) else 0)


def main() -> None:
    """Entry point `evalb-score`."""
    run_app(app, "evalb-score")
