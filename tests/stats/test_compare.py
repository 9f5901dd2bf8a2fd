"""`evalb compare`: decisions per candidate, over-triggering beside the pass difference, the
multiple-comparison control in simulation (fixed seeds), and the command's output and errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.multitest import multipletests

from analysis.compare import adjust, compare_arms, resolve_arms
from analysis.paired import paired_estimate
from analysis.simulate import VARIANTS, simulate_arms, simulate_scores, write_archive
from evalb.errors import UsageError
from tests.cli.helpers import call

ALPHA = 0.05
BASE = {(v, "m"): r for v, r in zip(VARIANTS[:7], (0.3, 0.4, 0.5, 0.5, 0.6, 0.4, 0.3), strict=True)}
OVER = [("N1", "m"), ("N2", "m"), ("N3", "m")]


def _shift(rates: dict, d: float) -> dict:
    return {k: min(1.0, max(0.0, r + d)) for k, r in rates.items()}


@pytest.fixture(scope="module")
def three_arms() -> pl.DataFrame:
    needless = {
        "current": dict.fromkeys(OVER, 0.1),
        "better": dict.fromkeys(OVER, 0.6),
        "worse": dict.fromkeys(OVER, 0.1),
        "same": dict.fromkeys(OVER, 0.1),
    }
    arms = {"current": BASE, "better": _shift(BASE, 0.35), "worse": _shift(BASE, -0.3), "same": BASE}
    return simulate_arms(arms, reps=12, seed=4, needless=needless)


def test_each_candidate_gets_its_decision_and_the_needless_difference(three_arms: pl.DataFrame) -> None:
    res = compare_arms(three_arms)
    assert res.baseline == "current" and res.candidates == ["better", "same", "worse"]
    table = res.table()
    got = dict(zip(table["candidate"], table["decision"], strict=True))
    assert got == {"better": "better", "worse": "worse", "same": "not shown"}
    row = table.row(by_predicate=pl.col("candidate") == "better", named=True)
    assert row["n_pairs"] == 7  # over-triggering scenarios are not in the pass difference
    assert row["needless_diff"] > 0.2 and row["needless_lo"] > 0
    assert row["p_adjusted"] >= row["p_value"]
    text = res.text()
    assert "better vs current: better" in text and "raises needless" in text
    assert "same vs current: not shown" in text
    sbs = res.side_by_side
    assert set(sbs["kind"]) == {"ordinary", "over-triggering"}
    assert set(sbs.filter(pl.col("kind") == "over-triggering")["metric"]) == {"needless"}
    assert sbs.filter(pl.col("lo") > pl.col("rate") + 1e-9).is_empty()


def test_without_over_triggering_scenarios_the_needless_columns_are_empty() -> None:
    df = simulate_arms({"current": BASE, "candidate": _shift(BASE, 0.3)}, reps=8, seed=1)
    assert "needless" not in df.columns
    res = compare_arms(df)
    assert res.table()["needless_diff"].is_null().all()
    assert "no over-triggering scenarios" in res.text()


def test_arm_choice_and_its_errors(three_arms: pl.DataFrame) -> None:
    assert resolve_arms(three_arms, arms=["same", "better"]) == ("same", ["better"])
    assert resolve_arms(three_arms, baseline="worse", arms=["better"]) == ("worse", ["better"])
    with pytest.raises(UsageError, match="unknown arm 'nope'") as e:
        resolve_arms(three_arms, baseline="nope")
    assert "better, current, same, worse" in e.value.one_line()
    one = three_arms.filter(pl.col("arm") == "current")
    with pytest.raises(UsageError, match="one arm"):
        resolve_arms(one)
    no_default = three_arms.filter(pl.col("arm") != "current")
    with pytest.raises(UsageError, match="none is named current") as e:
        resolve_arms(no_default)
    assert "--baseline ARM" in e.value.one_line()


def test_adjusted_p_values_match_statsmodels() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.005, float("nan")])
    filled = np.nan_to_num(p, nan=1.0)
    assert adjust(p, "holm") == pytest.approx(multipletests(filled, method="holm")[1])
    assert adjust(p, "bh") == pytest.approx(multipletests(filled, method="fdr_bh")[1])


def _screen(rng: np.random.Generator, effects: list[float], sims: int) -> np.ndarray:
    """p-values (sims, candidates) of each candidate against one shared baseline, 7 scenarios × 6 reps."""
    pa = np.array([v for v in BASE.values()])
    reps = np.full(len(pa), 6)
    out = np.empty((sims, len(effects)))
    for s in range(sims):
        k_a = rng.binomial(reps, pa)
        for j, d in enumerate(effects):
            k_b = rng.binomial(reps, np.clip(pa + d, 0, 1))
            out[s, j] = paired_estimate(k_a, reps, k_b, reps)["p_value"]
    return out


def test_holm_and_bh_keep_their_error_rates_when_several_candidates_are_screened() -> None:
    """Four candidates against one baseline. All null: Holm's familywise error and BH's FDR ≤ 5%
    (+ MC slack), while uncorrected tests err far more often. Two real effects, two null: Holm's
    familywise error and BH's false discovery proportion stay ≤ 5% on average."""
    sims = 1500
    slack = 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims)
    p = _screen(np.random.default_rng(12), [0.0] * 4, sims)
    raw = (np.nan_to_num(p, nan=1.0) <= ALPHA).any(axis=1).mean()
    holm = np.mean([(adjust(row, "holm") <= ALPHA).any() for row in p])
    bh = np.mean([(adjust(row, "bh") <= ALPHA).any() for row in p])  # all null: FDR = P(any rejection)
    print(f"all null: uncorrected FWER {raw:.3f}, Holm {holm:.3f}, BH {bh:.3f}")
    assert holm <= ALPHA + slack and bh <= ALPHA + slack
    assert raw >= 2 * ALPHA
    p = _screen(np.random.default_rng(13), [0.3, 0.3, 0.0, 0.0], sims)
    null = np.array([False, False, True, True])
    fwer, fdp = [], []
    for row in p:
        rh, rb = adjust(row, "holm") <= ALPHA, adjust(row, "bh") <= ALPHA
        fwer.append((rh & null).any())
        fdp.append((rb & null).sum() / max(rb.sum(), 1))
    power_bh = np.mean([(adjust(r, "bh") <= ALPHA)[:2].mean() for r in p])
    print(
        f"two real, two null: Holm FWER {np.mean(fwer):.3f}, BH FDR {np.mean(fdp):.3f}, BH power {power_bh:.2f}"
    )
    assert np.mean(fwer) <= ALPHA + slack and np.mean(fdp) <= ALPHA + slack


def test_the_command_prints_decisions_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """On an archive without the arm column, plugin hashes are the arms."""
    root = tmp_path / "arch"
    rates = {(v, "m"): 0.2 for v in VARIANTS[:7]}
    write_archive(root, simulate_scores(rates, reps=6, seed=1, plugin_hash="current"))
    write_archive(root, simulate_scores({k: 0.9 for k in rates}, reps=6, seed=2, plugin_hash="candidate"))
    out = tmp_path / "c.json"
    r = call("evalb", "compare", "--archive", root, "--json", out)
    printed = capsys.readouterr().out
    assert r.code == 0, r.err
    assert "candidate vs current: better" in printed
    data = json.loads(out.read_text())
    assert data["baseline"] == "current" and data["comparisons"][0]["decision"] == "better"
    r = call("evalb", "compare", "--archive", root, "--baseline", "nope")
    assert r.code == 2 and r.lines == ["error: unknown arm 'nope' (arms in this archive: candidate, current)"]
    r = call("evalb", "compare", "--archive", root, "--correction", "bonf")
    assert r.code == 2 and r.err.startswith("error: --correction 'bonf' is unknown")
    one = tmp_path / "one"
    write_archive(one, simulate_scores(rates, reps=2, seed=1, plugin_hash="only"))
    r = call("evalb", "compare", "--archive", one)
    assert r.code == 2 and "has one arm (default)" in r.err and len(r.lines) == 1
