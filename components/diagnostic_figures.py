"""Pure figure builders of the learning-rate range test and the landscape along the path
(DataFrames in, plotly Figures out; no Streamlit, tested in tests/test_lr_range_views.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine import lr_range

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
MARKS = (  # RangeResult field, label, colour
    ("steepest", "steepest descent", "#2ca02c"),
    ("divergence", "divergence point 2/λ", "#d62728"),
    ("blowup", "blow-up", "#7f7f7f"),
)


def lr_range_figure(rows: pd.DataFrame, result: lr_range.RangeResult,
                    title: str = "learning-rate range test") -> go.Figure:
    """The loss (faint) and its smoothed curve against the learning rate (log x), with the
    marks of `result` as vertical lines.

    Args:
        rows: `learning_rate, loss` of one sweep, by step (loss NaN/None: not finite).
        result: `engine.lr_range.analyse` of the same rows.
    """
    fig = go.Figure()
    finite = rows[rows["loss"].notna() & np.isfinite(rows["loss"].astype(float))]
    if not finite.empty:
        fig.add_trace(go.Scatter(x=finite["learning_rate"], y=finite["loss"], mode="lines",
                                 name="loss", line={"color": "#aec7e8", "width": 1}))
        fig.add_trace(go.Scatter(x=finite["learning_rate"],
                                 y=lr_range.smooth(finite["loss"].tolist()), mode="lines",
                                 name=f"smoothed (β = {lr_range.SMOOTHING})",
                                 line={"color": COLORS[0], "width": 2}))
    low, top = 0.0, 1.0
    if not finite.empty:  # a blow-up would squash the curve: show up to 3x the start
        top = float(np.nanmax(finite["loss"].iloc[:max(3, len(finite) // 10)])) * 3
        low = float(np.nanmin(finite["loss"]))
        low = max(0.0, low - 0.05 * (top - low))
        fig.update_yaxes(range=[low, top])
    # the marks as traces in data coordinates: a shape's x on a log axis is read in log10
    # units by the browser but in data units by plotly.py's add_vline, so lines and their
    # labels landed apart
    for field, label, color in MARKS:
        value = getattr(result, field)
        if value is not None:
            fig.add_trace(go.Scatter(x=[value, value], y=[low, top], mode="lines+text",
                                     name=f"{label} {value:.3g}", text=["", f"{value:.3g}"],
                                     textposition="bottom left",
                                     line={"color": color, "dash": "dash"}))
    fig.update_xaxes(type="log", title="learning rate (log)")
    fig.update_yaxes(title="training loss (nats)")
    fig.update_layout(title=title, height=380, margin={"t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def landscape_figure(grid: pd.DataFrame, paths: Mapping[str, pd.DataFrame],
                     title: str = "loss on the plane through θ₀") -> go.Figure:
    """Contours of the grid (x, y, loss) with each run's projected path on top.

    Args:
        grid: `x, y, loss` rows (any order; cells not computed yet are left blank).
        paths: label -> that run's `path` rows (`step, x, y, loss`), by step.
    """
    fig = go.Figure()
    if not grid.empty:
        table = grid.pivot_table(index="y", columns="x", values="loss")
        fig.add_trace(go.Contour(x=table.columns.tolist(), y=table.index.tolist(),
                                 z=np.log10(table.to_numpy()), colorscale="Viridis",
                                 contours={"showlabels": True}, name="log10 loss",
                                 colorbar={"title": "log10 loss"}, ncontours=25))
    for index, (label, path) in enumerate(paths.items()):
        color = COLORS[index % len(COLORS)]
        fig.add_trace(go.Scatter(
            x=path["x"], y=path["y"], mode="lines+markers", name=label,
            line={"color": color, "width": 2}, marker={"size": 3},
            customdata=np.stack([path["step"], path["loss"]], axis=-1),
            hovertemplate="step %{customdata[0]}<br>x %{x:.4f}, y %{y:.4f}"
                          "<br>loss at the real weights %{customdata[1]:.4f}<extra></extra>"))
        if len(path):
            fig.add_trace(go.Scatter(x=[path["x"].iloc[-1]], y=[path["y"].iloc[-1]],
                                     mode="markers", marker={"color": color, "size": 10,
                                                             "symbol": "x"},
                                     showlegend=False, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[0], y=[0], mode="markers", name="θ₀ (start)",
                             marker={"color": "white", "size": 10, "line": {"width": 2}}))
    fig.update_layout(title=title, height=480, xaxis_title="x (along d₁)",
                      yaxis_title="y (along d₂)", legend={"orientation": "h", "y": -0.2})
    return fig


def path_zoom_figure(paths: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Each run's projected path alone, on its own scale (the plane's grid spans +-1, the paths
    often a few hundredths of it)."""
    fig = go.Figure()
    for index, (label, path) in enumerate(paths.items()):
        fig.add_trace(go.Scatter(x=path["x"], y=path["y"], mode="lines+markers", name=label,
                                 line={"color": COLORS[index % len(COLORS)]},
                                 marker={"size": 3}))
    fig.update_layout(title="the projected paths, zoomed", height=320,
                      xaxis_title="x", yaxis_title="y", yaxis={"scaleanchor": "x"})
    return fig


def line_figure(lines: Mapping[str, pd.DataFrame]) -> go.Figure:
    """The 1-D interpolation L(θ₀ + t (θ_T − θ₀)) of each run (Goodfellow et al. 2015).

    Args:
        lines: label -> `x` (= t), `loss` rows of one end point.
    """
    fig = go.Figure()
    for index, (label, line) in enumerate(lines.items()):
        fig.add_trace(go.Scatter(x=line["x"], y=line["loss"], mode="lines+markers", name=label,
                                 line={"color": COLORS[index % len(COLORS)]}))
    for t in (0.0, 1.0):
        fig.add_vline(x=t, line={"color": "#999", "dash": "dot"},
                      annotation_text="θ₀" if t == 0 else "θ_T")
    fig.update_layout(title="straight line from the start to the end point", height=320,
                      xaxis_title="t", yaxis_title="training loss (nats)",
                      yaxis_type="log", legend={"orientation": "h", "y": -0.3})
    return fig
