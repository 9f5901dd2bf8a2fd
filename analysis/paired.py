"""Paired comparisons: model A vs B, or plugin variant A vs B, paired by scenario (Miller 2024, §4).

Both arms ran the same scenarios, so the difference is taken scenario by scenario and its SE is
sd(differences)/sqrt(n). When the two arms' per-scenario rates are correlated (hard scenarios are
hard for both), this SE is smaller than the unpaired one; both are reported, with the correlation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import polars as pl
from scipy import stats as sps

from analysis.frames import CELL_KEYS
from analysis.stats import Axis, _quantile, rep_variance


@dataclass(frozen=True)
class PairedResult:
    """B minus A over the scenarios both arms ran."""

    by: str
    a: str
    b: str
    n_pairs: int
    mean_a: float
    mean_b: float
    diff: float  # mean over scenarios of (rate_b - rate_a)
    se: float  # paired CLT SE: sd(diff_i) / sqrt(n)
    lo: float
    hi: float
    p_value: float  # paired t-test of diff = 0
    corr: float  # Pearson correlation of the two arms' per-scenario rates
    se_unpaired: float  # what the SE would be ignoring the pairing
    se_reps_only: float  # SE from rep noise alone (these scenarios as the whole population)
    omega2: float  # between-scenario variance of the true differences (Miller's ω²), floored at 0
    sigma2_a: float  # mean rep-level variance in arm A (Miller's σ²_A)
    sigma2_b: float
    reps_a: float  # mean valid reps per scenario in arm A
    reps_b: float
    per_pair: pl.DataFrame = field(repr=False)


def pair_table(
    scores: pl.DataFrame,
    a: str,
    b: str,
    by: str = "model_alias",
    axis: Axis = "passed",
    include_extra_variants: bool = False,
) -> pl.DataFrame:
    """One row per scenario (× the other cell keys) that both arms ran with valid reps: counts and rates."""
    keys = [k for k in CELL_KEYS if k != by]
    df = scores if include_extra_variants else scores.filter(pl.col("primary"))
    valid = pl.col("valid").fill_null(False)
    counts = (
        df.filter(pl.col(by).is_in([a, b]))
        .group_by([*keys, by])
        .agg(
            (pl.col(axis).fill_null(False) & valid).sum().cast(pl.Int64).alias("k"),
            valid.sum().cast(pl.Int64).alias("K"),
        )
    )
    arm_a = counts.filter(pl.col(by) == a).drop(by).rename({"k": "k_a", "K": "K_a"})
    arm_b = counts.filter(pl.col(by) == b).drop(by).rename({"k": "k_b", "K": "K_b"})
    pairs = arm_a.join(arm_b, on=keys, how="inner").filter((pl.col("K_a") > 0) & (pl.col("K_b") > 0))
    return (
        pairs.with_columns(
            rate_a=pl.col("k_a") / pl.col("K_a"),
            rate_b=pl.col("k_b") / pl.col("K_b"),
        )
        .with_columns(diff=pl.col("rate_b") - pl.col("rate_a"))
        .sort(keys)
    )


def paired_estimate(
    k_a: np.ndarray,
    reps_a: np.ndarray,
    k_b: np.ndarray,
    reps_b: np.ndarray,
    conf: float = 0.95,
    dist: Literal["t", "normal"] = "t",
) -> dict[str, float]:
    """The numeric core of `compare`: per-scenario counts of both arms in, Miller's paired statistics out."""
    k_a, reps_a, k_b, reps_b = (np.asarray(v, dtype=float) for v in (k_a, reps_a, k_b, reps_b))
    x_a, x_b = k_a / reps_a, k_b / reps_b
    d = x_b - x_a
    n = len(d)
    nan = float("nan")
    out = {"n_pairs": n, "mean_a": nan, "mean_b": nan, "diff": nan, "se": nan, "lo": nan, "hi": nan}
    out |= {"p_value": nan, "corr": nan, "se_unpaired": nan, "se_reps_only": nan}
    out |= {"omega2": nan, "sigma2_a": nan, "sigma2_b": nan, "reps_a": nan, "reps_b": nan}
    if n == 0:
        return out
    out |= {"mean_a": x_a.mean(), "mean_b": x_b.mean(), "diff": d.mean()}
    out |= {"reps_a": reps_a.mean(), "reps_b": reps_b.mean()}
    s2a, s2b = rep_variance(k_a, reps_a), rep_variance(k_b, reps_b)
    noise = s2a / reps_a + s2b / reps_b
    has = ~np.isnan(noise)
    if has.any():
        # Cells with <2 valid reps say nothing about rep variance; average over the others.
        out |= {"sigma2_a": s2a[has].mean(), "sigma2_b": s2b[has].mean()}
    if has.all():
        out["se_reps_only"] = math.sqrt(noise.sum()) / n
    if n < 2:
        return out
    se = float(d.std(ddof=1) / math.sqrt(n))
    q = _quantile(conf, n - 1 if dist == "t" else None)
    half = q * se
    if se == 0:
        # Every scenario gave the same difference (e.g. both arms always pass): the t interval would be
        # the point [d, d]. Use rep noise alone, from add-one rates (Agresti-Caffo), normal quantile.
        pa, pb = (k_a + 1) / (reps_a + 2), (k_b + 1) / (reps_b + 2)
        floor = math.sqrt(float((pa * (1 - pa) / reps_a + pb * (1 - pb) / reps_b).sum())) / n
        half = _quantile(conf, None) * floor
        out["p_value"] = float(2 * sps.norm.sf(abs(d.mean()) / floor))
    out |= {"se": se, "lo": max(-1.0, d.mean() - half), "hi": min(1.0, d.mean() + half)}
    out["se_unpaired"] = math.sqrt((x_a.var(ddof=1) + x_b.var(ddof=1)) / n)
    if se > 0:
        t = d.mean() / se
        out["p_value"] = float(2 * (sps.t.sf(abs(t), n - 1) if dist == "t" else sps.norm.sf(abs(t))))
    if x_a.std() > 0 and x_b.std() > 0:
        out["corr"] = float(np.corrcoef(x_a, x_b)[0, 1])
    if has.any():
        # Observed spread of the differences = true spread ω² + rep noise; subtract the noise.
        out["omega2"] = max(0.0, float(d.var(ddof=1)) - float(noise[has].mean()))
    return {k: float(v) if k != "n_pairs" else int(v) for k, v in out.items()}


def compare(
    scores: pl.DataFrame,
    a: str,
    b: str,
    by: str = "model_alias",
    axis: Axis = "passed",
    conf: float = 0.95,
    include_extra_variants: bool = False,
    dist: Literal["t", "normal"] = "t",
) -> PairedResult:
    """Arm `b` minus arm `a`, where arms are values of `by` ('model_alias' or 'plugin_hash'), paired by scenario."""
    pairs = pair_table(scores, a, b, by=by, axis=axis, include_extra_variants=include_extra_variants)
    est = paired_estimate(
        pairs["k_a"].to_numpy(), pairs["K_a"].to_numpy(), pairs["k_b"].to_numpy(), pairs["K_b"].to_numpy(),
        conf=conf, dist=dist,
    )  # fmt: skip
    return PairedResult(by=by, a=a, b=b, per_pair=pairs, **est)  # type: ignore[arg-type]


def compare_table(results: Sequence[PairedResult]) -> pl.DataFrame:
    """Several comparisons as one table (per_pair left out)."""
    rows = [{k: v for k, v in r.__dict__.items() if k != "per_pair"} for r in results]
    return pl.DataFrame(rows).with_columns(pl.col(pl.Float64).fill_nan(None))
