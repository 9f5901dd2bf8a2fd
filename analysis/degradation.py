"""Degradation checks as the specification reads them, and which failures are expected.

A degradation variant (scenario metadata `expect_b: fail`, e.g. R4-nograph: same prompt, code
graph absent) is *meant* to fail axis (b). Its FAIL means something only next to a PASS of the
base variant (R4) on the same model and plugin: then the base's pass needed what the variant
lacks. Per model × plugin × degradation variant, with valid runs only:

- x/n: base-variant runs passing axis (b); y/m: degradation-variant runs failing axis (b).
- `confirmed`: R4 passes (b) more often than R4-nograph, by a one-sided Fisher exact test at
  level 0.05 (H0: equal (b) pass rates). Fisher's test never rejects more than 5% of the time
  when nothing degrades, whatever the rates; the price is that it needs at least 3 valid reps in
  each cell (3/3 vs 0/3 gives p = 0.05 exactly; 1/1 vs 0/1 gives p = 0.5).
- `R4 not passing`: the base never passed (b) (x = 0, or no valid base run): the check says nothing.
- `not shown`: anything else (R4 passes sometimes, but the difference is not significant).

A run *fails as expected* when its variant expects (b) to fail, its axis (b) FAILs and its
axis (a) PASSes: exactly what an ideal agent without the missing capability does (the self-test's
"perfect" degradation case). Such runs never make `evalb-score` exit 1; every other valid FAIL does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import polars as pl

ALPHA = 0.05
CONFIRMED, NOT_SHOWN, BASE_NOT_PASSING = "confirmed", "not shown", "base not passing"

_SCHEMA: dict[str, type[pl.DataType]] = {
    "model_alias": pl.String,
    "plugin_hash": pl.String,
    "variant": pl.String,
    "base": pl.String,
    "base_b_pass": pl.Int64,
    "base_n": pl.Int64,
    "var_b_fail": pl.Int64,
    "var_n": pl.Int64,
    "p_value": pl.Float64,
    "status": pl.String,
    "detail": pl.String,
}


def expected_fail_variants(scenarios_dir: Path | None = None) -> dict[str, str]:
    """{variant id: base variant id} for every variant whose scenario metadata says `expect_b: fail`."""
    from evalb.scenarios import load_scenarios

    return {
        v.id: sc.id for sc in load_scenarios(scenarios_dir) for v in sc.all_variants() if v.expect_b == "fail"
    }


def fisher_one_sided(x: int, n: int, y: int, m: int) -> float:
    """P-value of the one-sided Fisher exact test that the base passes (b) more often (x/n) than the
    variant ((m-y)/m); 1.0 when either side has no valid run."""
    if n == 0 or m == 0:
        return 1.0
    from scipy import stats as sps  # imported here: scipy.stats costs every command ~0.2 s

    return float(sps.fisher_exact([[x, n - x], [m - y, y]], alternative="greater").pvalue)


def classify(x: int, n: int, y: int, m: int, alpha: float = ALPHA) -> tuple[str, float, str]:
    """(status, p-value, detail) for base (b) passes x/n and variant (b) fails y/m."""
    p = fisher_one_sided(x, n, y, m)
    if x == 0:
        why = "no valid base run" if n == 0 else "the base never passed axis (b): the check says nothing"
        return BASE_NOT_PASSING, p, why
    if m == 0:
        return NOT_SHOWN, p, "no valid run of the degradation variant"
    if p <= alpha * (1 + 1e-9):  # 3/3 vs 0/3 is exactly 1/20; no float rounding above it
        return CONFIRMED, p, f"one-sided Fisher p = {p:.3f} <= {alpha}"
    best = 1 / math.comb(n + m, n)  # the smallest p these rep counts allow (all pass vs all fail)
    if x / n <= (m - y) / m:
        why = "the variant passes (b) as often as the base"
    elif best > alpha:
        why = (
            f"in the expected direction, but {n}+{m} valid reps can never reach p <= {alpha} (need >= 3 each)"
        )
    else:
        why = f"in the expected direction, not significant (one-sided Fisher p = {p:.3f})"
    return NOT_SHOWN, p, why


def degradation_table(
    scores: pl.DataFrame, variants: Mapping[str, str] | None = None, alpha: float = ALPHA
) -> pl.DataFrame:
    """One row per model × plugin × degradation variant that was run: counts, p-value, status, detail."""
    variants = expected_fail_variants() if variants is None else variants
    valid = pl.col("valid").fill_null(False)
    b = pl.col("axis_b").fill_null(False)
    counts = {
        (r["model_alias"], r["plugin_hash"], r["variant"]): (r["b_pass"], r["n"])
        for r in scores.group_by("model_alias", "plugin_hash", "variant")
        .agg(b_pass=(b & valid).sum().cast(pl.Int64), n=valid.sum().cast(pl.Int64))
        .iter_rows(named=True)
    }
    rows = []
    for (model, plugin, variant), (b_pass, m) in sorted(
        counts.items(), key=lambda kv: tuple(map(str, kv[0]))
    ):
        if variant not in variants:
            continue
        base = variants[variant]
        x, n = counts.get((model, plugin, base), (0, 0))
        y = m - b_pass
        status, p, detail = classify(x, n, y, m, alpha)
        rows.append(
            {
                "model_alias": model, "plugin_hash": plugin, "variant": variant, "base": base,
                "base_b_pass": x, "base_n": n, "var_b_fail": y, "var_n": m,
                "p_value": None if math.isnan(p) else p, "status": status, "detail": detail,
            }
        )  # fmt: skip
    return pl.DataFrame(rows, schema=_SCHEMA)


def status_label(row: Mapping[str, object]) -> str:
    """'degradation confirmed', 'degradation not shown' or 'R4 not passing' for a table row."""
    if row["status"] == BASE_NOT_PASSING:
        return f"{row['base']} not passing"
    return f"degradation {row['status']}"


def degradation_lines(table: pl.DataFrame) -> list[str]:
    """Human lines for the summary and `evalb-score`: one per row, with the counts and the rule."""
    if table.is_empty():
        return []
    out = [
        "degradation checks (axis (b) of each expect_b: fail variant vs its base, same model and plugin; "
        f"confirmed = base passes (b) more often, one-sided Fisher exact p <= {ALPHA}):"
    ]
    mw = max(22, *(len(str(m)) for m in table["model_alias"].to_list()))
    for r in table.iter_rows(named=True):
        p = "" if r["p_value"] is None else f"  p = {r['p_value']:.3f}"
        out.append(
            f"  {r['model_alias']:<{mw}} {str(r['plugin_hash'])[:8]:<8} "
            f"{r['base']} B-pass {r['base_b_pass']}/{r['base_n']} vs {r['variant']} B-fail "
            f"{r['var_b_fail']}/{r['var_n']}{p}  -> {status_label(r)} ({r['detail']})"
        )
    return out


def expected_failure(scores: pl.DataFrame, variants: Mapping[str, str] | None = None) -> pl.Series:
    """Per run: True when it is a valid FAIL of an expect_b: fail variant with A PASS and B FAIL."""
    variants = expected_fail_variants() if variants is None else variants
    return scores.select(
        (
            pl.col("valid").fill_null(False)
            & (pl.col("verdict") == "FAIL")
            & pl.col("variant").is_in(list(variants))
            & pl.col("axis_a").fill_null(False)
            & ~pl.col("axis_b").fill_null(True)
        ).alias("expected_failure")
    ).to_series()


def unexpected_failures(scores: pl.DataFrame, variants: Mapping[str, str] | None = None) -> int:
    """How many valid runs FAIL other than as expected (what makes `evalb-score` exit 1)."""
    failed = scores["verdict"] == "FAIL"
    return int((failed & ~expected_failure(scores, variants)).sum())
