"""Paired comparisons and rep planning against scipy/statsmodels oracles and their own inverses."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis.costs import cell_costs, plan_cost
from analysis.frames import check_columns
from analysis.paired import compare, paired_estimate
from analysis.power import (
    Components,
    components_from_pilot,
    mde,
    power,
    reps_needed,
    reps_per_cell,
    scenarios_needed,
)
from analysis.simulate import simulate_scores

K_A, K_B = np.array([1, 3, 2, 4, 0, 2, 5]), np.array([3, 4, 2, 5, 2, 4, 5])
REPS = np.full(7, 5)


class TestPaired:
    def test_matches_scipy_paired_t(self):
        """Mean difference, SE, p-value and interval equal scipy's paired t-test on the scenario rates."""
        xa, xb = K_A / REPS, K_B / REPS
        r = paired_estimate(K_A, REPS, K_B, REPS)
        t = sps.ttest_rel(xb, xa)
        assert r["diff"] == pytest.approx((xb - xa).mean())
        assert r["se"] == pytest.approx(sps.sem(xb - xa))
        assert r["p_value"] == pytest.approx(t.pvalue)
        lo, hi = t.confidence_interval(0.95)
        assert (r["lo"], r["hi"]) == pytest.approx((lo, hi))
        assert r["corr"] == pytest.approx(sps.pearsonr(xa, xb).statistic)

    @pytest.mark.parametrize(("k_a", "k_b"), [(5, 5), (0, 0), (5, 0), (2, 2)])
    def test_equal_differences_give_no_zero_width_interval(self, k_a, k_b):
        """Every scenario with the same difference (both arms perfect, say): the t interval would be
        [d, d]; instead rep noise from add-one rates (Agresti-Caffo) with the normal quantile."""
        r = paired_estimate(np.full(7, k_a), REPS, np.full(7, k_b), REPS)
        assert r["se"] == 0
        pa, pb = (k_a + 1) / 7, (k_b + 1) / 7
        half = sps.norm.ppf(0.975) * math.sqrt(7 * (pa * (1 - pa) + pb * (1 - pb)) / 5) / 7
        d = (k_b - k_a) / 5
        assert (r["lo"], r["hi"]) == pytest.approx((max(-1, d - half), min(1, d + half)))
        assert r["hi"] - r["lo"] > 0.15
        assert 0 < r["p_value"] <= 1

    def test_pairing_shrinks_se_when_correlated(self):
        """With positively correlated arms the paired SE is below the unpaired one."""
        r = paired_estimate(K_A, REPS, K_B, REPS)
        assert r["corr"] > 0 and r["se"] < r["se_unpaired"]

    def test_variance_components(self):
        """ω² = var(diff) minus mean rep noise; σ² are mean unbiased Bernoulli variances."""
        r = paired_estimate(K_A, REPS, K_B, REPS)
        xa, xb = K_A / 5, K_B / 5
        s2a, s2b = xa * (1 - xa) * 5 / 4, xb * (1 - xb) * 5 / 4
        assert r["sigma2_a"] == pytest.approx(s2a.mean())
        assert r["omega2"] == pytest.approx(max(0, np.var(xb - xa, ddof=1) - ((s2a + s2b) / 5).mean()))

    def test_compare_models_and_plugins(self):
        """Models pair on variant; plugin variants pair on variant × model."""
        df = check_columns(
            pl.concat(
                [
                    simulate_scores(reps=3, seed=1, plugin_hash="p1"),
                    simulate_scores(reps=3, seed=2, plugin_hash="p2"),
                ]
            )
        )
        by_plugin = compare(df, "p1", "p2", by="plugin_hash")
        assert by_plugin.n_pairs == 14  # 7 primary variants × 2 models
        by_model = compare(df.filter(pl.col("plugin_hash") == "p1"), "haiku", "sonnet")
        assert by_model.n_pairs == 7 and by_model.diff > 0


COMP = Components(omega2=0.004, sigma2_a=0.2, sigma2_b=0.22, n_scenarios=7)


class TestPower:
    def test_normal_power_is_millers_formula(self):
        """dist='normal': Φ(δ√n/sd - z) + Φ(-δ√n/sd - z) with sd² = ω² + (σ²_A+σ²_B)/K."""
        sd = math.sqrt(0.004 + 0.42 / 10)
        lam = 0.2 * math.sqrt(7) / sd
        z = sps.norm.ppf(0.975)
        assert power(0.2, 10, COMP, dist="normal") == pytest.approx(
            sps.norm.cdf(lam - z) + sps.norm.cdf(-lam - z)
        )

    def test_t_power_is_noncentral_t(self):
        """dist='t': the paired t-test's power from the noncentral t with n-1 df."""
        sd = math.sqrt(COMP.pair_variance(10))
        nc = 0.2 / sd * math.sqrt(7)
        crit = sps.t.ppf(0.975, 6)
        expected = sps.nct.sf(crit, 6, nc) + sps.nct.cdf(-crit, 6, nc)
        assert power(0.2, 10, COMP) == pytest.approx(expected, rel=1e-6)

    @pytest.mark.parametrize("dist", ["t", "normal"])
    def test_reps_needed_is_the_smallest_sufficient_k(self, dist):
        """At reps_needed the power reaches the target; one rep fewer it does not."""
        k = reps_needed(0.25, COMP, dist=dist)
        assert power(0.25, k, COMP, dist=dist) >= 0.8 > power(0.25, k - 1, COMP, dist=dist)

    def test_reps_needed_infinite_when_scenario_spread_dominates(self):
        """If ω² alone exceeds what n scenarios allow, no number of reps suffices."""
        assert reps_needed(0.1, Components(0.05, 0.2, 0.2, 7)) == math.inf

    @pytest.mark.parametrize("dist", ["t", "normal"])
    def test_mde_inverts_power(self, dist):
        """The minimum detectable effect at K reps is detected with exactly the target power."""
        assert power(mde(6, COMP, dist=dist), 6, COMP, dist=dist) == pytest.approx(0.8, abs=1e-6)

    def test_scenarios_needed_closed_form(self):
        """Miller's n = ((z_α/2 + z_β)/δ)² (ω² + (σ²_A+σ²_B)/K), rounded up."""
        z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
        assert scenarios_needed(0.1, 5, COMP) == math.ceil((z / 0.1) ** 2 * (0.004 + 0.42 / 5))

    def test_reps_per_cell_two_proportions(self):
        """Reps per cell to tell 0.2 from 0.7: 2((z_α/2+z_β)/h)² with Cohen's h (each arcsine-rate has variance 1/n)."""
        h = 2 * math.asin(math.sqrt(0.7)) - 2 * math.asin(math.sqrt(0.2))
        z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
        assert reps_per_cell(0.2, 0.7) == math.ceil(2 * (z / h) ** 2)

    def test_components_from_single_rep_pilot_are_conservative(self):
        """A 1-rep pilot cannot split variance: σ² falls back to p̄(1-p̄) and says so."""
        comp = components_from_pilot(check_columns(simulate_scores(reps=1, seed=4)), "haiku", "sonnet")
        assert comp.note and comp.sigma2_b > 0


class TestCosts:
    def test_cell_costs_count_invalid_runs(self, scores):
        """Every run costs money: the per-cell total sums all runs, invalid ones included."""
        c = cell_costs(scores)
        assert c["n_runs"].sum() == scores.height
        assert c["usd_total"].sum() == pytest.approx(scores["cost_usd"].sum())

    def test_plan_buys_extra_runs_for_invalid_share(self, scores):
        """A plan of K valid reps buys ceil(K / (1 - invalid share)) runs and prices them per cell."""
        plan = plan_cost(scores, reps=10, variants=["R1", "W9"], models=["haiku"])
        r1 = plan.row(0, named=True)
        assert r1["runs"] == math.ceil(10 / (1 - r1["invalid_share"]))
        assert r1["usd"] == pytest.approx(r1["runs"] * r1["usd_per_run"])
        w9 = plan.row(1, named=True)  # not in the pilot: priced at the model mean
        assert w9["usd_per_run"] == pytest.approx(
            scores.filter(pl.col("model_alias") == "haiku")["cost_usd"].mean()
        )
        total = plan.row(-1, named=True)
        assert total["variant"] == "TOTAL" and total["usd"] == pytest.approx(r1["usd"] + w9["usd"])
