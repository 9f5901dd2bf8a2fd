"""Rep planning: power, reps per cell needed, and minimum detectable effect (Miller 2024, §5).

Miller's variance of one scenario's paired difference, with K reps per scenario and arm, is
ω² + (σ²_A + σ²_B)/K: ω² is how much the true difference varies across scenarios (more reps
cannot shrink it), σ² the rep-level Bernoulli variance inside a cell. With n scenarios the paired
test has power against a difference δ given by the normal formula (Miller) or, by default here,
the paired t-test's exact noncentral-t power (statsmodels), since n is only 7. Everything is
solved by plugging that variance into statsmodels' TTestPower / the normal closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl
from scipy import stats as sps
from statsmodels.stats.power import NormalIndPower, TTestPower
from statsmodels.stats.proportion import proportion_effectsize

from analysis.paired import compare
from analysis.stats import Axis, proportion_interval

Dist = Literal["t", "normal"]


@dataclass(frozen=True)
class Components:
    """Miller's variance components for a paired comparison."""

    omega2: float  # between-scenario variance of the true differences
    sigma2_a: float  # mean rep-level (Bernoulli) variance in arm A
    sigma2_b: float
    n_scenarios: int = 7
    note: str = ""

    def pair_variance(self, reps: float) -> float:
        """Variance of one scenario's observed difference with `reps` reps per arm."""
        return self.omega2 + (self.sigma2_a + self.sigma2_b) / reps


def conservative_sigma2(passes: int, reps: int, conf: float = 0.95) -> float:
    """The largest Bernoulli variance p(1-p) over the Wilson interval of `passes`/`reps`.

    Used when a pilot arm shows no rep-to-rep variance at all (every cell 0/K or K/K): zero
    observed variance does not mean zero true variance, and planning from 0 would promise that
    any difference is detectable. With 0/14 this gives 0.18·0.82 = 0.15, not 0.
    """
    if reps <= 0:
        return 0.25
    lo, hi = (float(v[0]) for v in proportion_interval(passes, reps, conf))
    p = min(max(0.5, lo), hi)  # the point of [lo, hi] closest to 1/2
    return p * (1 - p)


def components_from_pilot(
    scores: pl.DataFrame,
    a: str,
    b: str,
    by: str = "model_alias",
    axis: Axis = "passed",
    include_extra_variants: bool = False,
) -> Components:
    """Estimate ω², σ²_A, σ²_B from a pilot archive's score frame (arms are values of `by`).

    With one rep per cell the rep-level variance cannot be told from the scenario-level one; then
    each arm's σ² is set to p̄(1-p̄) (its whole Bernoulli variance, an upper bound) and ω² to what is
    left — a conservative plan, said so in `note`. An arm whose pilot shows no variance at all
    (σ² = 0: every cell passed always or never) gets `conservative_sigma2` of its pooled rate
    instead, also said in `note`.
    """
    r = compare(scores, a, b, by=by, axis=axis, include_extra_variants=include_extra_variants)
    if r.n_pairs < 2:
        raise ValueError(f"need at least 2 scenarios run by both {a!r} and {b!r}, found {r.n_pairs}")
    notes = []
    if not math.isnan(r.sigma2_a) and not math.isnan(r.sigma2_b):
        omega2, s2a, s2b = r.omega2, r.sigma2_a, r.sigma2_b
    else:
        s2a, s2b = r.mean_a * (1 - r.mean_a), r.mean_b * (1 - r.mean_b)
        var_d = float(r.per_pair["diff"].to_numpy().var(ddof=1))
        omega2 = max(0.0, var_d - s2a - s2b)
        notes.append("pilot has cells with <2 valid reps: rep variance set to p(1-p) (conservative).")
    pp = r.per_pair
    floored = []
    if s2a == 0:
        s2a = conservative_sigma2(int(pp["k_a"].sum()), int(pp["K_a"].sum()))
        floored.append(a)
    if s2b == 0:
        s2b = conservative_sigma2(int(pp["k_b"].sum()), int(pp["K_b"].sum()))
        floored.append(b)
    if floored:
        notes.append(
            f"pilot shows no rep-to-rep variance for {', '.join(map(str, floored))}: σ² set to the largest "
            "p(1-p) within the 95% Wilson interval of its pooled rate (conservative)."
        )
    return Components(omega2, s2a, s2b, r.n_pairs, note=" ".join(notes))


def power(delta: float, reps: float, comp: Components, alpha: float = 0.05, dist: Dist = "t") -> float:
    """Chance that a two-sided paired test at level `alpha` detects a true grid difference `delta`."""
    sd = math.sqrt(comp.pair_variance(reps))
    n = comp.n_scenarios
    if sd == 0:
        return 1.0 if delta != 0 else alpha
    if dist == "normal":
        lam = abs(delta) * math.sqrt(n) / sd
        z = sps.norm.ppf(1 - alpha / 2)
        return float(sps.norm.cdf(lam - z) + sps.norm.cdf(-lam - z))
    return float(
        TTestPower().power(effect_size=abs(delta) / sd, nobs=n, alpha=alpha, alternative="two-sided")
    )


def _effect_needed(n: int, alpha: float, target: float, dist: Dist) -> float:
    """Standardised effect δ/sd that n scenarios detect with power `target`."""
    if dist == "normal":
        return float((sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(target)) / math.sqrt(n))
    return float(TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=target))


def reps_needed(
    delta: float, comp: Components, alpha: float = 0.05, target: float = 0.8, dist: Dist = "t"
) -> float:
    """Reps per cell (per scenario and arm) to detect `delta` with power `target`; inf if no K can.

    Solves ω² + (σ²_A+σ²_B)/K = (δ / effect_needed)² for K — Miller's formula solved for K instead
    of n, since the scenarios are fixed. inf means the scenario-to-scenario spread ω² alone is too
    large for n scenarios: more reps cannot help, more scenarios would.
    """
    sd_max2 = (abs(delta) / _effect_needed(comp.n_scenarios, alpha, target, dist)) ** 2
    room = sd_max2 - comp.omega2
    s = comp.sigma2_a + comp.sigma2_b
    if s == 0:
        return 1.0 if room > 0 else math.inf
    if room <= 0:
        return math.inf
    return float(max(1, math.ceil(s / room - 1e-9)))


#: The largest possible difference between two pass rates; an MDE above it is reported as this.
MAX_DIFF = 1.0


def mde(reps: float, comp: Components, alpha: float = 0.05, target: float = 0.8, dist: Dist = "t") -> float:
    """Minimum detectable grid difference with `reps` reps per cell, at power `target`, capped at 1.

    Two pass rates differ by at most 1; a formula value above that means no difference is
    detectable with these reps and scenarios, and is returned as `MAX_DIFF` (see `describe_mde`).
    """
    return min(MAX_DIFF, mde_uncapped(reps, comp, alpha, target, dist))


def mde_uncapped(
    reps: float, comp: Components, alpha: float = 0.05, target: float = 0.8, dist: Dist = "t"
) -> float:
    """Miller's formula for the MDE before capping: effect_needed · sqrt(ω² + (σ²_A+σ²_B)/K)."""
    return _effect_needed(comp.n_scenarios, alpha, target, dist) * math.sqrt(comp.pair_variance(reps))


def describe_mde(value: float) -> str:
    """The MDE as text: '0.234', or 'none (≥ 1: not detectable)' when capped."""
    if value >= MAX_DIFF:
        return "none detectable (formula gives ≥ 1, the largest possible difference of pass rates)"
    return f"{value:.3f}"


def scenarios_needed(
    delta: float, reps: float, comp: Components, alpha: float = 0.05, target: float = 0.8
) -> int:
    """Miller's original formula: scenarios n = ((z_{α/2}+z_β)/δ)² (ω² + (σ²_A+σ²_B)/K)."""
    z = sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(target)
    return math.ceil((z / delta) ** 2 * comp.pair_variance(reps))


def reps_per_cell(p1: float, p2: float, alpha: float = 0.05, target: float = 0.8) -> int:
    """Reps in each of two cells to tell rate p1 from p2 in a single scenario (two-proportion test, arcsine h)."""
    h = abs(proportion_effectsize(p1, p2))
    if h == 0:
        return math.inf  # type: ignore[return-value]
    n = NormalIndPower().solve_power(effect_size=h, alpha=alpha, power=target, ratio=1.0)
    return math.ceil(float(n))


def power_curve(
    comp: Components,
    deltas: list[float],
    reps: list[int] | np.ndarray,
    alpha: float = 0.05,
    dist: Dist = "t",
) -> pl.DataFrame:
    """Long table (delta, reps, power) for plotting."""
    rows = [
        {"delta": d, "reps": int(k), "power": power(d, float(k), comp, alpha, dist)}
        for d in deltas
        for k in reps
    ]
    return pl.DataFrame(rows)


def plan_table(
    comp: Components, reps: list[int], alpha: float = 0.05, target: float = 0.8, dist: Dist = "t"
) -> pl.DataFrame:
    """For each candidate reps per cell: the minimum detectable difference at `target` power.

    `mde` is capped at 1 (no larger difference of pass rates exists); `detectable` is False there.
    """
    rows = []
    for k in reps:
        raw = mde_uncapped(k, comp, alpha, target, dist)
        rows.append(
            {"reps": k, "mde": min(MAX_DIFF, raw), "detectable": raw < MAX_DIFF, "power_target": target}
        )
    return pl.DataFrame(rows)
