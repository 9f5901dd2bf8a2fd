"""The `evalb compare` command: each candidate arm against a baseline arm, from an archive's latest scores."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalb.paths import DEFAULT_ARCHIVE


def compare(
    archive: Annotated[Path, typer.Option("--archive", help="The archive directory.")] = DEFAULT_ARCHIVE,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", help="Baseline arm (default: current, else none, else the first of --arms)."
        ),
    ] = None,
    arms: Annotated[
        str | None, typer.Option("--arms", help="Comma-separated arms to compare (default: all).")
    ] = None,
    correction: Annotated[
        str, typer.Option("--correction", help="holm (familywise error) or bh (false discovery rate).")
    ] = "holm",
    conf: Annotated[
        float, typer.Option("--conf", help="Confidence level of intervals and decisions.")
    ] = 0.95,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the full result here.")] = None,
) -> None:
    """Paired difference of each candidate arm against the baseline, by scenario: better / worse / not shown."""
    from analysis.compare import compare_arms, write_json
    from analysis.frames import load_scores
    from evalb.errors import UsageError

    if correction not in ("holm", "bh"):
        raise UsageError(f"--correction {correction!r} is unknown", hint="use holm or bh")
    if not 0 < conf < 1:
        raise UsageError(f"--conf {conf} is not between 0 and 1", hint="e.g. --conf 0.95")
    if json_out is not None and not json_out.parent.is_dir():
        raise UsageError(f"--json {json_out}: the directory {json_out.parent} does not exist")
    wanted = [a.strip() for a in arms.split(",") if a.strip()] if arms is not None else None
    scores = load_scores(archive)
    if scores.is_empty():
        raise UsageError(f"{archive} has no scored runs", hint="score them first with evalb-score")
    result = compare_arms(scores, baseline=baseline, arms=wanted, correction=correction, conf=conf)  # type: ignore[arg-type]
    typer.echo(result.text(), nl=False)
    if json_out is not None:
        write_json(result, json_out)
