"""Cost, time and tokens per cell from the runs' result events, and what a rep plan will cost.

Every run costs money, INVALID ones included, so costs count all runs while a plan's valid reps
are scaled up by the cell's observed invalid share to say how many runs must be bought.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from analysis.frames import CELL_KEYS


def unpaid(scores: pl.DataFrame) -> pl.DataFrame:
    """`scores` with scripted models priced at $0: the bundled loopback model is never paid for,
    whatever price the client reports for it."""
    return scores.with_columns(
        cost_usd=pl.when(pl.col("model_alias").str.starts_with("scripted:"))
        .then(pl.lit(0.0))
        .otherwise(pl.col("cost_usd"))
    )


def cell_costs(scores: pl.DataFrame) -> pl.DataFrame:
    """Per cell: runs, invalid share, USD (total, mean per run; scripted models $0), duration (mean,
    p90, s) and mean tokens."""
    return (
        unpaid(scores)
        .group_by(list(CELL_KEYS))
        .agg(
            pl.len().alias("n_runs"),
            (~pl.col("valid").fill_null(False)).mean().alias("invalid_share"),
            pl.col("cost_usd").sum().alias("usd_total"),
            pl.col("cost_usd").mean().alias("usd_per_run"),
            (pl.col("duration_ms").mean() / 1000).alias("seconds_mean"),
            (pl.col("duration_ms").quantile(0.9) / 1000).alias("seconds_p90"),
            pl.col("input_tokens").mean().alias("input_tokens_mean"),
            pl.col("output_tokens").mean().alias("output_tokens_mean"),
        )
        .sort(["model_alias", "plugin_hash", "variant"])
    )


def model_costs(scores: pl.DataFrame) -> pl.DataFrame:
    """Per model: mean USD and seconds per run over all its runs (used where a cell has no runs yet)."""
    return (
        unpaid(scores)
        .group_by("model_alias")
        .agg(
            pl.col("cost_usd").mean().alias("usd_per_run"),
            (pl.col("duration_ms").mean() / 1000).alias("seconds_mean"),
            (~pl.col("valid").fill_null(False)).mean().alias("invalid_share"),
        )
        .sort("model_alias")
    )


def plan_cost(
    scores: pl.DataFrame,
    reps: int,
    variants: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    parallel: int = 1,
) -> pl.DataFrame:
    """What `reps` valid reps per (variant, model) cell will cost, priced from the pilot `scores`.

    Per cell: runs to buy (reps / (1 - invalid share), rounded up), USD and wall hours (serial
    time divided by `parallel` recorders). A cell the pilot lacks is priced at its model's mean.
    The last row, variant 'TOTAL', sums the plan.
    """
    by_cell = (
        cell_costs(scores)
        .group_by(["variant", "model_alias"])
        .agg(pl.col("usd_per_run").mean(), pl.col("seconds_mean").mean(), pl.col("invalid_share").mean())
    )
    variants = list(variants) if variants is not None else sorted(scores["variant"].unique().to_list())
    models = list(models) if models is not None else sorted(scores["model_alias"].unique().to_list())
    grid = pl.DataFrame({"variant": variants}).join(pl.DataFrame({"model_alias": models}), how="cross")
    priced = (
        grid.join(by_cell, on=["variant", "model_alias"], how="left")
        .join(model_costs(scores), on="model_alias", how="left", suffix="_model")
        .with_columns(
            usd_per_run=pl.coalesce("usd_per_run", "usd_per_run_model"),
            seconds_mean=pl.coalesce("seconds_mean", "seconds_mean_model"),
            invalid_share=pl.coalesce("invalid_share", "invalid_share_model").fill_null(0.0).clip(0.0, 0.9),
        )
        .with_columns(runs=(reps / (1 - pl.col("invalid_share"))).ceil().cast(pl.Int64))
        .with_columns(
            usd=pl.col("runs") * pl.col("usd_per_run"),
            hours=pl.col("runs") * pl.col("seconds_mean") / 3600 / parallel,
            reps=pl.lit(reps, pl.Int64),
        )
        .select("variant", "model_alias", "reps", "invalid_share", "runs", "usd_per_run", "usd", "hours")
    )
    total = priced.select(
        pl.lit("TOTAL").alias("variant"),
        pl.lit("").alias("model_alias"),
        pl.lit(reps, pl.Int64).alias("reps"),
        pl.lit(None, pl.Float64).alias("invalid_share"),
        pl.col("runs").sum(),
        pl.lit(None, pl.Float64).alias("usd_per_run"),
        pl.col("usd").sum(),
        pl.col("hours").sum(),
    )
    return pl.concat([priced, total])
