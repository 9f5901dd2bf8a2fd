"""The sequential rule: anytime-valid under peeking, cheaper than the fixed-size plan, honest planner.

Simulations are vectorised (numpy), fixed seeds. A simulated grid records one rep of each arm in
every cell per round (the planner's balanced allocation with round size = number of cells), the
reps of a round in a shuffled order, and the rule looks after every round.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis import sequential as sq
from analysis.power import Components, reps_needed
from analysis.simulate import VARIANTS, simulate_arms

ALPHA = 0.05
#: Baseline pass rates of 7 scenarios (one model).
RATES = np.array([0.3, 0.4, 0.5, 0.5, 0.6, 0.4, 0.3])
SKEWED = np.array([0.1, 0.05, 0.2, 0.7, 0.6, 0.75, 0.5])


def _pairs(rng: np.random.Generator, pa: np.ndarray, pb: np.ndarray, sims: int, rounds: int) -> np.ndarray:
    """Paired differences (sims, rounds * cells): each round one pair per cell, in shuffled order."""
    c = len(pa)
    a = rng.random((sims, rounds, c)) < pa
    b = rng.random((sims, rounds, c)) < pb
    x = b.astype(np.int8) - a.astype(np.int8)
    perm = np.argsort(rng.random((sims, rounds, c)), axis=-1)
    return np.take_along_axis(x, perm, axis=-1).reshape(sims, rounds * c)


def _stopping(x: np.ndarray, cells: int, n_star: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per simulated grid: decided (bool), round of the decision (rounds if none), direction (+1/-1/0)."""
    up, down = sq.crossings(x, ALPHA, n_star)
    ends = np.arange(cells - 1, x.shape[-1], cells)  # peek after every round
    up_r, down_r = up[:, ends], down[:, ends]
    hit = up_r | down_r
    decided = hit.any(axis=1)
    rounds = hit.shape[1]
    first = np.where(decided, hit.argmax(axis=1) + 1, rounds)
    idx = np.minimum(first - 1, rounds - 1)
    sign = np.where(up_r[np.arange(len(x)), idx], 1, np.where(down_r[np.arange(len(x)), idx], -1, 0))
    return decided, first, np.where(decided, sign, 0)


def _fixed_plan(pa: np.ndarray, delta: float) -> int:
    """Reps per cell the fixed-size plan (analysis.power, paired t, 80% power) asks for, from the truth."""
    pb = np.clip(pa + delta, 0, 1)
    comp = Components(0.0, float((pa * (1 - pa)).mean()), float((pb * (1 - pb)).mean()), len(pa))
    return int(reps_needed(delta, comp, alpha=ALPHA))


SLACK = 3 * math.sqrt(ALPHA * (1 - ALPHA) / 3000)  # 3 Monte-Carlo SEs of a rate near 0.05 from 3000 grids


@pytest.mark.parametrize("pa", [RATES, SKEWED], ids=["mid", "skewed"])
@pytest.mark.parametrize("tuned", [False, True], ids=["anytime", "tuned"])
def test_no_difference_is_declared_at_most_at_the_nominal_rate_while_peeking(
    pa: np.ndarray, tuned: bool
) -> None:
    """Identical arms, 60 rounds, a look after each: the rule declares a difference in ≤ 5% (+ MC slack)."""
    rng = np.random.default_rng(20261201)
    x = _pairs(rng, pa, pa, sims=3000, rounds=60)
    n_star = len(pa) * _fixed_plan(pa, 0.2) if tuned else None
    decided, _, _ = _stopping(x, len(pa), n_star)
    rate = decided.mean()
    print(f"false decisions: {rate:.4f} (nominal {ALPHA}, slack {SLACK:.4f})")
    assert rate <= ALPHA + SLACK


def test_a_naive_repeated_t_test_declares_far_more_often() -> None:
    """The contrast: a paired t-test on the scenarios' rates after every round, at 5%, on the same
    kind of null grids, declares a difference far more often than 5%: peeking inflates its error."""
    rng = np.random.default_rng(7)
    pa, rounds, sims = RATES, 60, 3000
    a = rng.random((sims, rounds, len(pa))) < pa
    b = rng.random((sims, rounds, len(pa))) < pa
    k = np.arange(1, rounds + 1)[None, :, None]
    d = (np.cumsum(b, axis=1) - np.cumsum(a, axis=1)) / k  # per-scenario difference after each round
    n = len(pa)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d.mean(-1) / (d.std(-1, ddof=1) / math.sqrt(n))
    p = 2 * sps.t.sf(np.abs(np.nan_to_num(t, nan=0.0)), n - 1)
    naive = (p[:, 1:] <= ALPHA).any(axis=1).mean()
    once = (p[:, -1] <= ALPHA).mean()  # the same test looked at once: about 5%
    x = _pairs(np.random.default_rng(8), pa, pa, sims, rounds)
    cs_rate = _stopping(x, n, None)[0].mean()
    print(f"null, 60 looks: naive t {naive:.3f}, one look {once:.3f}, confidence sequence {cs_rate:.3f}")
    assert once <= ALPHA + SLACK
    assert naive >= 3 * ALPHA
    assert cs_rate <= ALPHA + SLACK


@pytest.mark.parametrize("pa", [RATES, SKEWED], ids=["mid", "skewed"])
def test_a_true_difference_of_the_planned_size_stops_with_fewer_reps_than_the_fixed_plan(
    pa: np.ndarray,
) -> None:
    """δ = 0.2 in every scenario: the rule tuned to the fixed plan's size stops earlier on average,
    decides in the right direction, and by the fixed plan's size has at least its 80% power."""
    rng = np.random.default_rng(11)
    delta = 0.2
    k_fixed = _fixed_plan(pa, delta)
    max_reps = 3 * k_fixed
    x = _pairs(rng, pa, np.clip(pa + delta, 0, 1), sims=3000, rounds=max_reps)
    decided, first, sign = _stopping(x, len(pa), len(pa) * k_fixed)
    mean_reps = first.mean()
    saving = 1 - mean_reps / k_fixed
    by_fixed = (decided & (first <= k_fixed)).mean()
    print(
        f"fixed plan {k_fixed} reps/cell; sequential mean {mean_reps:.2f} (median {np.median(first):.0f}), "
        f"saving {saving:.0%}; decided {decided.mean():.3f}, by {k_fixed} reps {by_fixed:.3f}, "
        f"wrong direction {(sign < 0).mean():.4f}"
    )
    assert mean_reps < 0.9 * k_fixed
    assert decided.mean() >= 0.95
    assert by_fixed >= 0.75
    assert (sign < 0).mean() <= ALPHA / 2


def test_the_confidence_sequence_covers_a_constant_difference_at_all_times() -> None:
    """Every cell differs by the same 0.1: the running CS contains 0.1 throughout in ≥ 95% of grids."""
    rng = np.random.default_rng(3)
    x = _pairs(rng, RATES, RATES + 0.1, sims=300, rounds=20)
    miss = 0
    for row in x:
        lo, hi = sq.confidence_sequence(row, ALPHA)
        miss += bool(((lo > 0.1) | (hi < 0.1)).any())
        assert np.all(np.diff(hi - lo) <= 1e-12)  # a running intersection only narrows
    assert miss / len(x) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / 300)


def _frame(delta: float, reps: int, seed: int) -> pl.DataFrame:
    base = {(v, "m"): float(r) for v, r in zip(VARIANTS[:7], RATES, strict=True)}
    cand = {k: min(1.0, r + delta) for k, r in base.items()}
    return simulate_arms({"current": base, "candidate": cand}, reps=reps, seed=seed)


def test_decide_reads_the_pairs_in_recording_order_and_agrees_with_the_core() -> None:
    df = _frame(0.4, reps=12, seed=5)
    d = sq.decide(df, ("current", "candidate"))
    seq = sq.pair_sequence(df, ("current", "candidate"))
    assert seq.height == d.n_pairs == 7 * 12 and d.n_cells == 7 and d.reps_used == 12
    assert seq["at"].is_sorted()
    up, down = sq.crossings(seq["x"].to_numpy().astype(float), ALPHA)
    assert d.decided == bool(up[-1] or down[-1])
    assert d.decided and d.direction == "better" and d.lo > 0
    assert d.path.height == d.n_pairs and d.path["width"][-1] == pytest.approx(d.hi - d.lo)
    # Pure: the same frame in another row order gives the same decision.
    again = sq.decide(df.sample(fraction=1.0, shuffle=True, seed=1), ("current", "candidate"))
    assert (again.lo, again.hi, again.direction) == (d.lo, d.hi, d.direction)
    worse = sq.decide(df, ("candidate", "current"))
    assert worse.direction == "worse" and worse.hi < 0


def test_identical_arms_are_not_decided_and_max_reps_stops() -> None:
    df = _frame(0.0, reps=6, seed=9)
    d = sq.decide(df, ("current", "candidate"), max_reps=6)
    assert not d.decided and d.direction == "not shown" and d.lo < 0 < d.hi
    assert d.at_max and d.stop
    assert not sq.decide(df, ("current", "candidate"), max_reps=7).at_max


def test_the_planner_keeps_cells_balanced_and_serves_uncertain_cells_first() -> None:
    df = _frame(0.0, reps=4, seed=2)
    # Drop two reps of one cell: it is behind, so it is served first.
    behind = df.filter(~((pl.col("variant") == "W2") & (pl.col("rep") >= 2)))
    plan = sq.plan_round(behind, ("current", "candidate"), round_size=3)
    assert dict(((v, m), n) for v, m, n in plan)[("W2", "m")] == 2
    assert sum(n for *_, n in plan) == 3
    full = sq.plan_round(df, ("current", "candidate"), round_size=14)
    assert sorted(n for *_, n in full) == [2] * 7
    # Within a tie, the cell with the largest estimated variance of its difference comes first.
    pairs = np.array([3, 3, 3])
    var = sq.pair_variance(np.array([0, 2, 3]), pairs, np.array([0, 1, 3]), pairs)
    assert list(sq.allocate(pairs, var, 1)) == [0, 1, 0]
    assert list(sq.allocate(pairs, var, 10, max_reps=4)) == [1, 1, 1]
    assert sq.plan_round(df, ("current", "candidate"), round_size=5, max_reps=4) == []


def _record(df: pl.DataFrame, plan: list[tuple[str, str, int]], rates: dict, seed: int) -> pl.DataFrame:
    """Append the planned reps (both arms of each planned cell) after the frame's last run, as a grid would."""
    cells = {arm: {(v, m): rates[arm][(v, m)] for v, m, _ in plan} for arm in rates}
    parts = []
    for v, m, n in plan:
        one = {arm: {(v, m): cells[arm][(v, m)]} for arm in rates}
        parts.append(simulate_arms(one, reps=n, seed=seed + len(parts)))
    new = pl.concat(parts)
    last = df["started_at"].max()
    new = new.with_columns(
        started_at=pl.lit(last) + pl.duration(hours=1) + pl.duration(minutes=pl.int_range(pl.len())),
        rep=pl.col("rep") + 1000 + seed,
    )
    return pl.concat([df, new.select(df.columns)])


def test_the_api_loop_decide_then_plan_stops_a_real_difference_early() -> None:
    """The loop `evalb-record grid --until-decided` runs, on simulated frames: decide, else plan a round
    and record it. A true difference of 0.3 is decided before max_reps; rounds keep cells balanced."""
    base = {(v, "m"): float(r) for v, r in zip(VARIANTS[:7], RATES, strict=True)}
    rates = {"current": base, "candidate": {k: min(1.0, r + 0.3) for k, r in base.items()}}
    df = simulate_arms(rates, reps=2, seed=1)
    plan_reps = sq.fixed_plan_reps(df, ("current", "candidate"), 0.3)
    assert plan_reps is not None and plan_reps >= 2
    for rnd in range(40):
        d = sq.decide(df, ("current", "candidate"), max_reps=30, plan_reps=plan_reps)
        if d.stop:
            break
        plan = sq.plan_round(df, ("current", "candidate"), round_size=7, max_reps=30)
        assert sorted(n for *_, n in plan) == [1] * 7  # balanced: one more pair in every cell
        df = _record(df, plan, rates, seed=100 * rnd)
    assert d.decided and d.direction == "better" and d.reps_used < 30
