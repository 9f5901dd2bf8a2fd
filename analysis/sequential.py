"""Sequential comparison of two arms: an anytime-valid confidence sequence, a stopping rule, a round planner.

The observations are paired reps: in each cell (variant × model) the j-th valid rep of arm A is
paired with the j-th valid rep of arm B (recording order), and x = passed_B − passed_A ∈ {−1, 0, 1}.
Pairs are taken in the order they completed. The confidence sequence (CS) is Waudby-Smith &
Ramdas' (2023, JRSS-B) hedged-capital betting CS for the mean of bounded observations, on
y = (x+1)/2 ∈ [0, 1]: for each candidate mean m two bettors stake λ_t(y_t − m) and −λ_t(y_t − m),
and m leaves the CS for good once half of either bettor's wealth reaches 1/α (half the sum of the
two wealths is a nonnegative martingale under the truth starting at 1; by Ville's inequality it
ever reaches 1/α with probability ≤ α, however often one looks). The stake is
their predictable plug-in λ_t = sqrt(2 log(2/α) / (σ̂²_{t−1} n*)), truncated at c/m (c/(1−m)):
with n* = t log(1+t) (the default) the CS is tight at every t; given the number of pairs a
fixed-size plan would use (`plan_reps` × cells), n* is that number, which makes the CS tightest
near the planned size (docs/statistics.md, *Sequential stopping*). All functions are pure
functions of a score frame (with an `arm` column); the numeric cores take numpy arrays and are
vectorised over leading axes for simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

#: Truncation c of the stake (Waudby-Smith & Ramdas recommend 1/2 or 3/4; 1/2 measured better here).
CAP = 0.5
#: Grid of candidate means (in x = B − A units) the CS is computed on: steps of 0.005.
X_GRID = np.round(np.linspace(-1.0, 1.0, 401), 6)


# --- numeric core -------------------------------------------------------------------------------
def _prev(a: np.ndarray, first: float) -> np.ndarray:
    """`a` shifted one step to the right along the last axis (the value known before step t)."""
    return np.concatenate([np.full((*a.shape[:-1], 1), first), a[..., :-1]], axis=-1)


def stakes(x: np.ndarray, alpha: float = 0.05, n_star: float | None = None) -> np.ndarray:
    """The predictable plug-in stakes λ_t (before truncation) for paired differences `x` in [−1, 1].

    σ̂²_{t−1} is the regularised running variance of y = (x+1)/2 (prior 1/4 with weight 1, as in
    Waudby-Smith & Ramdas 2023, eq. 26); λ_t uses only pairs before t."""
    y = (np.asarray(x, dtype=float) + 1) / 2
    t = np.arange(1, y.shape[-1] + 1)
    mu_hat = (0.5 + np.cumsum(y, axis=-1)) / (t + 1)
    s2 = _prev((0.25 + np.cumsum((y - mu_hat) ** 2, axis=-1)) / (t + 1), 0.25)
    horizon = t * np.log1p(t) if n_star is None else np.full(t.shape, float(max(n_star, 1.0)))
    return np.sqrt(2 * math.log(2 / alpha) / (s2 * horizon))


def log_wealth(
    x: np.ndarray, m: float | np.ndarray, alpha: float = 0.05, n_star: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log wealth of the two bettors against mean `m` (in y units, 0 < m < 1) after each pair.

    `x` has shape (..., T); `m` a scalar or shape (M,), giving (M, ..., T). The first bettor wins
    when the mean exceeds m (B better), the second when it is below."""
    y = (np.asarray(x, dtype=float) + 1) / 2
    lam = stakes(x, alpha, n_star)
    m_arr = np.asarray(m, dtype=float)
    mm = m_arr.reshape(m_arr.shape + (1,) * y.ndim)
    up = np.minimum(lam, CAP / mm)
    down = np.minimum(lam, CAP / (1 - mm))
    return (
        np.cumsum(np.log1p(up * (y - mm)), axis=-1),
        np.cumsum(np.log1p(-down * (y - mm)), axis=-1),
    )


def crossings(
    x: np.ndarray, alpha: float = 0.05, n_star: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each pair index: has the CS excluded 0 from above (B better) / from below (B worse) yet?

    Hedged with θ = 1/2: 0 is out once half a bettor's wealth reaches 1/α, i.e. log wealth ≥ log(2/α).
    Vectorised over leading axes (many simulated sequences at once)."""
    up, down = log_wealth(x, 0.5, alpha, n_star)
    thr = math.log(2 / alpha)
    return np.maximum.accumulate(up >= thr, axis=-1), np.maximum.accumulate(down >= thr, axis=-1)


def confidence_sequence(
    x: np.ndarray, alpha: float = 0.05, n_star: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The running-intersection CS (lo_t, hi_t) for the mean of `x` (1-D, in [−1, 1]) after each pair.

    Computed on `X_GRID` (0.005 apart); a grid point leaves for good once excluded. NaN where
    every grid point is out (the data contradict a constant mean)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return np.array([]), np.array([])
    m = (X_GRID[1:-1] + 1) / 2  # interior points: the bettors' stakes need 0 < m < 1
    up, down = log_wealth(x, m, alpha, n_star)
    out = np.maximum.accumulate(np.maximum(up, down) >= math.log(2 / alpha), axis=-1)  # (M, T)
    inside = ~out
    grid = X_GRID[1:-1][:, None]
    lo = np.where(inside, grid, np.inf).min(axis=0)
    hi = np.where(inside, grid, -np.inf).max(axis=0)
    empty = ~inside.any(axis=0)
    # The endpoints ±1 are never excluded by a grid that stops 0.005 short of them: widen to them.
    lo = np.where(lo <= X_GRID[1], -1.0, lo - 0.005)
    hi = np.where(hi >= X_GRID[-2], 1.0, hi + 0.005)
    return np.where(empty, np.nan, np.maximum(lo, -1.0)), np.where(empty, np.nan, np.minimum(hi, 1.0))


# --- from a score frame -------------------------------------------------------------------------
def _ordinary(scores: pl.DataFrame, arms: Sequence[str]) -> pl.DataFrame:
    """Valid runs of the two arms on ordinary (not over-triggering) primary variants."""
    from analysis.compare import with_arm

    df = with_arm(scores).filter(pl.col("arm").is_in(list(arms)))
    # Degradation variants (R4-nograph: FAIL expected) are not part of the comparison.
    df = df.filter(pl.col("primary") if "primary" in df.columns else pl.col("variant") == pl.col("scenario"))
    if "needless" in df.columns:
        df = df.filter(pl.col("needless").is_null())
    return df


def pair_sequence(scores: pl.DataFrame, arms: Sequence[str]) -> pl.DataFrame:
    """The paired reps of arms (A, B) in the order they completed: variant, model_alias, x = B − A.

    In each cell the j-th valid rep of A (by start time) pairs with the j-th valid rep of B; a
    pair completes when its later run started. INVALID runs are left out (they say nothing about
    passing); an unpaired rep waits for its partner."""
    a, b = arms
    keys = ["variant", "model_alias"]
    df = (
        _ordinary(scores, arms)
        .filter(pl.col("valid").fill_null(False))
        .sort(["started_at", "run_id"])
        .with_columns(j=pl.int_range(pl.len()).over([*keys, "arm"]), ok=pl.col("passed").fill_null(False))
    )
    side_a = df.filter(pl.col("arm") == a).select(*keys, "j", ok_a="ok", at_a="started_at")
    side_b = df.filter(pl.col("arm") == b).select(*keys, "j", ok_b="ok", at_b="started_at")
    pairs = side_a.join(side_b, on=[*keys, "j"], how="inner")
    return (
        pairs.with_columns(
            at=pl.max_horizontal("at_a", "at_b"),
            x=pl.col("ok_b").cast(pl.Int8) - pl.col("ok_a").cast(pl.Int8),
        )
        .sort(["at", *keys, "j"])
        .select(*keys, "j", "at", "x")
    )


@dataclass(frozen=True)
class SequentialDecision:
    """Where the sequential comparison of B against A stands (B − A)."""

    decided: bool  # the CS excludes 0
    direction: str  # 'better' (B > A), 'worse', or 'not shown'
    lo: float  # the CS now (running intersection), in pass-rate difference units
    hi: float
    estimate: float  # mean of the paired differences
    n_pairs: int
    n_cells: int
    reps_used: float  # pairs per cell (mean): the valid reps each arm spent per cell
    at_max: bool  # every cell has reached max_reps: stop without a decision
    alpha: float
    path: pl.DataFrame = field(repr=False)  # per pair: t, reps (t / cells), lo, hi, width, estimate

    @property
    def stop(self) -> bool:
        """Stop adding reps: decided, or nothing more may be added."""
        return self.decided or self.at_max


def _n_star(plan_reps: float | None, n_cells: int) -> float | None:
    return None if plan_reps is None else float(plan_reps) * max(n_cells, 1)


def decide(
    scores: pl.DataFrame,
    arms: Sequence[str],
    alpha: float = 0.05,
    max_reps: int | None = None,
    plan_reps: float | None = None,
) -> SequentialDecision:
    """Has B (arms[1]) been shown better or worse than A (arms[0])? Pure function of the score frame.

    Decided when the level-(1−alpha) CS excludes 0 at any pair so far (a crossing stays). `plan_reps`
    (reps per cell of the fixed-size plan, e.g. `power.reps_needed`) tunes the stakes to that size;
    `max_reps` marks `at_max` when every cell has that many pairs."""
    seq = pair_sequence(scores, arms)
    cells = _cells(scores, arms)
    n_cells = max(cells.height, 1)
    x = seq["x"].to_numpy().astype(float)
    n_star = _n_star(plan_reps, n_cells)
    t = np.arange(1, len(x) + 1)
    if len(x):
        up, down = crossings(x, alpha, n_star)
        lo, hi = confidence_sequence(x, alpha, n_star)
        est = np.cumsum(x) / t
        first_up = int(np.argmax(up)) if up.any() else len(x)
        first_down = int(np.argmax(down)) if down.any() else len(x)
        direction = "not shown"
        if first_up < len(x) or first_down < len(x):
            direction = "better" if first_up <= first_down else "worse"
    else:
        lo = hi = est = np.array([])
        direction = "not shown"
    path = pl.DataFrame(
        {"t": t, "reps": t / n_cells, "lo": lo, "hi": hi, "width": hi - lo, "estimate": est},
        schema={
            c: pl.Int64 if c == "t" else pl.Float64 for c in ("t", "reps", "lo", "hi", "width", "estimate")
        },
    )
    counts = cells["pairs"].to_numpy() if cells.height else np.array([0])
    at_max = max_reps is not None and bool((counts >= max_reps).all())
    nan = float("nan")
    return SequentialDecision(
        decided=direction != "not shown",
        direction=direction,
        lo=float(lo[-1]) if len(x) else -1.0,
        hi=float(hi[-1]) if len(x) else 1.0,
        estimate=float(est[-1]) if len(x) else nan,
        n_pairs=len(x),
        n_cells=cells.height,
        reps_used=len(x) / n_cells,
        at_max=at_max,
        alpha=alpha,
        path=path,
    )


def _cells(scores: pl.DataFrame, arms: Sequence[str]) -> pl.DataFrame:
    """Per cell (variant × model) either arm ran: valid reps and passes of each arm, and pairs."""
    a, b = arms
    df = _ordinary(scores, arms)
    valid = pl.col("valid").fill_null(False)
    ok = pl.col("passed").fill_null(False) & valid
    out = df.group_by("variant", "model_alias").agg(
        n_a=(valid & (pl.col("arm") == a)).sum().cast(pl.Int64),
        n_b=(valid & (pl.col("arm") == b)).sum().cast(pl.Int64),
        k_a=(ok & (pl.col("arm") == a)).sum().cast(pl.Int64),
        k_b=(ok & (pl.col("arm") == b)).sum().cast(pl.Int64),
    )
    return out.with_columns(pairs=pl.min_horizontal("n_a", "n_b")).sort("variant", "model_alias")


def pair_variance(k_a: np.ndarray, n_a: np.ndarray, k_b: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """Estimated variance of one paired difference in each cell, p̃_A(1−p̃_A) + p̃_B(1−p̃_B), from
    add-one rates p̃ = (k+1)/(n+2): never 0, so a cell that has always passed is not written off."""
    pa = (np.asarray(k_a, dtype=float) + 1) / (np.asarray(n_a, dtype=float) + 2)
    pb = (np.asarray(k_b, dtype=float) + 1) / (np.asarray(n_b, dtype=float) + 2)
    return pa * (1 - pa) + pb * (1 - pb)


def allocate(pairs: np.ndarray, var: np.ndarray, round_size: int, max_reps: int | None = None) -> np.ndarray:
    """Reps to add per cell: one at a time to the cell with the fewest pairs (planned ones included),
    ties to the highest estimated variance, then to the first cell; never past `max_reps`."""
    planned = np.asarray(pairs, dtype=np.int64).copy()
    more = np.zeros(len(planned), dtype=np.int64)
    order = np.lexsort((np.arange(len(planned)), -np.asarray(var, dtype=float)))  # variance desc, stable
    for _ in range(max(round_size, 0)):
        open_ = planned < max_reps if max_reps is not None else np.ones(len(planned), dtype=bool)
        if not open_[order].any():
            break
        cand = order[open_[order]]
        pick = cand[int(np.argmin(planned[cand]))]
        planned[pick] += 1
        more[pick] += 1
    return more


def plan_round(
    scores: pl.DataFrame, arms: Sequence[str], round_size: int, max_reps: int | None = None
) -> list[tuple[str, str, int]]:
    """The next round: [(variant, model_alias, n_more)], n_more reps to record in each arm of that cell.

    Pure function of the score frame. Keeps the cells' pair counts within one of each other (so
    the CS's mean stays the grid's equal-weighted difference) and, within that, serves the cells
    whose paired difference is most uncertain first (docs/statistics.md, *The round planner*)."""
    cells = _cells(scores, arms)
    if cells.height == 0:
        return []
    var = pair_variance(
        cells["k_a"].to_numpy(), cells["n_a"].to_numpy(), cells["k_b"].to_numpy(), cells["n_b"].to_numpy()
    )
    more = allocate(cells["pairs"].to_numpy(), var, round_size, max_reps)
    return [
        (v, m, int(n))
        for v, m, n in zip(cells["variant"].to_list(), cells["model_alias"].to_list(), more, strict=True)
        if n > 0
    ]


def fixed_plan_reps(
    scores: pl.DataFrame, arms: Sequence[str], delta: float, alpha: float = 0.05, target: float = 0.8
) -> float | None:
    """Reps per cell the fixed-size plan (`power.reps_needed`, paired t) needs to detect `delta`
    between the two arms on this grid, from this frame as a pilot: the `plan_reps` to tune `decide`.

    The frozen-grid plan: ω² (the scenario-to-scenario spread of the difference) is set to 0, as the
    confidence sequence is a statement about these scenarios; only the rep-level variances σ²_A,
    σ²_B come from the pilot. None when the frame cannot say (fewer than 2 scenarios run by both)."""
    from analysis.compare import with_arm
    from analysis.power import components_from_pilot, reps_needed

    frame = _ordinary(scores, arms).with_columns(primary=pl.lit(True))
    try:
        comp = components_from_pilot(
            frame.with_columns(plugin_hash=with_arm(frame)["arm"]), arms[0], arms[1], by="plugin_hash"
        )
    except ValueError:
        return None
    k = reps_needed(delta, replace(comp, omega2=0.0), alpha=alpha, target=target)
    return None if math.isinf(k) else float(k)
