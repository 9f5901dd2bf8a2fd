"""The comparison view's figures (report and notebook): arms side by side per scenario, and the
sequential path of the confidence sequence (its width against reps, in recording order)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from analysis.compare import Comparison
from analysis.sequential import SequentialDecision

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def arms_figure(result: Comparison) -> go.Figure:
    """Per scenario (variant · model): each arm's rate with its Wilson interval, side by side;
    over-triggering scenarios show the needless rate (lower is better)."""
    sbs = result.side_by_side.with_columns(
        label=pl.col("variant")
        + " · "
        + pl.col("model_alias")
        + pl.when(pl.col("kind") == "over-triggering").then(pl.lit(" (needless)")).otherwise(pl.lit(""))
    )
    fig = go.Figure()
    for i, arm in enumerate([result.baseline, *result.candidates]):
        part = sbs.filter(pl.col("arm") == arm)
        fig.add_trace(
            go.Scatter(
                x=part["label"],
                y=part["rate"],
                mode="markers",
                name=arm,
                marker={"size": 9, "color": _COLOURS[i % len(_COLOURS)]},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (part["hi"] - part["rate"]).fill_null(0),
                    "arrayminus": (part["rate"] - part["lo"]).fill_null(0),
                },
                offsetgroup=str(i),
                customdata=part.select("k", "n").to_numpy(),
                hovertemplate="%{x}<br>"
                + arm
                + ": %{y:.2f} (%{customdata[0]}/%{customdata[1]})<extra></extra>",
            )
        )
    fig.update_layout(
        title={"text": "Arms side by side (95% Wilson intervals)", "font": {"size": 14}},
        yaxis={"range": [-0.05, 1.05], "title": "pass rate (needless rate on over-triggering scenarios)"},
        scattermode="group",
        height=380,
        margin={"t": 50, "b": 90},
    )
    return fig


def path_figure(decision: SequentialDecision, a: str, b: str) -> go.Figure:
    """The confidence sequence for B − A after each pair (x: pairs per cell), its width, and 0."""
    p = decision.path
    fig = go.Figure(
        [
            go.Scatter(x=p["reps"], y=p["hi"], mode="lines", line={"width": 0}, showlegend=False),
            go.Scatter(
                x=p["reps"], y=p["lo"], mode="lines", fill="tonexty", line={"width": 0},
                fillcolor="rgba(31,119,180,0.25)", name="confidence sequence",
            ),
            go.Scatter(x=p["reps"], y=p["estimate"], mode="lines", name="mean difference", line={"color": "#1f77b4"}),
            go.Scatter(x=p["reps"], y=p["width"], mode="lines", name="width", line={"dash": "dot", "color": "#555"}),
        ]
    )  # fmt: skip
    fig.add_hline(y=0, line={"color": "#999", "width": 1})
    fig.update_layout(
        title={
            "text": f"Sequential path: {b} − {a}: {decision.direction} after {decision.reps_used:.1f} reps/cell"
            f"<br><sub>{round((1 - decision.alpha) * 100)}% confidence sequence now "
            f"[{decision.lo:+.3f}, {decision.hi:+.3f}] · {decision.n_pairs} pairs in {decision.n_cells} cells</sub>",
            "font": {"size": 14},
        },
        xaxis={"title": "pairs per cell (recording order)"},
        yaxis={"range": [-1.05, 1.05], "title": "pass-rate difference"},
        height=380,
    )
    return fig
