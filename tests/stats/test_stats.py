"""Per-cell and grid-level statistics against hand-worked values and scipy/statsmodels oracles."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis.frames import check_columns, load_scores
from analysis.simulate import simulate_scores
from analysis.stats import (
    cell_class,
    cell_table,
    clustered_se,
    grid_estimate,
    grid_table,
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
        assert est.lo == pytest.approx(max(0, 0.5 - 1.959964 * est.se), abs=1e-6)

    def test_t_interval_matches_scipy(self):
        """The default interval equals scipy's one-sample t interval over the scenario means."""
        k, reps = np.array([3, 1, 4, 4, 0, 2, 5]), np.full(7, 5)
        x = k / reps
        lo, hi = sps.t.interval(0.95, 6, loc=x.mean(), scale=sps.sem(x))
        est = grid_estimate(k, reps)
        assert (est.lo, est.hi) == pytest.approx((lo, hi))

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
