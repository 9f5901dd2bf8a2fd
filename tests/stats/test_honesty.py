"""Statistical honesty: over many simulated grids with known truth, intervals cover and power is as promised.

Fixed seeds make these deterministic; the tolerances are a few Monte-Carlo SEs wide (about 0.005
for coverage and 0.007 for power with the simulation counts used) yet tight enough to fail if a
formula were wrong: e.g. normal instead of t quantiles drops grid coverage to about 0.89, and
Miller's normal power formula promises 0.92 where the paired t-test achieves 0.81.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from analysis.degradation import CONFIRMED, classify
from analysis.paired import paired_estimate
from analysis.power import Components, power, reps_needed
from analysis.simulate import simulate_counts
from analysis.stats import grid_estimate, proportion_interval, score_interval

N_SCEN = 7


class TestCoverage:
    @pytest.mark.parametrize("method", ["wilson", "exact"])
    def test_cell_intervals_cover_true_rates(self, method):
        """Across a realistic grid of cell rates, cell intervals cover the true rate ~95% (exact: ≥95%)."""
        rng = np.random.default_rng(7)
        rates = np.array([0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.4, 0.6, 0.15, 0.85, 0.25])
        reps = 6
        k = simulate_counts(rates, reps, 3000, rng)
        lo, hi = proportion_interval(k.ravel(), np.full(k.size, reps), method=method)
        covered = ((lo <= np.tile(rates, 3000)) & (np.tile(rates, 3000) <= hi)).mean()
        if method == "wilson":
            assert 0.93 <= covered <= 0.975
        else:
            assert covered >= 0.95

    @pytest.mark.parametrize(("a", "b", "reps"), [(2, 3, 5), (0.7, 0.7, 3), (5, 2, 10)])
    def test_grid_interval_covers_population_mean(self, a, b, reps):
        """Scenarios drawn from Beta(a, b), 7 of them: the grid interval covers the population pass rate ~95%."""
        rng = np.random.default_rng(int(a * 10 + b + reps))
        grids = 2000
        p = rng.beta(a, b, (grids, N_SCEN))
        k = rng.binomial(reps, p)
        mu = a / (a + b)
        hits = [(e := grid_estimate(k[g], np.full(N_SCEN, reps))).lo <= mu <= e.hi for g in range(grids)]
        assert 0.92 <= np.mean(hits) <= 0.98

    @pytest.mark.parametrize("reps", [5, 10])
    def test_rep_only_interval_covers_fixed_grid_mean(self, reps):
        """Scenarios fixed: mean ± 1.96·se_reps_only covers the mean of these scenarios' true rates ~95%."""
        rng = np.random.default_rng(reps)
        p = np.array([0.1, 0.3, 0.5, 0.7, 0.9, 0.6, 0.4])
        k = simulate_counts(p, reps, 2000, rng)
        hits = [
            abs((e := grid_estimate(row, np.full(N_SCEN, reps))).mean - p.mean()) <= 1.96 * e.se_reps_only
            for row in k
        ]
        assert 0.93 <= np.mean(hits) <= 0.97


#: Scenario populations for the grid-interval coverage tests: Beta(a, b) scenario rates.
INTERIOR = {"Beta(2,3)": (2, 3), "Beta(0.7,0.7)": (0.7, 0.7), "Beta(5,2)": (5, 2)}
NEAR_BOUNDARY = {"Beta(19,1)": (19, 1), "Beta(1,19)": (1, 19), "Beta(0.5,9.5)": (0.5, 9.5), "Beta(9.5,0.5)": (9.5, 0.5)}  # fmt: skip
#: Every scenario with the same true rate (no between-scenario spread), near 0, 1 and in the middle.
FIXED = (0.01, 0.03, 0.5, 0.97, 0.99)


def _grid_coverage(
    draw, mu: float, n_scen: int, reps: int, seed: int, grids: int = 4000
) -> tuple[float, float]:
    """(coverage of mu, narrowest interval) of the grid interval over simulated grids (vectorised core)."""
    rng = np.random.default_rng(seed)
    x = rng.binomial(reps, draw(rng, (grids, n_scen))) / reps
    lo, hi = score_interval(x.mean(1), x.var(1, ddof=1), n_scen, n_scen * reps)
    return float(((lo <= mu) & (mu <= hi)).mean()), float((hi - lo).min())


class TestGridCoverageEverywhere:
    """The grid interval for 3-7 scenarios, rates in the middle and near 0 and 1 (4000 grids per setting,
    Monte-Carlo SE of a coverage about 0.0035). Nominal 95%; asserted:

    - scenario rates drawn from a population (Beta) in the interior, 5 or 10 reps: 92-98%;
    - with 2 reps (except: >= 90% for 3 scenarios from Beta(0.7, 0.7), measured 91%), and near the boundary (population mean 0.95 or 0.05), or with every scenario at the
      same rate (no spread between scenarios: then every spread the data show is rep noise): at least
      92%, and often conservative (up to 100% at 0.01 or 0.99: 0/N and N/N give Wilson's interval,
      whose far bound is wide). docs/statistics.md tabulates these.
    """

    @pytest.mark.parametrize("n_scen", [3, 4, 5, 6, 7])
    def test_coverage(self, n_scen):
        for reps in (2, 5, 10):
            for i, (name, (a, b)) in enumerate({**INTERIOR, **NEAR_BOUNDARY}.items()):
                cov, width = _grid_coverage(
                    lambda r, s, a=a, b=b: r.beta(a, b, s),
                    a / (a + b),
                    n_scen,
                    reps,
                    100 * n_scen + 10 * reps + i,
                )
                assert width > 0, (name, reps)
                # The one setting below nominal - 3 pp: 3 scenarios from a U-shaped population, 2 reps
                # each. All three at 2/2 (4% of grids) looks exactly like a population near 1.
                floor = 0.90 if (name, n_scen, reps) == ("Beta(0.7,0.7)", 3, 2) else 0.92
                assert cov >= floor, (name, n_scen, reps, cov)
                if name in INTERIOR and reps >= 5:
                    assert cov <= 0.98, (name, n_scen, reps, cov)
            for j, p in enumerate(FIXED):
                cov, width = _grid_coverage(
                    lambda r, s, p=p: np.full(s, p), p, n_scen, reps, 1000 * n_scen + 10 * reps + j
                )
                assert width > 0, (p, reps)
                assert cov >= 0.92, (p, n_scen, reps, cov)

    def test_vectorised_core_is_what_grid_estimate_reports(self):
        """The simulations above call score_interval directly; grid_estimate gives the same bounds."""
        rng = np.random.default_rng(1)
        for _ in range(50):
            n, reps = int(rng.integers(2, 8)), int(rng.integers(1, 11))
            k = rng.binomial(reps, rng.uniform(0, 1, n))
            e = grid_estimate(k, np.full(n, reps))
            x = k / reps
            lo, hi = score_interval(x.mean(), x.var(ddof=1), n, n * reps)
            assert (e.lo, e.hi) == pytest.approx((lo[0], hi[0]))

    def test_old_t_interval_failed_here(self):
        """The plain t interval this replaced covers 0.99 only ~30% of the time with 7 scenarios × 5 reps
        (35/35 passes is likely and gives [1, 1]); the check that the new one does not is above."""
        rng = np.random.default_rng(3)
        x = rng.binomial(5, np.full((4000, 7), 0.99)) / 5
        se = x.std(1, ddof=1) / np.sqrt(7)
        q = sps.t.ppf(0.975, 6)
        assert ((x.mean(1) - q * se <= 0.99) & (x.mean(1) + q * se >= 0.99)).mean() < 0.5


class TestCellCoverageAtBoundaries:
    @pytest.mark.parametrize("n", [3, 5, 6, 8, 10, 20])
    def test_wilson_cell_interval_exact_coverage(self, n):
        """Exact binomial sums: the (boundary-corrected) Wilson cell interval covers ≥ 92% at every rate
        from 0.005 to 0.995, where plain Wilson drops to ~0.90 at p = 0.01, n = 10."""
        ks = np.arange(n + 1)
        lo, hi = proportion_interval(ks, np.full(n + 1, n))
        assert (hi - lo).min() > 0
        for p in (0.005, 0.01, 0.03, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.97, 0.99, 0.995):
            assert sps.binom.pmf(ks, n, p)[(lo <= p) & (p <= hi)].sum() >= 0.92, p


def _confirmed_rate(base_passes: np.ndarray, variant_passes: np.ndarray, reps: int) -> float:
    """Share of simulated (base, variant) axis-(b) pass counts that `classify` calls confirmed."""
    verdict = {
        (a, b): classify(a, reps, reps - b, reps)[0] == CONFIRMED
        for a in range(reps + 1)
        for b in range(reps + 1)
    }
    return float(
        np.mean([verdict[(int(a), int(b))] for a, b in zip(base_passes, variant_passes, strict=True)])
    )


class TestDegradationRule:
    @pytest.mark.parametrize("reps", [3, 5, 10])
    def test_never_confirms_too_often_when_nothing_degrades(self, reps):
        """R4 and R4-nograph with the same (b) rate: 'confirmed' at most 5% of the time (Fisher is exact)."""
        rng = np.random.default_rng(reps)
        for p in (0.2, 0.5, 0.8, 0.95):
            x = rng.binomial(reps, p, 3000)
            passes_v = rng.binomial(reps, p, 3000)
            assert _confirmed_rate(x, passes_v, reps) <= 0.05, p

    def test_confirms_a_real_degradation_with_enough_reps(self):
        """R4 passes (b) 90% of the time, R4-nograph 5%: with 5 reps each it is confirmed most of the time."""
        rng = np.random.default_rng(0)
        x, passes_v = rng.binomial(5, 0.9, 2000), rng.binomial(5, 0.05, 2000)
        assert _confirmed_rate(x, passes_v, 5) > 0.8


def _rejection_rate(pa_draw, pb_draw, reps, sims, rng) -> float:
    rej = 0
    full = np.full(N_SCEN, reps)
    for _ in range(sims):
        pa, pb = pa_draw(rng), pb_draw
        pb = pb(pa, rng)
        r = paired_estimate(rng.binomial(reps, pa), full, rng.binomial(reps, pb), full)
        rej += r["p_value"] < 0.05
    return rej / sims


class TestPowerAsPromised:
    def test_constant_difference(self):
        """Same uplift δ=0.15 in every scenario (ω²=0): at the promised reps, detected ~80% of the time."""
        pa = np.array([0.2, 0.3, 0.5, 0.6, 0.4, 0.35, 0.5])
        delta = 0.15
        pb = pa + delta
        comp = Components(0.0, float((pa * (1 - pa)).mean()), float((pb * (1 - pb)).mean()), N_SCEN)
        k = int(reps_needed(delta, comp))
        promised = power(delta, k, comp)
        observed = _rejection_rate(lambda r: pa, lambda a, r: a + delta, k, 3000, np.random.default_rng(5))
        assert observed == pytest.approx(promised, abs=0.03)

    @pytest.mark.parametrize("reps", [8, None])
    def test_varying_difference_random_scenarios(self, reps):
        """Scenario rates and uplifts vary (ω² > 0): rejection rate matches the promised power at K reps."""
        delta, w = 0.15, 0.1
        rng = np.random.default_rng(9)
        # σ² = E[p(1-p)] for each arm under the scenario distribution, by a large Monte-Carlo draw.
        big_a = rng.uniform(0.2, 0.6, 10**6)
        big_b = big_a + delta + rng.uniform(-w, w, 10**6)
        comp = Components(
            w * w / 3, float((big_a * (1 - big_a)).mean()), float((big_b * (1 - big_b)).mean()), N_SCEN
        )
        k = reps or int(reps_needed(delta, comp))
        promised = power(delta, k, comp)
        observed = _rejection_rate(
            lambda r: r.uniform(0.2, 0.6, N_SCEN),
            lambda a, r: a + delta + r.uniform(-w, w, N_SCEN),
            k,
            3000,
            rng,
        )
        assert observed == pytest.approx(promised, abs=0.03)
        # the normal formula would have promised clearly more than the test delivers here
        assert power(delta, k, comp, dist="normal") > observed + 0.05

    def test_no_difference_rejects_at_alpha(self):
        """With no true difference the paired test rejects at about its 5% level (not above it)."""
        pa = np.array([0.2, 0.3, 0.5, 0.6, 0.4, 0.35, 0.5])
        observed = _rejection_rate(lambda r: pa, lambda a, r: a, 10, 3000, np.random.default_rng(13))
        assert observed <= 0.065
