"""Plotly figures of the variance library: cell rates with intervals, rep outcomes grid, grid means,
paired scatter and power curves. The same figures show in notebooks and, via `figure_div`, in the
static report, which embeds plotly.js once inline (`plotly_js`) so the page works offline.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

from analysis.paired import PairedResult
from analysis.stats import _PREFIX

_AXIS_TITLE = {"passed": "pass rate (both axes)", "axis_a": "axis (a) rate", "axis_b": "axis (b) rate"}
_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def _arm_label(row: dict, several_plugins: bool) -> str:
    return f"{row['model_alias']} · {row['plugin_hash'][:8]}" if several_plugins else row["model_alias"]


def cell_rates_figure(cells: pl.DataFrame, axis: str = "passed", title: str | None = None) -> go.Figure:
    """Pass rate per cell as a dot with its interval, variants along x, one colour per model (× plugin)."""
    p = _PREFIX[axis]
    several = cells["plugin_hash"].n_unique() > 1
    variants = sorted(cells["variant"].unique().to_list(), key=lambda v: (v[0] != "W", v))
    pos = {v: i for i, v in enumerate(variants)}
    arms = (
        cells.select("model_alias", "plugin_hash")
        .unique()
        .sort(["model_alias", "plugin_hash"])
        .rows(named=True)
    )
    fig = go.Figure()
    width = 0.6 / max(1, len(arms))
    for j, arm in enumerate(arms):
        part = cells.filter(
            (pl.col("model_alias") == arm["model_alias"]) & (pl.col("plugin_hash") == arm["plugin_hash"])
        ).filter(pl.col(f"{p}rate").is_not_null())
        # Spread arms sideways within a variant so their intervals do not overlap.
        x = [pos[v] - 0.3 + width * (j + 0.5) for v in part["variant"]]
        rate, lo, hi = part[f"{p}rate"], part[f"{p}lo"], part[f"{p}hi"]
        hover = [
            f"{v}: {k}/{n} valid reps ({inv} invalid)<br>rate {r:.2f} [{a:.2f}, {b:.2f}]<br>{c}"
            for v, k, n, inv, r, a, b, c in zip(
                part["variant"], part[f"{p}passes"], part["n_valid"], part["n_invalid"],
                rate, lo, hi, part["klass"], strict=True,
            )
        ]  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rate,
                mode="markers",
                name=_arm_label(arm, several),
                marker={"size": 10},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (hi - rate).to_list(),
                    "arrayminus": (rate - lo).to_list(),
                },
                hovertext=hover,
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title=title or f"{_AXIS_TITLE[axis]} per cell, with 95% intervals",
        # a fixed range: the first variant keeps its tick even when no arm has a point there
        xaxis={
            "tickvals": list(pos.values()),
            "ticktext": variants,
            "title": "variant",
            "range": [-0.5, max(0, len(variants) - 1) + 0.5],
        },
        yaxis={"range": [-0.03, 1.03], "title": _AXIS_TITLE[axis]},
        **_LAYOUT,
    )
    return fig


def rep_grid_figure(scores: pl.DataFrame, title: str = "Every rep: pass, fail or invalid") -> go.Figure:
    """One row per cell, one column per rep: green PASS, red FAIL, grey INVALID, blank = not run."""
    several = scores["plugin_hash"].n_unique() > 1
    df = scores.with_columns(
        row=pl.concat_str(
            [pl.col("model_alias"), pl.col("plugin_hash").str.slice(0, 8)]
            if several
            else [pl.col("model_alias")],
            separator=" · ",
        )
        + " · "
        + pl.col("variant"),
        code=pl.when(pl.col("verdict") == "PASS")
        .then(2)
        .when(pl.col("verdict") == "FAIL")
        .then(1)
        .otherwise(0),
    ).sort(["model_alias", "plugin_hash", "variant", "rep"])
    rows = df["row"].unique(maintain_order=True).to_list()
    reps = sorted(df["rep"].unique().to_list())
    z = [[None] * len(reps) for _ in rows]
    text = [[""] * len(reps) for _ in rows]
    ri, ci = {r: i for i, r in enumerate(rows)}, {r: i for i, r in enumerate(reps)}
    for rec in df.select("row", "rep", "code", "verdict", "reasons", "run_id").iter_rows(named=True):
        i, j = ri[rec["row"]], ci[rec["rep"]]
        z[i][j] = rec["code"]
        text[i][j] = f"{rec['verdict']} — {rec['reasons']}<br>run {rec['run_id'][:12]}"
    scale = [
        [0, "#bdbdbd"],
        [0.33, "#bdbdbd"],
        [0.34, "#d7301f"],
        [0.66, "#d7301f"],
        [0.67, "#1a9850"],
        [1, "#1a9850"],
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"rep {r}" for r in reps],
            y=rows,
            zmin=0,
            zmax=2,
            colorscale=scale,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertext=text,
            hoverinfo="text",
        )
    )
    fig.update_layout(
        title=title + " (green PASS, red FAIL, grey INVALID)",
        height=max(300, 22 * len(rows) + 120),
        yaxis={"autorange": "reversed"},
        **_LAYOUT,
    )
    return fig


def grid_figure(
    grid: pl.DataFrame, title: str = "Grid pass rate (mean over scenarios), 95% interval"
) -> go.Figure:
    """Each model's (× plugin's) grid mean with its Miller interval, plus the clustered ±1.96·SE as a hint."""
    several = grid["plugin_hash"].n_unique() > 1
    labels = [_arm_label(r, several) for r in grid.rows(named=True)]
    fig = go.Figure(
        go.Scatter(
            x=grid["mean"],
            y=labels,
            mode="markers",
            marker={"size": 12},
            name="mean over scenarios",
            error_x={
                "type": "data",
                "symmetric": False,
                "array": (grid["hi"] - grid["mean"]).to_list(),
                "arrayminus": (grid["mean"] - grid["lo"]).to_list(),
            },
            hovertext=[
                f"{lab}: {m:.2f} ± SE {s:.3f} (clustered SE {c:.3f}; reps-only SE {r:.3f})"
                for lab, m, s, c, r in zip(
                    labels,
                    grid["mean"].fill_null(float("nan")),
                    grid["se"].fill_null(float("nan")),
                    grid["se_clustered"].fill_null(float("nan")),
                    grid["se_reps_only"].fill_null(float("nan")),
                    strict=True,
                )
            ],
            hoverinfo="text",
        )
    )
    fig.update_layout(
        title=title,
        xaxis={"range": [-0.03, 1.03], "title": "pass rate"},
        height=120 + 40 * len(labels),
        **_LAYOUT,
    )
    return fig


def paired_figure(result: PairedResult, context: str = "") -> go.Figure:
    """Per-scenario rate of arm A (x) against arm B (y); points above the diagonal favour B."""
    pp = result.per_pair
    label = pp["variant"] if "model_alias" not in pp.columns else pp["variant"] + " · " + pp["model_alias"]
    # Pass rates are coarse, so scenarios often share a point: one marker and one label per point.
    points = (
        pp.select("rate_a", "rate_b")
        .with_columns(label=label)
        .group_by("rate_a", "rate_b", maintain_order=True)
        .agg(pl.col("label").sort())
    )
    texts = [", ".join(ls) for ls in points["label"].to_list()]
    fig = go.Figure(
        [
            go.Scatter(
                x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "#999"}, showlegend=False
            ),
            go.Scatter(
                x=points["rate_a"],
                y=points["rate_b"],
                mode="markers+text",
                text=texts,
                # alternate above and below so labels of neighbouring points do not collide
                textposition=["top center" if i % 2 == 0 else "bottom center" for i in range(len(texts))],
                textfont={"size": 10},
                hovertext=texts,
                hoverinfo="text+x+y",
                marker={"size": [8 + 3 * len(ls) for ls in points["label"].to_list()]},
                showlegend=False,
            ),
        ]
    )
    fig.update_layout(
        title={
            "text": (f"{context}: " if context else "")
            + f"{result.b} − {result.a} = {result.diff:+.2f} [{result.lo:+.2f}, {result.hi:+.2f}]"
            + f"<br><sub>paired SE {result.se:.3f} · unpaired SE {result.se_unpaired:.3f} · "
            + f"corr {result.corr:.2f} · {result.n_pairs} scenarios</sub>",
            "font": {"size": 14},
        },
        xaxis={"range": [-0.05, 1.05], "title": f"{result.a} rate"},
        yaxis={"range": [-0.05, 1.05], "title": f"{result.b} rate"},
        height=500,
        width=620,
        **{**_LAYOUT, "margin": {"l": 60, "r": 20, "t": 80, "b": 50}},
    )
    return fig


def power_curve_figure(curve: pl.DataFrame, target: float = 0.8, title: str | None = None) -> go.Figure:
    """Power against reps per cell, one line per difference δ (from power.power_curve)."""
    fig = go.Figure()
    for delta in curve["delta"].unique().sort().to_list():
        part = curve.filter(pl.col("delta") == delta).sort("reps")
        fig.add_trace(
            go.Scatter(x=part["reps"], y=part["power"], mode="lines+markers", name=f"δ = {delta:.2f}")
        )
    fig.add_hline(y=target, line={"dash": "dash", "color": "#666"}, annotation_text=f"power {target:.0%}")
    fig.update_layout(
        title=title or "Power of the paired comparison vs reps per cell",
        xaxis={
            "title": "reps per cell (K)",
            "type": "log",
            "tickvals": (ks := sorted(set(curve["reps"].to_list()))),
            "ticktext": [str(k) for k in ks],
        },
        yaxis={"range": [0, 1.02], "title": "power"},
        **_LAYOUT,
    )
    return fig


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as an HTML <div> + script that expects plotly.js already on the page."""
    return pio.to_html(
        fig, full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False}
    )


def plotly_js() -> str:
    """The plotly.js bundle, to inline once in a static page (no CDN: the report must work offline)."""
    return get_plotlyjs()
