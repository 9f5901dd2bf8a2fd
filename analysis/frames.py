"""The one frame the statistics read: one row per run, its latest score joined with its runs columns.

Every module in the variance library (stats, paired, power, costs, plots, report) takes this
frame, so its columns are declared here once. `load_scores` prefers the checker's
`latest_scores(root)`; until that exists it does the same join itself.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalb.archive import read_table
from evalb.errors import ArchiveError

#: Columns copied from the scores table (ScoreRecord).
SCORE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "scenario",
    "variant",
    "model_alias",
    "plugin_hash",
    "rep",
    "valid",
    "invalid_reason",
    "axis_a",
    "axis_b",
    "passed",
    "verdict",
    "reasons",
    "evidence_a",
    "evidence_b",
    "checker_hash",
)
#: Columns joined in from the runs table (RunRecord).
RUN_COLUMNS: tuple[str, ...] = (
    "arm",
    "cost_usd",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "started_at",
    "outcome",
    "plugin_name",
    "plugin_version",
)
COLUMNS: tuple[str, ...] = SCORE_COLUMNS + RUN_COLUMNS

#: What identifies a cell: one variant, one model, one plugin content.
CELL_KEYS: tuple[str, ...] = ("variant", "model_alias", "plugin_hash")


#: Scenario family (first letter of the id) of the over-triggering scenarios (kind overtrigger).
OVERTRIGGER_FAMILY = "O"


def check_columns(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with the derived columns the library uses; error naming any missing input column.
    `needless` (scores of an older checker, simulated frames) is added as null when absent."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ArchiveError(f"score frame lacks columns: {', '.join(missing)}")
    if "needless" not in df.columns:
        df = df.with_columns(needless=pl.lit(None, dtype=pl.Boolean))
    family = pl.col("scenario").str.slice(0, 1)
    return df.with_columns(
        # W vs R (vs O): the clustering unit for clustered SEs.
        family=family,
        # Extra variants (R4-nograph) are degradation checks where FAIL is expected; grid means
        # leave them out unless asked, as the README's grid metric does. Over-triggering scenarios
        # (O) are left out too: their metric is the needless rate, reported beside the grid mean.
        primary=(pl.col("variant") == pl.col("scenario")) & (family != OVERTRIGGER_FAMILY),
        plugin_hash=pl.col("plugin_hash").fill_null("(none)"),
    )


def _join_latest(root: Path | str) -> pl.DataFrame:
    scores = read_table(root, "scores")
    runs = read_table(root, "runs", columns=["run_id", *RUN_COLUMNS])
    latest = scores.sort("scored_at").group_by("run_id", maintain_order=True).last()
    return latest.join(runs, on="run_id", how="left").select(COLUMNS)


def load_scores(root: Path | str) -> pl.DataFrame:
    """The latest score of every scored run in the archive at `root`, with runs columns and derived ones."""
    from evalb.archive import Archive

    Archive(root).check_readable()
    try:
        from analysis.checker import latest_scores
    except ImportError:
        df = _join_latest(root)
    else:
        df = latest_scores(root)
    return check_columns(df)
