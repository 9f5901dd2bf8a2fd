"""`evalb compare`: each candidate arm against a baseline arm, paired by scenario, with a decision.

Reads a score frame (an archive's latest scores); nothing is rerun. For each candidate: the paired
difference of pass rates over the ordinary scenarios (`paired.compare`, arms as the compared
value), the difference of the `needless` rate over the over-triggering scenarios (rows whose
`needless` is not null) beside it, and a decision — better / worse / not shown — from the paired
test's p-values corrected for the number of candidates: Holm (familywise error, default) or
Benjamini–Hochberg (false discovery rate). docs/statistics.md, *Comparing arms*, says which
controls what.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import polars as pl

from analysis.frames import check_columns
from analysis.paired import PairedResult, compare
from analysis.stats import Axis, proportion_interval
from evalb.errors import UsageError

Correction = Literal["holm", "bh"]
CORRECTIONS: tuple[str, ...] = ("holm", "bh")
#: Baseline arm names tried, in order, when none is given.
DEFAULT_BASELINES: tuple[str, ...] = ("current", "none", "default")


def with_arm(scores: pl.DataFrame) -> pl.DataFrame:
    """`scores` with an `arm` column: its own (schema v3), else the plugin hash (older archives, and
    archives whose runs are all of the 'default' arm but of several plugins, recorded one grid at a
    time: each plugin content is an arm; '(none)' for runs without a plugin)."""
    if "arm" in scores.columns:
        arms = scores["arm"].cast(pl.String).fill_null("(none)")
        one_plugin_grids = bool((arms == "default").all()) and scores["plugin_hash"].n_unique() > 1
        if not one_plugin_grids:
            return scores.with_columns(arm=arms)
    return scores.with_columns(arm=pl.col("plugin_hash").cast(pl.String).fill_null("(none)"))


def arms_present(scores: pl.DataFrame) -> list[str]:
    """The arms in a score frame, sorted."""
    return sorted(with_arm(scores)["arm"].unique().to_list())


def resolve_arms(
    scores: pl.DataFrame, baseline: str | None = None, arms: Sequence[str] | None = None
) -> tuple[str, list[str]]:
    """(baseline, candidates) from the options, or a one-line UsageError naming the arms present.

    `arms` restricts the comparison; without `baseline` the first of `arms` is the baseline, else
    the first of 'current', 'none', 'default' present, else (two arms) the first alphabetically."""
    present = arms_present(scores)
    listed = ", ".join(present) or "none"
    for name in [*(arms or []), *([baseline] if baseline else [])]:
        if name not in present:
            raise UsageError(f"unknown arm {name!r}", hint=f"arms in this archive: {listed}")
    if len(present) < 2:
        raise UsageError(
            f"the archive has one arm ({listed}): nothing to compare",
            hint="record a grid whose plugins: mapping names two or more arms",
        )
    chosen = list(dict.fromkeys(arms)) if arms else present
    if arms is not None and len(chosen) < 2 and baseline is None:
        raise UsageError(
            f"--arms {','.join(arms)} names fewer than two arms", hint="e.g. --arms current,candidate"
        )
    if baseline is None:
        if arms:
            baseline = chosen[0]
        else:
            baseline = next((b for b in DEFAULT_BASELINES if b in present), None)
            if baseline is None and len(present) == 2:
                baseline = present[0]
            if baseline is None:
                raise UsageError(
                    f"several arms ({listed}) and none is named current or none",
                    hint="name the baseline with --baseline ARM",
                )
    candidates = [a for a in chosen if a != baseline]
    if not candidates:
        raise UsageError(f"no arm to compare with the baseline {baseline!r}", hint=f"arms: {listed}")
    return baseline, candidates


def adjust(p_values: Sequence[float], method: Correction = "holm") -> np.ndarray:
    """Multiplicity-adjusted p-values: Holm's step-down or Benjamini–Hochberg's step-up (NaN = 1)."""
    p = np.array([1.0 if (v is None or math.isnan(v)) else float(v) for v in p_values])
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    elif method == "bh":
        adj = np.minimum.accumulate((m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
        adj = np.minimum(adj, 1.0)
    else:
        raise UsageError(f"unknown correction {method!r}", hint="use holm or bh")
    out = np.empty(m)
    out[order] = adj
    return out


def _split(scores: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(ordinary rows, over-triggering rows or None): over-triggering rows carry a non-null `needless`."""
    if "needless" not in scores.columns:
        return scores, None
    over = scores.filter(pl.col("needless").is_not_null())
    return scores.filter(pl.col("needless").is_null()), (over if over.height else None)


def _paired(scores: pl.DataFrame, a: str, b: str, axis: str, conf: float) -> PairedResult:
    """`paired.compare` with arms as the compared value (cells are variant × model)."""
    frame = scores.with_columns(plugin_hash=pl.col("arm"))
    return compare(frame, a, b, by="plugin_hash", axis=cast(Axis, axis), conf=conf)


@dataclass(frozen=True)
class ArmComparison:
    """One candidate against the baseline (candidate − baseline)."""

    baseline: str
    candidate: str
    passed: PairedResult
    needless: PairedResult | None  # over-triggering scenarios; None when the grid has none
    p_adjusted: float
    decision: str  # 'better', 'worse', 'not shown'


@dataclass(frozen=True)
class Comparison:
    """Every candidate against the baseline, with the correction used."""

    baseline: str
    candidates: list[str]
    correction: str
    conf: float
    results: list[ArmComparison]
    side_by_side: pl.DataFrame = field(repr=False)

    def table(self) -> pl.DataFrame:
        """One row per candidate: pass difference and interval, p (raw, adjusted), needless difference, decision."""
        rows = []
        for r in self.results:
            p, n = r.passed, r.needless
            rows.append(
                {
                    "candidate": r.candidate, "baseline": r.baseline, "n_pairs": p.n_pairs,
                    "pass_baseline": p.mean_a, "pass_candidate": p.mean_b, "diff": p.diff, "lo": p.lo, "hi": p.hi,
                    "p_value": p.p_value, "p_adjusted": r.p_adjusted,
                    "needless_baseline": n.mean_a if n else None, "needless_candidate": n.mean_b if n else None,
                    "needless_diff": n.diff if n else None, "needless_lo": n.lo if n else None,
                    "needless_hi": n.hi if n else None, "decision": r.decision,
                }
            )  # fmt: skip
        return pl.DataFrame(rows, infer_schema_length=None).with_columns(pl.col(pl.Float64).fill_nan(None))

    def to_json(self) -> dict[str, Any]:
        """Everything `evalb compare --json` writes."""
        return {
            "baseline": self.baseline,
            "candidates": self.candidates,
            "correction": self.correction,
            "conf": self.conf,
            "comparisons": self.table().to_dicts(),
            "per_scenario": self.side_by_side.with_columns(pl.col(pl.Float64).fill_nan(None)).to_dicts(),
        }

    def text(self) -> str:
        """The table and one decision line per candidate, as `evalb compare` prints them."""
        lines = [
            f"baseline: {self.baseline} · candidates: {', '.join(self.candidates)} · "
            f"{round(self.conf * 100)}% intervals · correction: {self.correction} "
            f"({'familywise error' if self.correction == 'holm' else 'false discovery rate'})",
            "",
            f"{'candidate':<16} {'pairs':>5} {'base':>6} {'cand':>6} {'diff':>7} {'interval':>17} "
            f"{'p':>7} {'p adj':>7}  {'needless Δ':>10} {'interval':>17}  decision",
        ]
        for row in self.table().iter_rows(named=True):
            nd = row["needless_diff"]
            lines.append(
                f"{row['candidate'][:16]:<16} {row['n_pairs']:>5} {_f(row['pass_baseline'])} "
                f"{_f(row['pass_candidate'])} {_f(row['diff'], 7, True)} {_iv(row['lo'], row['hi'])} "
                f"{_f(row['p_value'], 7, p=True)} {_f(row['p_adjusted'], 7, p=True)}  "
                f"{_f(nd, 10, True) if nd is not None else '         —'} "
                f"{_iv(row['needless_lo'], row['needless_hi']) if nd is not None else '                —'}  "
                f"{row['decision']}"
            )
        lines.append("")
        for r in self.results:
            lines.append(f"{r.candidate} vs {r.baseline}: {r.decision}{_why(r, self.conf)}")
        if all(r.needless is None for r in self.results):
            lines.append("needless: no over-triggering scenarios in this grid")
        return "\n".join(lines) + "\n"


def _f(v: float | None, width: int = 6, sign: bool = False, p: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—".rjust(width)
    if p and v < 0.001:
        return "<0.001".rjust(width)
    return f"{v:+.3f}".rjust(width) if sign else f"{v:.3f}".rjust(width)


def _iv(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "—".rjust(17)
    return f"[{lo:+.3f}, {hi:+.3f}]".rjust(17)


def _why(r: ArmComparison, conf: float) -> str:
    p = r.passed
    if p.n_pairs < 2:
        return f" (only {p.n_pairs} scenario(s) ran by both arms; a paired comparison needs 2)"
    alpha = 1 - conf
    if r.decision == "not shown":
        return f" (adjusted p {r.p_adjusted:.3f} > {alpha:.2f}; a difference is not shown, not ruled out)"
    more = ""
    if r.needless is not None and r.needless.n_pairs >= 2 and r.needless.lo > 0:
        more = "; but it also raises needless ADR use on the over-triggering scenarios"
    q = "< 0.001" if r.p_adjusted < 0.001 else f"{r.p_adjusted:.3f} ≤ {alpha:.2f}"
    return f" (pass rate {p.diff:+.3f}, adjusted p {q}{more})"


def side_by_side(scores: pl.DataFrame, arms: Sequence[str], conf: float = 0.95) -> pl.DataFrame:
    """Per scenario (variant × model) and arm: valid reps, passes, rate and Wilson interval; the
    `needless` rate on over-triggering scenarios (kind = 'over-triggering')."""
    df = with_arm(scores).filter(pl.col("arm").is_in(list(arms)))
    if "primary" in df.columns:
        df = df.filter(pl.col("primary"))
    valid = pl.col("valid").fill_null(False)
    has_needless = "needless" in df.columns
    over = pl.col("needless").is_not_null() if has_needless else pl.lit(False)
    metric = (
        pl.when(over).then(pl.col("needless")).otherwise(pl.col("passed"))
        if has_needless
        else pl.col("passed")
    )
    cells = (
        df.with_columns(kind=pl.when(over).then(pl.lit("over-triggering")).otherwise(pl.lit("ordinary")))
        .group_by("kind", "variant", "model_alias", "arm")
        .agg(n=valid.sum().cast(pl.Int64), k=(metric.fill_null(False) & valid).sum().cast(pl.Int64))
        .sort("kind", "variant", "model_alias", "arm")
    )
    lo, hi = proportion_interval(cells["k"].to_numpy(), cells["n"].to_numpy(), conf)
    n = cells["n"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(n > 0, cells["k"].to_numpy() / n, np.nan)
    return cells.with_columns(
        metric=pl.when(pl.col("kind") == "over-triggering")
        .then(pl.lit("needless"))
        .otherwise(pl.lit("passed")),
        rate=pl.Series(rate),
        lo=pl.Series(lo),
        hi=pl.Series(hi),
    ).with_columns(pl.col(pl.Float64).fill_nan(None))


def compare_arms(
    scores: pl.DataFrame,
    baseline: str | None = None,
    arms: Sequence[str] | None = None,
    correction: Correction = "holm",
    conf: float = 0.95,
) -> Comparison:
    """Each candidate arm against the baseline: pass difference, needless difference, decision."""
    if correction not in CORRECTIONS:
        raise UsageError(f"unknown correction {correction!r}", hint="use holm or bh")
    if not 0 < conf < 1:
        raise UsageError(f"--conf {conf} is not between 0 and 1", hint="e.g. --conf 0.95")
    frame = with_arm(scores if "primary" in scores.columns else check_columns(scores))
    base, candidates = resolve_arms(frame, baseline, arms)
    ordinary, over = _split(frame)
    passed = [_paired(ordinary, base, c, "passed", conf) for c in candidates]
    needless = [(_paired(over, base, c, "needless", conf) if over is not None else None) for c in candidates]
    needless = [n if n is not None and n.n_pairs > 0 else None for n in needless]
    adj = adjust([r.p_value for r in passed], correction)
    alpha = 1 - conf
    results = []
    for c, p, n, q in zip(candidates, passed, needless, adj, strict=True):
        decision = "not shown"
        if p.n_pairs >= 2 and q <= alpha and not math.isnan(p.diff) and p.diff != 0:
            decision = "better" if p.diff > 0 else "worse"
        results.append(ArmComparison(base, c, p, n, float(q), decision))
    return Comparison(
        base, candidates, correction, conf, results, side_by_side(frame, [base, *candidates], conf)
    )


def write_json(result: Comparison, path: Path | str) -> None:
    """Write `result.to_json()` to `path`."""
    Path(path).write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
