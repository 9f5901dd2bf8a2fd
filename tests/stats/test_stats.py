"""Per-cell and grid-level statistics against hand-worked values and scipy/statsmodels oracles."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis.frames import check_columns, load_scores
from analysis.power import (
    Components,
    components_from_pilot,
    conservative_sigma2,
    describe_mde,
    mde,
    mde_uncapped,
    plan_table,
    reps_needed,
)
from analysis.simulate import simulate_scores
from analysis.stats import (
    cell_class,
    cell_table,
    clustered_se,
    grid_estimate,
    grid_table,
    pass_hat_k,
    proportion_interval,
)


class TestProportionInterval:
    def test_wilson_matches_closed_form(self):
        """Wilson's interval for 3/10 equals the textbook formula."""
        k, n, z = 3, 10, sps.norm.ppf(0.975)
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        lo, hi = proportion_interval(k, n)
        assert lo[0] == pytest.approx(centre - half)
        assert hi[0] == pytest.approx(centre + half)

    def test_exact_is_clopper_pearson_from_beta_quantiles(self):
        """'exact' equals the Beta-quantile Clopper-Pearson bounds, including at 0/n and n/n."""
        lo, hi = proportion_interval([0, 2, 5], [5, 5, 5], method="exact")
        assert lo[0] == 0 and hi[2] == 1
        assert lo[1] == pytest.approx(sps.beta.ppf(0.025, 2, 4))
        assert hi[1] == pytest.approx(sps.beta.ppf(0.975, 3, 3))
        assert hi[0] == pytest.approx(sps.beta.ppf(0.975, 1, 5))

    def test_no_reps_gives_nan(self):
        """A cell without valid reps has no interval rather than [0, 1]."""
        lo, hi = proportion_interval(0, 0)
        assert np.isnan(lo[0]) and np.isnan(hi[0])

    @pytest.mark.parametrize("method", ["wilson", "exact"])
    def test_coverage_computed_exactly(self, method):
        """Averaged over p, Wilson covers about 95% and Clopper-Pearson at least 95% (exact binomial sums)."""
        n = 8
        ks = np.arange(n + 1)
        lo, hi = proportion_interval(ks, np.full(n + 1, n), method=method)
        ps = np.linspace(0.02, 0.98, 49)
        cov = np.array([sps.binom.pmf(ks, n, p)[(lo <= p) & (p <= hi)].sum() for p in ps])
        if method == "exact":
            assert cov.min() >= 0.95 - 1e-9
        else:
            assert 0.93 <= cov.mean() <= 0.97
            assert cov.min() > 0.80


class TestCellTable:
    def test_counts_and_invalid_apart(self):
        """Invalid runs are counted in n_invalid and never in a rate's numerator or denominator."""
        df = check_columns(simulate_scores({("R1", "haiku"): 0.5}, reps=40, seed=1, invalid_rate=0.25))
        row = cell_table(df).row(0, named=True)
        assert row["n_runs"] == 40
        assert row["n_invalid"] == int((~df["valid"]).sum())
        assert row["n_valid"] == 40 - row["n_invalid"]
        valid = df.filter(pl.col("valid"))
        assert row["passes"] == int(valid["passed"].sum())
        assert row["a_passes"] == int(valid["axis_a"].sum())
        assert row["b_passes"] == int(valid["axis_b"].sum())
        assert row["rate"] == pytest.approx(row["passes"] / row["n_valid"])
        assert row["lo"] <= row["rate"] <= row["hi"]

    def test_one_row_per_cell(self, scores):
        """16 cells (8 variants × 2 models, one plugin), each with a class."""
        cells = cell_table(scores)
        assert cells.height == 16
        assert set(cells["klass"]) <= {"always-pass", "always-fail", "flaky", "no-data"}

    @pytest.mark.parametrize(
        ("k", "n", "klass"),
        [(5, 5, "always-pass"), (0, 5, "always-fail"), (2, 5, "flaky"), (0, 0, "no-data")],
    )
    def test_class(self, k, n, klass):
        """A cell's class follows from its passes and valid reps."""
        assert cell_class(k, n) == klass


class TestGridEstimate:
    def test_miller_mean_and_se_by_hand(self):
        """Reps are averaged within a scenario first; SE is sd of those means / sqrt(n)."""
        k, reps = np.array([1, 2, 4, 0]), np.array([2, 4, 4, 3])
        x = k / reps  # 0.5, 0.5, 1.0, 0.0
        est = grid_estimate(k, reps, dist="normal")
        assert est.mean == pytest.approx(0.5)
        assert est.se == pytest.approx(np.std(x, ddof=1) / 2)
        # The interval's ends solve (mean - p)² = z² (p(1-p)/N + W), N = n²/Σ(1/K_i) = 12 here,
        # W = se² - mean(1-mean)/N: the binomial part as a function of p, as in Wilson's interval.
        big_n = 16 / (1 / 2 + 1 / 4 + 1 / 4 + 1 / 3)
        w = est.se**2 - 0.25 / big_n
        z2 = sps.norm.ppf(0.975) ** 2
        for end in (est.lo, est.hi):
            assert (0.5 - end) ** 2 == pytest.approx(z2 * (end * (1 - end) / big_n + w))

    def test_interval_is_the_t_interval_when_scenarios_dominate(self):
        """With rep noise negligible (10⁶ reps each), the interval is scipy's one-sample t interval."""
        reps = np.full(7, 10**6)
        k = (np.array([0.6, 0.2, 0.8, 0.8, 0.05, 0.4, 0.95]) * reps).astype(int)
        x = k / reps
        lo, hi = sps.t.interval(0.95, 6, loc=x.mean(), scale=sps.sem(x))
        est = grid_estimate(k, reps)
        assert (est.lo, est.hi) == pytest.approx((lo, hi), abs=1e-4)

    @pytest.mark.parametrize(("k", "n_scen", "reps"), [(2, 7, 2), (0, 7, 5), (5, 3, 10), (1, 7, 2)])
    def test_equal_scenario_means_give_wilson_on_all_reps(self, k, n_scen, reps):
        """Every scenario mean equal (e.g. a perfect oracle): the interval is Wilson's on the n·K reps,
        not the zero-width [mean, mean] the plain t interval gives."""
        est = grid_estimate(np.full(n_scen, k), np.full(n_scen, reps))
        assert est.se == 0
        lo, hi = proportion_interval(k * n_scen, reps * n_scen)
        if 3 < k * n_scen < reps * n_scen - 3:  # away from the Poisson-corrected boundary
            assert (est.lo, est.hi) == pytest.approx((lo[0], hi[0]))
        assert est.hi - est.lo > 0.05
        assert est.lo <= est.mean <= est.hi

    def test_perfect_oracle_is_not_claimed_perfect(self):
        """14 passes out of 14 reps (7 scenarios × 2): the lower bound is Wilson's 0.785, not 1."""
        est = grid_estimate(np.full(7, 2), np.full(7, 2))
        assert est.hi == 1 and est.lo == pytest.approx(14 / (14 + sps.norm.ppf(0.975) ** 2))

    @pytest.mark.parametrize(("n_scen", "reps"), [(2, 1), (2, 3), (3, 2), (3, 3), (4, 2)])
    def test_no_zero_width_interval_from_any_finite_grid(self, n_scen, reps):
        """Every possible outcome of small grids (all pass-count vectors) gets an interval of positive
        width that contains the observed mean."""
        for k in itertools.product(range(reps + 1), repeat=n_scen):
            est = grid_estimate(np.array(k), np.full(n_scen, reps))
            assert est.hi - est.lo > 0.05, k
            assert est.lo - 1e-12 <= est.mean <= est.hi + 1e-12, k

    def test_one_scenario_has_no_interval(self):
        """One scenario says nothing about the population of scenarios: no interval, not [0, x]."""
        est = grid_estimate(np.array([2]), np.array([3]))
        assert math.isnan(est.lo) and math.isnan(est.hi)

    def test_variance_split(self):
        """var_within is the mean unbiased rep variance; var_between the spread of means less rep noise."""
        k, reps = np.array([1, 3, 2]), np.array([4, 4, 4])
        x = k / reps
        s2 = x * (1 - x) * 4 / 3
        est = grid_estimate(k, reps)
        assert est.var_within == pytest.approx(s2.mean())
        assert est.var_between == pytest.approx(max(0, np.var(x, ddof=1) - (s2 / 4).mean()))
        assert est.se_reps_only == pytest.approx(math.sqrt((s2 / 4).sum()) / 3)

    def test_clustered_se_equals_sum_over_cluster_pairs(self):
        """Miller's clustered SE: the CLT variance plus cross-terms of residuals within each cluster."""
        x = np.array([0.2, 0.4, 0.9, 0.1, 0.7])
        c = np.array(["W", "W", "R", "R", "R"])
        r = x - x.mean()
        cross = sum(r[i] * r[j] for i in range(5) for j in range(5) if i != j and c[i] == c[j])
        expected = math.sqrt((r**2).sum() + cross) / 5
        assert clustered_se(x, c) == pytest.approx(expected)
        # each scenario its own cluster: no cross terms, the biased-variance CLT SE
        assert clustered_se(x, np.arange(5)) == pytest.approx(np.std(x) / math.sqrt(5))

    def test_single_rep_leaves_within_variance_unknown(self):
        """With one rep per scenario the rep variance cannot be estimated; the CLT SE still exists."""
        est = grid_estimate(np.array([1, 0, 1]), np.array([1, 1, 1]))
        assert math.isnan(est.var_within) and not math.isnan(est.se)


class TestGridTable:
    def test_excludes_degradation_variants_by_default(self, scores):
        """R4-nograph (expected FAIL) stays out of the grid mean unless asked for."""
        default = grid_table(scores)
        assert set(default["n_scenarios"]) == {7}
        assert set(grid_table(scores, include_extra_variants=True)["n_scenarios"]) == {8}

    def test_axes_and_clusters(self, scores):
        """Each axis gives a row per model, clustered by the two families."""
        for axis in ("passed", "axis_a", "axis_b"):
            t = grid_table(scores, axis=axis)
            assert t.height == 2 and set(t["axis"]) == {axis} and set(t["n_clusters"]) == {2}

    def test_reads_an_archive(self, small_archive):
        """load_scores joins latest scores with runs; two plugin variants give four model×plugin rows."""
        df = load_scores(small_archive)
        assert df.height == 2 * 16 * 3
        assert grid_table(df).height == 4


class TestPassHatK:
    @pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
    def test_matches_brute_force_enumeration(self, n):
        """For every c and k ≤ n: the share of k-subsets of the n reps that are all passes equals C(c,k)/C(n,k)."""
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute = sum(all(s) for s in subsets) / len(subsets)
                assert pass_hat_k(c, n, k)[0] == pytest.approx(brute), (c, n, k)

    @pytest.mark.parametrize(("n", "k"), [(3, 2), (5, 3), (8, 2), (10, 5)])
    def test_unbiased_for_p_to_the_k(self, n, k):
        """E[C(c,k)/C(n,k)] = p^k exactly under c ~ Binomial(n, p), where (c/n)^k is biased upward."""
        c = np.arange(n + 1)
        for p in (0.1, 0.35, 0.5, 0.8, 0.97):
            w = sps.binom.pmf(c, n, p)
            assert (w * pass_hat_k(c, np.full(n + 1, n), k)).sum() == pytest.approx(p**k)
            assert (w * (c / n) ** k).sum() > p**k

    def test_undefined_below_k_reps(self):
        """Fewer valid reps than k: pass^k cannot be estimated (NaN, a blank in tables)."""
        assert np.isnan(pass_hat_k(1, 1, 2)[0]) and np.isnan(pass_hat_k(0, 0, 2)[0])

    def test_cell_table_columns(self, scores):
        """cell_table carries pass^2 and pass^3 of the overall verdict, null where n_valid < k."""
        cells = cell_table(scores)
        for r in cells.iter_rows(named=True):
            for k in (2, 3):
                if r["n_valid"] < k:
                    assert r[f"pass^{k}"] is None
                else:
                    assert r[f"pass^{k}"] == pytest.approx(
                        math.comb(r["passes"], k) / math.comb(r["n_valid"], k)
                    )


class TestPlanningNeverOverClaims:
    def test_zero_variance_pilot_plans_conservatively(self):
        """A pilot where one model always passes and the other never does shows σ² = 0; the plan must not
        promise that any difference is detectable with 1 rep (MDE 0): σ² is set to the largest p(1-p)
        inside the pooled rate's Wilson interval, and the note says so."""
        rates = {(v, m): r for v in ("W1", "W2", "R1", "R2", "R3") for m, r in (("a", 1.0), ("b", 0.0))}
        df = check_columns(simulate_scores(rates, reps=5, seed=2, axis_a_rates=None))
        comp = components_from_pilot(df, "a", "b")
        lo, _hi = proportion_interval(25, 25)
        assert comp.sigma2_a == pytest.approx(lo[0] * (1 - lo[0]))
        assert comp.sigma2_b == pytest.approx(comp.sigma2_a)  # 0/25 mirrors 25/25
        assert "no rep-to-rep variance" in comp.note
        assert mde(5, comp) > 0.1
        assert reps_needed(0.05, comp) > 1
        assert conservative_sigma2(3, 6) == pytest.approx(0.25)  # p = 1/2 inside the interval

    def test_mde_capped_at_the_largest_possible_difference(self):
        """Few scenarios, much spread: the formula's MDE exceeds 1; it is reported as 1, not detectable."""
        comp = Components(omega2=0.3, sigma2_a=0.25, sigma2_b=0.25, n_scenarios=3)
        assert mde_uncapped(1, comp) > 1
        assert mde(1, comp) == 1.0
        plan = plan_table(comp, [1, 1000])
        assert plan["mde"].to_list()[0] == 1.0 and plan["detectable"].to_list() == [False, False]
        assert describe_mde(mde(1, comp)).startswith("none detectable")
        ok = Components(omega2=0.0, sigma2_a=0.2, sigma2_b=0.2, n_scenarios=7)
        assert mde(10, ok) == pytest.approx(mde_uncapped(10, ok)) and mde(10, ok) < 1
        assert describe_mde(mde(10, ok)) == f"{mde(10, ok):.3f}"


# --- presentation (issue 12 item 9) -----------------------------------------------------------------
class TestPresentation:
    def test_scripted_models_cost_nothing(self):
        """The scripted loopback model is never paid for: $0 per run and in the plan, whatever the
        client reported; a paid model keeps its price."""
        from analysis.costs import cell_costs, plan_cost

        rates = {("R1", "scripted:oracle"): 1.0, ("R1", "haiku"): 0.5}
        df = check_columns(simulate_scores(rates, reps=4, seed=2, cost_usd={"scripted:oracle": 1.85}))
        costs = cell_costs(df)
        by_model = dict(zip(costs["model_alias"], costs["usd_total"], strict=True))
        assert by_model["scripted:oracle"] == 0.0 and by_model["haiku"] > 0
        scripted_only = df.filter(pl.col("model_alias") == "scripted:oracle")
        plan = plan_cost(scripted_only, 10)
        assert plan.filter(pl.col("variant") == "TOTAL")["usd"].item() == 0.0

    def test_first_variant_tick_stays_when_leftmost_arm_has_no_point(self):
        """The x range is fixed to the variants, so the first tick shows even when only a later arm
        has a point there."""
        from analysis.plots import cell_rates_figure

        rates = {("R1", "haiku"): 0.5, ("R2", "haiku"): 0.5, ("R1", "sonnet"): 0.5, ("R2", "sonnet"): 0.5}
        df = check_columns(simulate_scores(rates, reps=3, seed=3))
        df = df.with_columns(
            valid=pl.when((pl.col("model_alias") == "haiku") & (pl.col("variant") == "R1"))
            .then(False)
            .otherwise(pl.col("valid"))
        )
        fig = cell_rates_figure(cell_table(df))
        lo, hi = fig.layout.xaxis.range
        assert lo < min(fig.layout.xaxis.tickvals) and hi > max(fig.layout.xaxis.tickvals)
        xs = [x for tr in fig.data for x in tr.x]
        assert min(xs) > 0  # the leftmost arm has no point at the first variant: autorange would cut tick 0

    def test_power_axis_has_clean_ticks(self):
        """The log axis is labelled with the planned rep counts, not plotly's minor 2 3 … 9 ticks."""
        from analysis.plots import power_curve_figure
        from analysis.power import Components, power_curve

        comp = Components(omega2=0.01, sigma2_a=0.2, sigma2_b=0.2, n_scenarios=7)
        fig = power_curve_figure(power_curve(comp, [0.2], [1, 2, 3, 5, 10, 20]))
        assert list(fig.layout.xaxis.tickvals) == [1, 2, 3, 5, 10, 20]
        assert list(fig.layout.xaxis.ticktext) == ["1", "2", "3", "5", "10", "20"]

    def test_paired_points_sharing_a_spot_share_one_label(self):
        """Scenarios with the same pair of rates get one marker and one joined label, not stacked text."""
        from analysis.paired import compare
        from analysis.plots import paired_figure

        rates = {(v, m): 1.0 for v in ("R1", "R2", "R3") for m in ("haiku", "sonnet")}
        df = check_columns(simulate_scores(rates, reps=3, seed=4, axis_a_rates=dict.fromkeys(rates, 1.0)))
        fig = paired_figure(compare(df, "haiku", "sonnet", by="model_alias"))
        points = fig.data[1]
        assert len(points.x) == 1 and all(v in points.text[0] for v in ("R1", "R2", "R3"))
