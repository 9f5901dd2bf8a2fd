"""Pass rates with error bars: per cell (Wilson or exact intervals) and per grid (Miller 2024 CLT SEs).

A *cell* is one variant × model × plugin hash; its valid reps are Bernoulli trials. INVALID runs
never enter a rate; they are counted in their own column. The *grid* rate of a model is the mean
over scenarios of the per-scenario mean over reps (Miller, "Adding Error Bars to Evals", 2024:
average reps within a question first, then take the CLT standard error across questions), with
clustered SEs by scenario family (W vs R) and the rep-level and scenario-level variance reported
separately. The numeric cores take numpy arrays so simulations can call them thousands of times;
the frame-level functions wrap them. docs/statistics.md explains how to read every column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import polars as pl
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from analysis.frames import CELL_KEYS

Method = Literal["wilson", "exact"]
Axis = Literal["passed", "axis_a", "axis_b"]
AXES: tuple[str, ...] = ("passed", "axis_a", "axis_b")
_PREFIX = {"passed": "", "axis_a": "a_", "axis_b": "b_"}


# --- per cell ------------------------------------------------------------------------------------
def proportion_interval(
    k: np.ndarray | Sequence[int] | int,
    n: np.ndarray | Sequence[int] | int,
    conf: float = 0.95,
    method: Method = "wilson",
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided interval for k successes in n trials (NaN where n == 0); 'exact' is Clopper-Pearson."""
    k_arr = np.atleast_1d(np.asarray(k, dtype=float))
    n_arr = np.atleast_1d(np.asarray(n, dtype=float))
    lo = np.full(k_arr.shape, np.nan)
    hi = np.full(k_arr.shape, np.nan)
    ok = n_arr > 0
    if ok.any():
        sm_method = {"wilson": "wilson", "exact": "beta"}[method]
        lo[ok], hi[ok] = proportion_confint(k_arr[ok], n_arr[ok], alpha=1 - conf, method=sm_method)
    return lo, hi


def cell_class(k: int, n: int) -> str:
    """'always-pass', 'always-fail', 'flaky', or 'no-data' (no valid reps) for k passes in n reps."""
    if n == 0:
        return "no-data"
    if k == n:
        return "always-pass"
    if k == 0:
        return "always-fail"
    return "flaky"


def rep_variance(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Unbiased per-rep Bernoulli variance p̂(1-p̂)·n/(n-1) of each cell (NaN below 2 reps)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        return np.where(n >= 2, p * (1 - p) * n / (n - 1), np.nan)


def cell_table(scores: pl.DataFrame, conf: float = 0.95, method: Method = "wilson") -> pl.DataFrame:
    """One row per cell: runs, invalid, valid reps, and for the overall verdict and each axis the
    passes, rate and interval; plus the cell's class and its rep-level variance."""
    valid = pl.col("valid").fill_null(False)
    aggs = [
        pl.len().alias("n_runs"),
        (~valid).sum().alias("n_invalid"),
        valid.sum().alias("n_valid"),
    ]
    for axis in AXES:
        aggs.append((pl.col(axis).fill_null(False) & valid).sum().alias(f"{_PREFIX[axis]}passes"))
    cells = (
        scores.group_by([*CELL_KEYS, "scenario", "family", "primary"])
        .agg(aggs)
        .sort(["model_alias", "plugin_hash", "variant"])
    )
    n = cells["n_valid"].to_numpy()
    cols: dict[str, Any] = {}
    for axis in AXES:
        p = _PREFIX[axis]
        k = cells[f"{p}passes"].to_numpy()
        lo, hi = proportion_interval(k, n, conf, method)
        with np.errstate(divide="ignore", invalid="ignore"):
            cols[f"{p}rate"] = np.where(n > 0, k / n, np.nan)
        cols[f"{p}lo"] = lo
        cols[f"{p}hi"] = hi
    k = cells["passes"].to_numpy()
    cols["klass"] = [cell_class(int(a), int(b)) for a, b in zip(k, n, strict=True)]
    cols["rep_var"] = rep_variance(k, n)
    out = cells.with_columns(**{name: pl.Series(name, v) for name, v in cols.items()})
    return out.with_columns(pl.col(pl.Float64).fill_nan(None))


# --- per grid ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GridEstimate:
    """A grid-level pass rate with Miller's standard errors and its variance split."""

    mean: float  # mean over scenarios of the per-scenario mean over reps
    se: float  # CLT SE across scenarios: sd(scenario means) / sqrt(n)
    lo: float
    hi: float
    n_scenarios: int
    reps_mean: float  # average valid reps per scenario (K)
    se_clustered: float  # Miller's clustered SE (clusters = families)
    n_clusters: int
    se_reps_only: float  # SE if these scenarios were the whole population: rep noise only
    var_within: float  # mean rep-level variance inside a cell (σ² in Miller)
    var_between: float  # variance of true scenario rates across scenarios (ω²-like), floored at 0


def _quantile(conf: float, df: float | None) -> float:
    """Two-sided critical value: Student t with `df` (small n of scenarios), or normal if df is None."""
    if df is None:
        return float(sps.norm.ppf(0.5 + conf / 2))
    return float(sps.t.ppf(0.5 + conf / 2, df))


def clustered_se(x: np.ndarray, clusters: Sequence[str] | np.ndarray) -> float:
    """Miller (2024) eq. for clustered SE: sqrt(Σ_c (Σ_{i∈c} (x_i - x̄))²) / n; no finite-cluster factor."""
    x = np.asarray(x, dtype=float)
    labels = np.asarray(clusters)
    resid = x - x.mean()
    total = sum(float(resid[labels == c].sum()) ** 2 for c in np.unique(labels))
    return math.sqrt(total) / len(x)


def grid_estimate(
    passes: np.ndarray,
    reps: np.ndarray,
    clusters: Sequence[str] | np.ndarray | None = None,
    conf: float = 0.95,
    dist: Literal["t", "normal"] = "t",
) -> GridEstimate:
    """Miller's grid mean from per-scenario pass counts and valid rep counts (scenarios with 0 reps dropped).

    The interval uses Student t with n-1 degrees of freedom by default: with 7 scenarios the normal
    quantile Miller uses for large n would under-cover.
    """
    passes = np.asarray(passes, dtype=float)
    reps = np.asarray(reps, dtype=float)
    keep = reps > 0
    passes, reps = passes[keep], reps[keep]
    labels = None if clusters is None else np.asarray(clusters)[keep]
    n = len(reps)
    nan = float("nan")
    if n == 0:
        return GridEstimate(nan, nan, nan, nan, 0, nan, nan, 0, nan, nan, nan)
    x = passes / reps
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else nan
    q = _quantile(conf, n - 1 if dist == "t" else None) if n > 1 else nan
    lo, hi = max(0.0, mean - q * se), min(1.0, mean + q * se)
    sig2 = rep_variance(passes, reps)
    has = ~np.isnan(sig2)
    var_within = float(sig2[has].mean()) if has.any() else nan
    # Observed spread of scenario means = true spread + rep noise σ²/K; subtract the noise.
    noise = float((sig2[has] / reps[has]).mean()) if has.any() else nan
    var_between = max(0.0, float(x.var(ddof=1)) - noise) if n > 1 and has.any() else nan
    se_reps = float(math.sqrt((sig2[has] / reps[has]).sum()) / n) if has.all() else nan
    if labels is not None:
        n_clusters = len(np.unique(labels))
        se_cl = clustered_se(x, labels)
    else:
        n_clusters, se_cl = 0, nan
    return GridEstimate(
        mean=mean,
        se=se,
        lo=lo,
        hi=hi,
        n_scenarios=n,
        reps_mean=float(reps.mean()),
        se_clustered=se_cl,
        n_clusters=n_clusters,
        se_reps_only=se_reps,
        var_within=var_within,
        var_between=var_between,
    )


def grid_table(
    scores: pl.DataFrame,
    axis: Axis = "passed",
    by: Sequence[str] = ("model_alias", "plugin_hash"),
    conf: float = 0.95,
    include_extra_variants: bool = False,
    dist: Literal["t", "normal"] = "t",
) -> pl.DataFrame:
    """One row per `by` group (default: model × plugin): Miller's grid mean, SEs and variance split.

    Scenarios here are variants; degradation variants (variant != scenario, e.g. R4-nograph) are
    left out unless `include_extra_variants`, because their expected outcome is FAIL.
    """
    df = scores if include_extra_variants else scores.filter(pl.col("primary"))
    valid = pl.col("valid").fill_null(False)
    per_scenario = (
        df.group_by([*by, "variant", "family"])
        .agg(
            (pl.col(axis).fill_null(False) & valid).sum().alias("k"),
            valid.sum().alias("K"),
        )
        .sort([*by, "variant"])
    )
    rows = []
    for key, part in per_scenario.group_by(list(by), maintain_order=True):
        est = grid_estimate(
            part["k"].to_numpy(), part["K"].to_numpy(), part["family"].to_numpy(), conf=conf, dist=dist
        )
        rows.append({**dict(zip(by, key, strict=True)), "axis": axis, **asdict(est)})
    if not rows:
        ints = {"n_scenarios", "n_clusters"}
        fields = {f: pl.Int64 if f in ints else pl.Float64 for f in GridEstimate.__dataclass_fields__}
        return pl.DataFrame(schema={**{b: scores.schema[b] for b in by}, "axis": pl.String, **fields})
    return pl.DataFrame(rows).with_columns(pl.col(pl.Float64).fill_nan(None))
