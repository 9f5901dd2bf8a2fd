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
from scipy.special import comb
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
    """Two-sided interval for k successes in n trials (NaN where n == 0); 'exact' is Clopper-Pearson.

    'wilson' is Wilson's score interval with Brown, Cai & DasGupta's (2001) modification: 1-2 events
    from a boundary (1-3 above 50 trials), the bound on that side is the one-sided Poisson bound,
    where plain Wilson's is too tight (coverage ~0.90 at p = 0.01 with 10 trials).
    """
    k_arr = np.atleast_1d(np.asarray(k, dtype=float))
    n_arr = np.atleast_1d(np.asarray(n, dtype=float))
    lo = np.full(k_arr.shape, np.nan)
    hi = np.full(k_arr.shape, np.nan)
    ok = n_arr > 0
    if ok.any():
        sm_method = {"wilson": "wilson", "exact": "beta"}[method]
        lo[ok], hi[ok] = proportion_confint(k_arr[ok], n_arr[ok], alpha=1 - conf, method=sm_method)
        if method == "wilson":
            lo[ok], hi[ok] = boundary_correction(lo[ok], hi[ok], k_arr[ok], n_arr[ok], conf)
    return lo, hi


def boundary_correction(
    lo: np.ndarray, hi: np.ndarray, count: np.ndarray, n: np.ndarray, conf: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Brown-Cai-DasGupta: widen a Wilson bound to the Poisson bound 0.5·χ²(2x, α/2)/n when only
    x = 1..x* events (x* = 2 up to 50 trials, else 3) separate the estimate from 0 (or from 1)."""
    alpha = 1 - conf
    x_star = np.where(n <= 50, 2, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        for x, side in ((count, "lo"), (n - count, "hi")):
            near = (x > 1e-9) & (x <= x_star + 1e-9)
            bound = 0.5 * sps.chi2.ppf(alpha / 2, 2 * np.maximum(x, 1e-9)) / n
            if side == "lo":
                lo = np.where(near, np.minimum(lo, bound), lo)
            else:
                hi = np.where(near, np.maximum(hi, 1 - bound), hi)
    return lo, hi


#: Every class `cell_class` gives (docs/statistics.md names each).
CELL_CLASSES = ("always-pass", "always-fail", "flaky", "no-data")


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


#: The k of the pass^k columns in cell tables, the summary and the report.
PASS_K: tuple[int, ...] = (2, 3)


def pass_hat_k(
    c: np.ndarray | Sequence[int] | int, n: np.ndarray | Sequence[int] | int, k: int
) -> np.ndarray:
    """Unbiased pass^k from c passes in n reps: C(c, k) / C(n, k) (NaN where n < k).

    pass^k is the chance that k independent reps of the cell all pass, p^k (Yao et al., tau-bench,
    2024). (c/n)^k is biased upward (E[(c/n)^k] > p^k for 0 < p < 1); the ratio of binomial
    coefficients is the unbiased estimator, as E[C(c,k)] = C(n,k) p^k for c ~ Binomial(n, p).
    """
    c_arr = np.atleast_1d(np.asarray(c, dtype=float))
    n_arr = np.atleast_1d(np.asarray(n, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = comb(c_arr, k) / comb(n_arr, k)
    return np.where(n_arr >= k, out, np.nan)


def cell_table(
    scores: pl.DataFrame, conf: float = 0.95, method: Method = "wilson", pass_k: Sequence[int] = PASS_K
) -> pl.DataFrame:
    """One row per cell: runs, invalid, valid reps, and for the overall verdict and each axis the
    passes, rate and interval; the cell's class, its rep-level variance, and `pass^k` (overall
    verdict) for each k in `pass_k` (null when the cell has fewer than k valid reps)."""
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
    for kk in pass_k:
        cols[f"pass^{kk}"] = pass_hat_k(k, n, kk)
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


def score_interval(
    mean: np.ndarray | float,
    s2: np.ndarray | float,
    n: np.ndarray | int,
    n_srs: np.ndarray | float,
    conf: float = 0.95,
    dist: Literal["t", "normal"] = "t",
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson-type interval for a grid mean (vectorised over grids; NaN below 2 scenarios).

    `mean` is the mean of n scenario means, `s2` their sample variance, `n_srs` the number of
    independent Bernoulli reps that would give the mean's variance if every scenario had one
    common rate (n²/Σ 1/K_i, i.e. n·K with K reps each). The variance of the mean is split into a
    binomial part p(1-p)/n_srs, kept as a function of p as in Wilson's score interval, and a
    between-scenario part W = max(0, s²/n - mean(1-mean)/n_srs); the interval solves
    (mean - p)² <= q² (p(1-p)/n_srs + W). q is Student t with n-1 df when the scenarios spread more
    than binomial noise explains (W > 0), else normal: then the interval is Wilson's on the n_srs
    reps, with Brown-Cai-DasGupta's Poisson bound for 1-3 passes (or fails) from a boundary.
    At 0/N or N/N it never has zero width, where the plain t interval collapses to a point.
    """
    m = np.atleast_1d(np.asarray(mean, dtype=float))
    s2 = np.atleast_1d(np.asarray(s2, dtype=float))
    n_arr = np.asarray(n, dtype=float)
    big_n = np.asarray(n_srs, dtype=float)
    alpha = 1 - conf
    z = float(sps.norm.ppf(1 - alpha / 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        binom = m * (1 - m) / big_n
        w = np.maximum(0.0, s2 / n_arr - binom)
        t = sps.t.ppf(1 - alpha / 2, np.maximum(n_arr - 1, 1))
        q = np.where(w > 0, t, z) if dist == "t" else np.full(m.shape, z)
        q2 = q * q
        a = 1 + q2 / big_n
        b = 2 * m + q2 / big_n
        disc = np.sqrt(b * b - 4 * a * (m * m - q2 * w))
        lo = np.clip((b - disc) / (2 * a), 0.0, 1.0)
        hi = np.clip((b + disc) / (2 * a), 0.0, 1.0)
        # Where W = 0 this is Wilson's interval on n_srs reps; correct it near the boundary likewise.
        c_lo, c_hi = boundary_correction(lo, hi, m * big_n, big_n * np.ones_like(m), conf)
        lo, hi = np.where(w == 0, c_lo, lo), np.where(w == 0, c_hi, hi)
    bad = ~(n_arr >= 2)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def grid_estimate(
    passes: np.ndarray,
    reps: np.ndarray,
    clusters: Sequence[str] | np.ndarray | None = None,
    conf: float = 0.95,
    dist: Literal["t", "normal"] = "t",
) -> GridEstimate:
    """Miller's grid mean from per-scenario pass counts and valid rep counts (scenarios with 0 reps dropped).

    `se` is Miller's CLT SE; the interval is `score_interval`, a Wilson-type interval that equals
    the t interval on that SE when scenarios differ much more than reps vary, and that never
    collapses to a point when every scenario mean happens to be equal (e.g. all 0/K or all K/K).
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
    s2 = float(x.var(ddof=1)) if n > 1 else nan
    se = math.sqrt(s2 / n) if n > 1 else nan
    lo_a, hi_a = score_interval(mean, s2, n, n * n / float((1 / reps).sum()), conf, dist)
    lo, hi = float(lo_a[0]), float(hi_a[0])
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


def needless_table(
    scores: pl.DataFrame, by: Sequence[str] = ("model_alias", "arm", "plugin_hash"), conf: float = 0.95
) -> pl.DataFrame:
    """Over-triggering: one row per `by` group with valid O runs: needless runs / valid O runs
    (pooled over the O scenarios), its Wilson interval, and the O pass rate (task done and not
    needless). Empty when no O run is valid. Reported beside the grid pass rate, never in it.
    Grouping columns the frame lacks (`arm` in a frame built before schema v3) are left out."""
    by = [b for b in by if b in scores.columns]
    o = scores.filter(pl.col("needless").is_not_null() & pl.col("valid").fill_null(False))
    schema: dict[str, pl.DataType | type[pl.DataType]] = {
        **{b: scores.schema[b] for b in by},
        "needless": pl.Int64,
        "n": pl.Int64,
        "rate": pl.Float64,
        "lo": pl.Float64,
        "hi": pl.Float64,
        "passes": pl.Int64,
        "n_scenarios": pl.Int64,
    }
    if o.is_empty():
        return pl.DataFrame(schema=schema)
    agg = (
        o.group_by(list(by))
        .agg(
            needless=pl.col("needless").cast(pl.Int64).sum(),
            n=pl.len().cast(pl.Int64),
            passes=pl.col("passed").fill_null(False).cast(pl.Int64).sum(),
            n_scenarios=pl.col("variant").n_unique().cast(pl.Int64),
        )
        .sort(list(by))
    )
    lo, hi = proportion_interval(agg["needless"].to_numpy(), agg["n"].to_numpy(), conf)
    return agg.with_columns(rate=pl.col("needless") / pl.col("n"), lo=pl.Series(lo), hi=pl.Series(hi)).select(
        list(schema)
    )
