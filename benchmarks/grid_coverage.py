"""Print the coverage of the 95% grid interval (analysis.stats.score_interval) over simulated grids.

Scenario rates from Beta populations (interior and near 0/1) or all equal to one fixed rate; 3-7
scenarios; 2, 5 and 10 reps per cell; 4000 grids per setting (Monte-Carlo SE about 0.0035). Also
the plain t interval it replaced, for comparison. Run: .venv/bin/python benchmarks/grid_coverage.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy import stats as sps

from analysis.stats import score_interval

POPULATIONS = {
    "Beta(2,3)": (2, 3),
    "Beta(0.7,0.7)": (0.7, 0.7),
    "Beta(5,2)": (5, 2),
    "Beta(19,1)": (19, 1),
    "Beta(1,19)": (1, 19),
    "Beta(9.5,0.5)": (9.5, 0.5),
    "Beta(0.5,9.5)": (0.5, 9.5),
}
FIXED = (0.01, 0.03, 0.5, 0.97, 0.99)


def coverage(p: np.ndarray, mu: float, reps: int, rng: np.random.Generator) -> tuple[float, float]:
    """(new interval, old t interval) coverage of mu for scenario rates p (grids × scenarios)."""
    n = p.shape[1]
    x = rng.binomial(reps, p) / reps
    m, s2 = x.mean(1), x.var(1, ddof=1)
    lo, hi = score_interval(m, s2, n, n * reps)
    half = sps.t.ppf(0.975, n - 1) * np.sqrt(s2 / n)
    return float(((lo <= mu) & (mu <= hi)).mean()), float(((m - half <= mu) & (mu <= m + half)).mean())


def main() -> None:
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    grids = 4000
    print(f"{'truth':<15} {'scen':>4} {'reps':>4}  {'new':>6} {'old t':>6}")
    worst, best = (1.0, ""), (0.0, "")
    for n in range(3, 8):
        for reps in (2, 5, 10):
            settings = [(k, rng.beta(a, b, (grids, n)), a / (a + b)) for k, (a, b) in POPULATIONS.items()]
            settings += [(f"all at {p}", np.full((grids, n), p), p) for p in FIXED]
            for name, p, mu in settings:
                new, old = coverage(p, mu, reps, rng)
                print(f"{name:<15} {n:>4} {reps:>4}  {new:6.3f} {old:6.3f}")
                worst = min(worst, (new, f"{name}, {n} scenarios, {reps} reps"))
                best = max(best, (new, f"{name}, {n} scenarios, {reps} reps"))
    print(f"lowest coverage {worst[0]:.3f} ({worst[1]}); highest {best[0]:.3f} ({best[1]})")
    print(f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
