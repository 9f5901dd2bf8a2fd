"""The per-cell summary printed after a grid: pass rates with intervals, per axis, invalid runs apart."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.degradation import degradation_lines, degradation_table
from analysis.frames import CELL_KEYS, check_columns
from analysis.stats import PASS_K, cell_table, grid_table, needless_table
from evalb.archive import Archive


def _pct(v: float | None) -> str:
    return "   -" if v is None else f"{100 * v:3.0f}%"


def _interval(lo: float | None, hi: float | None) -> str:
    return "[   -,    -]" if lo is None or hi is None else f"[{100 * lo:3.0f}%, {100 * hi:3.0f}%]"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cell_counts(scores: pl.DataFrame) -> pl.DataFrame:
    """Per cell (variant × model × plugin, `CELL_KEYS`): runs, valid runs, passes, A and B passes,
    invalid runs. A score frame without plugin_hash counts as one plugin, "(none)"."""
    if "plugin_hash" not in scores.columns:
        scores = scores.with_columns(plugin_hash=pl.lit(None, dtype=pl.String))
    return (
        scores.with_columns(pl.col("plugin_hash").fill_null("(none)"))
        .group_by(*CELL_KEYS)
        .agg(
            runs=pl.len(),
            valid=pl.col("valid").sum(),
            passed=pl.col("passed").fill_null(False).sum(),
            a_pass=pl.col("axis_a").fill_null(False).sum(),
            b_pass=pl.col("axis_b").fill_null(False).sum(),
            invalid=(~pl.col("valid")).sum(),
        )
        .sort(*CELL_KEYS)
    )


def summary_text(archive: Archive | Path | str, conf: float = 0.95) -> str:
    """A fixed-width text table: one line per cell (variant × model × plugin, frames.CELL_KEYS),
    then Miller's grid mean per model × plugin."""
    arch = archive if isinstance(archive, Archive) else Archive.open(archive)
    scores = check_columns(arch.latest_scores())
    if scores.is_empty():
        return "no scored runs (run evalb-score first)\n"
    cells = cell_table(scores, conf=conf)
    vw = max(11, *(len(str(v)) for v in cells["variant"].to_list()))
    mw = max(22, *(len(str(m)) for m in cells["model_alias"].to_list()))
    pk = "".join(f" {'pass^' + str(k):>6}" for k in PASS_K)
    head = (
        f"{'variant':<{vw}} {'model':<{mw}} {'plugin':<8} {'valid':>5} {'inv':>3}  {'pass':>10} {'95% CI':>12}"
        f"{pk}  {'A':>4} {'B':>4}  class"
    )
    lines = [head, "-" * len(head)]
    for c in cells.iter_rows(named=True):
        lines.append(
            f"{c['variant']:<{vw}} {c['model_alias']:<{mw}} {str(c['plugin_hash'])[:8]:<8} {c['n_valid']:>5} "
            f"{c['n_invalid']:>3}  {c['passes']:>3}/{c['n_valid']:<2} {_pct(c['rate'])} {_interval(c['lo'], c['hi'])}"
            + "".join(f"   {_pct(c[f'pass^{k}'])}" for k in PASS_K)
            + f"  {_pct(c['a_rate'])} {_pct(c['b_rate'])}  {c['klass']}"
        )
    grid = grid_table(scores, conf=conf)
    lines.append("")
    lines.append("grid pass rate (primary variants; mean over scenarios of mean over reps, Miller 2024):")
    for g in grid.sort("model_alias").iter_rows(named=True):
        se = g["se"]
        se_txt = "n/a" if se is None else f"{100 * se:.1f} pts"
        if se is None:  # fewer than 2 scenarios with valid reps: no interval can be claimed
            g = {**g, "lo": None, "hi": None}
        lines.append(
            f"  {g['model_alias']:<{mw}} {str(g['plugin_hash'])[:8]:<8} {_pct(g['mean'])}  SE {se_txt}  "
            f"{int(conf * 100)}% CI {_interval(g['lo'], g['hi'])}  over {_plural(g['n_scenarios'], 'scenario')}, "
            f"{g['reps_mean'] or 0:.1f} valid reps each"
        )
    needless = needless_table(scores, conf=conf)
    if needless.height:
        lines.append("")
        lines.append(
            "needless rate (over-triggering scenarios O*: consulted docs/adr or proposed an ADR on a task "
            "that needs neither; not in the grid pass rate, lower is better):"
        )
        for g in needless.iter_rows(named=True):
            lines.append(
                f"  {g['model_alias']:<{mw}} {str(g['plugin_hash'])[:8]:<8} {_pct(g['rate'])}  "
                f"{g['needless']}/{g['n']} valid runs  {int(conf * 100)}% CI {_interval(g['lo'], g['hi'])}  "
                f"over {_plural(g['n_scenarios'], 'scenario')}; O pass {g['passes']}/{g['n']}"
            )
    degr = degradation_lines(degradation_table(scores))
    if degr:
        lines += ["", *degr]
    lines.append(
        "\npass^k = chance that k reps of a cell all pass, unbiased from c passes in n reps: C(c,k)/C(n,k) "
        "(blank when n < k)"
    )
    invalid = scores.filter(~pl.col("valid").fill_null(False))
    if invalid.height:
        lines.append(
            f"\n{_plural(invalid.height, 'invalid run')} excluded from every rate (see evalb-score for reasons)"
        )
    return "\n".join(lines) + "\n"
