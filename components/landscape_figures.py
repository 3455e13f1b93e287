"""Pure figure builders of the 2-D landscape page (DataFrames in, plotly figures out).

Trajectory tables are long: columns optimizer, step, x, y, loss (`teaching.landscape.run`).
Grids: columns x, y, z, level (`teaching.landscape.grid`), row-major with x varying fastest.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

PALETTE = qualitative.D3


def colors(labels: Sequence[str]) -> dict[str, str]:
    """A stable colour per optimizer label (in the given order)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


PLAYBACK_FRAMES = 40  # frames of the in-browser replay (a frame every steps/40 steps)
PLAYBACK_POINTS = 250  # at most this many points per path in a frame (keeps the figure small)


def add_playback(fig: go.Figure, trajectories: pd.DataFrame, labels: Sequence[str],
                 frames: int = PLAYBACK_FRAMES) -> None:
    """Plotly animation frames replaying every path from step 0 to the last step.

    Frame k holds, for each optimizer, its path up to step `s_k` (thinned to at most
    `PLAYBACK_POINTS` points, the end point kept) and its marker at `s_k`, for `frames` steps
    `s_k` evenly spaced from 0 to the last step; the Play button always starts from step 0,
    so replaying works wherever the page's own step slider stands.
    """
    last = int(trajectories["step"].max())
    stops = sorted({int(round(v)) for v in np.linspace(0, last, frames)})
    by_label = {label: trajectories[trajectories["optimizer"] == label].sort_values("step")
                for label in labels}
    indices = [1 + 2 * i + j for i in range(len(labels)) for j in (0, 1)]
    built = []
    for stop in stops:
        data = []
        for label in labels:
            path = by_label[label][by_label[label]["step"] <= stop]
            thin = path.iloc[np.unique(np.r_[np.linspace(0, len(path) - 1,
                                                         min(len(path), PLAYBACK_POINTS))
                                             .astype(int), len(path) - 1])]
            # plain dicts: the Frame validates them once (a go.Scatter would be validated twice)
            data.append({"type": "scatter", "x": thin["x"].to_numpy(), "y": thin["y"].to_numpy()})
            data.append({"type": "scatter", "x": [path["x"].iloc[-1]],
                         "y": [path["y"].iloc[-1]], "name": f"{label} @ {stop}"})
        built.append(go.Frame(data=data, traces=indices, name=str(stop)))
    fig.frames = built
    play = {"frame": {"duration": 80, "redraw": False}, "fromcurrent": False,
            "transition": {"duration": 0}}
    fig.update_layout(
        # the buttons top right (the title is top left), the replay slider under the plot and
        # the legend under the slider, with the room for both (a narrow column overlapped them)
        updatemenus=[{"type": "buttons", "direction": "left", "x": 1.0, "y": 1.0,
                      "xanchor": "right", "yanchor": "bottom", "pad": {"b": 4},
                      "buttons": [{"label": "▶ Play from 0", "method": "animate",
                                   "args": [None, play]},
                                  {"label": "❚❚", "method": "animate",
                                   "args": [[None], {"mode": "immediate",
                                                     "frame": {"duration": 0}}]}]}],
        sliders=[{"active": len(stops) - 1, "x": 0.0, "len": 1.0, "y": -0.02,
                  "currentvalue": {"prefix": "replay step "}, "pad": {"t": 30},
                  "steps": [{"label": str(stop), "method": "animate",
                             "args": [[str(stop)], {"mode": "immediate",
                                                    "frame": {"duration": 0, "redraw": False}}]}
                            for stop in stops]}],
        margin={"l": 10, "r": 10, "t": 40, "b": 150}, height=(fig.layout.height or 520) + 110,
        legend={"orientation": "h", "yanchor": "top", "y": -0.4, "xanchor": "left", "x": 0.0})


def contour_figure(
    grid: pd.DataFrame,
    trajectories: pd.DataFrame,
    step: int,
    minima: Sequence[tuple[float, float]] = (),
    title: str = "",
    log_levels: bool = False,
    uirevision: Hashable = "landscape",
    height: int = 520,
    frames: int = PLAYBACK_FRAMES,
) -> go.Figure:
    """Contours of f with every optimizer's path from step 0 to `step` and its current point.

    Traces, in order: the contour; per optimizer a line+markers path (name = label) and a big
    marker at `step` (name = "<label> @ step"); the start point; one star per known minimum.
    With `frames` > 1 the figure also carries a playback (`add_playback`): a Play button and a
    step slider that replay every path from step 0 in the browser, with no rerun.
    """
    xs = np.unique(grid["x"].to_numpy())
    ys = np.unique(grid["y"].to_numpy())
    z = grid["level"].to_numpy().reshape(len(ys), len(xs))
    fig = go.Figure(go.Contour(
        x=xs, y=ys, z=z, ncontours=30, colorscale="Viridis", showscale=True, opacity=0.85,
        name="f", hoverinfo="skip",
        colorbar={"title": {"text": "log10(1+f-f*)" if log_levels else "f"}, "len": 0.8},
        contours={"coloring": "heatmap", "showlines": True},
        line={"width": 0.5},
    ))
    labels = list(dict.fromkeys(trajectories["optimizer"])) if not trajectories.empty else []
    palette = colors(labels)
    for label in labels:
        path = trajectories[(trajectories["optimizer"] == label) & (trajectories["step"] <= step)]
        fig.add_trace(go.Scatter(
            x=path["x"], y=path["y"], mode="lines", name=label, legendgroup=label,
            line={"color": palette[label], "width": 2},
            hovertemplate=f"{label}<br>x=%{{x:.4f}}<br>y=%{{y:.4f}}<extra></extra>",
        ))
        if not path.empty:
            last = path.iloc[-1]
            fig.add_trace(go.Scatter(
                x=[last["x"]], y=[last["y"]], mode="markers", name=f"{label} @ {int(last['step'])}",
                legendgroup=label, showlegend=False,
                marker={"color": palette[label], "size": 12, "line": {"color": "white", "width": 2}},
                hovertemplate=f"{label} step {int(last['step'])}<br>loss {last['loss']:.4g}<extra></extra>",
            ))
    if labels:
        first = trajectories[trajectories["step"] == 0].iloc[0]
        fig.add_trace(go.Scatter(x=[first["x"]], y=[first["y"]], mode="markers", name="start",
                                 marker={"symbol": "circle-open", "size": 14, "color": "black"}))
    if minima:
        fig.add_trace(go.Scatter(
            x=[m[0] for m in minima], y=[m[1] for m in minima], mode="markers", name="minimum",
            marker={"symbol": "star", "size": 16, "color": "gold", "line": {"color": "black", "width": 1}},
        ))
    fig.update_layout(
        title={"text": title, "x": 0.0}, height=height, uirevision=uirevision,
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        xaxis={"range": [xs[0], xs[-1]], "title": "x"},
        yaxis={"range": [ys[0], ys[-1]], "title": "y"},
        legend={"orientation": "h", "yanchor": "top", "y": -0.17, "xanchor": "left", "x": 0.0},
    )
    if labels and frames > 1:  # after the layout: the playback moves the legend down
        add_playback(fig, trajectories, labels, frames)
    return fig


def loss_figure(
    trajectories: pd.DataFrame, step: int, f_min: float = 0.0, log_y: bool = True,
    uirevision: Hashable = "landscape-loss", height: int = 520,
) -> go.Figure:
    """f - f_min against the step for every optimizer, with a vertical line at `step`.

    One line per optimizer (name = label); y is `loss - f_min` (log axis when `log_y`;
    values <= 0 are clipped to 1e-12 so they stay drawable).
    """
    fig = go.Figure()
    labels = list(dict.fromkeys(trajectories["optimizer"])) if not trajectories.empty else []
    palette = colors(labels)
    for label in labels:
        rows = trajectories[trajectories["optimizer"] == label]
        gap = rows["loss"].to_numpy() - f_min
        if log_y:
            gap = np.clip(gap, 1e-12, None)
        fig.add_trace(go.Scatter(x=rows["step"], y=gap, mode="lines", name=label,
                                 line={"color": palette[label]}))
    fig.add_vline(x=step, line={"color": "grey", "dash": "dot"})
    fig.update_layout(
        title={"text": "f - f* against step", "x": 0.0}, height=height, uirevision=uirevision,
        margin={"l": 10, "r": 10, "t": 40, "b": 40}, hovermode="x unified",
        xaxis={"title": "step"}, yaxis={"title": "f - f*", "type": "log" if log_y else "linear"},
        legend={"orientation": "h", "yanchor": "top", "y": -0.17, "xanchor": "left", "x": 0.0},
    )
    return fig


def tuning_figure(table: pd.DataFrame, height: int = 300) -> go.Figure:
    """Score (mean loss over the last 10% of steps) against the learning rate, log-log; the best
    value of each optimizer is a diamond (trace name "<label> best")."""
    fig = go.Figure()
    labels = list(dict.fromkeys(table["optimizer"])) if not table.empty else []
    palette = colors(labels)
    for label in labels:
        rows = table[table["optimizer"] == label]
        score = np.clip(rows["score"].replace(np.inf, np.nan).to_numpy(dtype=float), 1e-12, None)
        fig.add_trace(go.Scatter(x=rows["learning_rate"], y=score, mode="lines+markers",
                                 name=label, line={"color": palette[label]}))
        best = rows[rows["best"]]
        fig.add_trace(go.Scatter(x=best["learning_rate"], y=np.clip(best["score"], 1e-12, None),
                                 mode="markers", name=f"{label} best", showlegend=False,
                                 marker={"symbol": "diamond", "size": 12, "color": palette[label]}))
    fig.update_layout(
        title={"text": "learning-rate search (diverged = missing)", "x": 0.0}, height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        xaxis={"type": "log", "title": "learning_rate"}, yaxis={"type": "log", "title": "score"},
    )
    return fig


__all__ = ["colors", "contour_figure", "loss_figure", "tuning_figure"]
