"""Pure builders of the class board: DataFrames of `runs.service.challenge_board.Board` in,
a plotly `go.Figure` or a display DataFrame out; no Streamlit.

Every name a student typed (the nickname) goes through `components.figures.plain` before it
enters a figure: plotly renders a subset of HTML in trace names, hover text and axis labels.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from components.figures import _finish, plain

PINNED_WIDTH, OTHER_WIDTH = 4.0, 1.2  # px: a pinned run's curve stands out of the class's
PINNED_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
OTHER_COLOR = "rgba(120, 120, 140, 0.45)"
MISSING = "none"  # the parallel-coordinates tick of a hyperparameter a run's optimizer lacks


def run_label(nickname: object, run_id: int) -> str:
    """`"<nickname> #<run>"` escaped for plotly (`plain`)."""
    return plain(f"{nickname} #{int(run_id)}")


def loss_overlay_figure(curves: pd.DataFrame, labels: Mapping[int, str],
                        pinned: Collection[int] = (), name: str = "train_loss",
                        uirevision: Hashable = "board", height: int = 380) -> go.Figure:
    """Every run's `name` curve on one chart; pinned runs thick and coloured, drawn last (on
    top), the others thin and grey.

    Args:
        curves: long table `run_id, step, name, value` (steps: optimizer steps; loss: nats).
        labels: run id -> legend text (already escaped, `run_label`); runs without a label
            are not drawn.
        pinned: run ids to highlight.

    Returns:
        One `go.Scatter` trace (SVG: drawn without WebGL) per run that has points, unpinned
        runs first (in `labels` order) then pinned ones; `line.width` `PINNED_WIDTH` or
        `OTHER_WIDTH`.
    """
    fig = go.Figure()
    rows = curves[curves["name"] == name]
    pinned = set(int(i) for i in pinned)
    order = [i for i in labels if i not in pinned] + [i for i in labels if i in pinned]
    colors = iter(PINNED_COLORS * (len(pinned) // len(PINNED_COLORS) + 1))
    for run_id in order:
        series = rows[rows["run_id"] == run_id].sort_values("step")
        if series.empty:
            continue
        top = run_id in pinned
        fig.add_trace(go.Scatter(
            x=series["step"].to_numpy(), y=series["value"].to_numpy(), mode="lines",
            name=labels[run_id], showlegend=top, legendgroup="pinned" if top else "class",
            line={"width": PINNED_WIDTH if top else OTHER_WIDTH,
                  "color": next(colors) if top else OTHER_COLOR},
            hovertemplate=f"{labels[run_id]}<br>step %{{x}}<br>{plain(name)} %{{y:.4f}}"
                          "<extra></extra>"))
    fig = _finish(fig, uirevision, f"{name} of every run ({len(fig.data)}), pinned runs "
                                   "highlighted", height)
    fig.update_layout(hovermode="closest", xaxis_title="step", yaxis_title=f"{name} (nats)")
    return fig


def _axis(values: np.ndarray, label: str, log: bool = False, missing: str = MISSING) -> dict:
    """One parallel-coordinates dimension; a run without a value (NaN) is put just below the
    axis's range and the tick there reads `missing`. {} when no run has a value."""
    shown = np.log10(values) if log else values.astype(float)
    finite = shown[np.isfinite(shown)]
    if finite.size == 0:
        return {}
    low, high = float(finite.min()), float(finite.max())
    span = (high - low) or max(abs(high), 1.0)
    out: dict = {"label": plain(f"log10 {label}" if log else label),
                 "values": np.where(np.isfinite(shown), shown, low - 0.15 * span)}
    if not np.isfinite(shown).all():
        ticks = np.linspace(low, high, 4) if high > low else np.array([low])
        out["range"] = [low - 0.15 * span, high + 0.02 * span]
        out["tickvals"] = [low - 0.15 * span, *ticks]
        out["ticktext"] = [missing, *(f"{t:.3g}" for t in ticks)]
    return out


def parcoords_figure(runs: pd.DataFrame, hypers: Sequence[str], score_label: str,
                     log_hypers: Collection[str] = (), now_column: str = "val_loss",
                     now_label: str = "val loss now (nats)", higher_is_better: bool = False,
                     uirevision: Hashable = "board", height: int = 380) -> go.Figure:
    """Each run as one line across its hyperparameters (as it trains now), its validation
    metric now and its score (`go.Parcoords`): the landscape of the class's sweep, live. The
    line colour is the metric now (dark = better).

    Args:
        runs: `Board.runs`: `run_id`, `optimizer`, `score`, `now_column` and one column per
            name of `hypers`.
        hypers: the hyperparameter columns, in axis order.
        score_label: the score axis's title (units included, e.g. "val loss at step 2000").
        log_hypers: names drawn as log10 (learning rates, epsilons: their specs' log scale).
        now_column, now_label: the live metric (`val_loss` in nats, or `val_accuracy`).
        higher_is_better: True for accuracy (the colour scale is reversed).

    Returns:
        One `go.Parcoords` over the runs that have validated at least once (an `optimizer`
        axis first when they use more than one; on the score axis a run without a score yet
        sits at the `not yet` tick below the range, and the axis is left out while no run has
        a score); no trace and a "waiting for data..." note when no run has validated.
    """
    now_all = runs[now_column].to_numpy(dtype=float)
    seen = runs[np.isfinite(now_all) | np.isfinite(runs["score"].to_numpy(dtype=float))]
    fig = go.Figure()
    if not seen.empty:
        dims = []
        optimizers = sorted(set(seen["optimizer"]))
        if len(optimizers) > 1:
            codes = seen["optimizer"].map({n: i for i, n in enumerate(optimizers)})
            dims.append({"label": "optimizer", "values": codes.to_numpy(dtype=float),
                         "tickvals": list(range(len(optimizers))),
                         "ticktext": [plain(n) for n in optimizers]})
        for name in hypers:
            axis = _axis(seen[name].to_numpy(dtype=float), name, name in log_hypers)
            if axis:
                dims.append(axis)
        now = seen[now_column].to_numpy(dtype=float)
        dims.append(_axis(now, now_label))
        score = _axis(seen["score"].to_numpy(dtype=float), score_label, missing="not yet")
        if score:
            dims.append(score)
        worst = float(np.nanmax(now)) if np.isfinite(now).any() else 0.0
        fig.add_trace(go.Parcoords(
            dimensions=[d for d in dims if d],
            line={"color": np.where(np.isfinite(now), now, worst), "colorscale": "Viridis",
                  "reversescale": higher_is_better, "showscale": True,
                  "colorbar": {"title": {"text": plain(now_label)}}}))
    scored = int(np.isfinite(runs["score"].to_numpy(dtype=float)).sum())
    title = f"hyperparameters against the score ({scored} of {len(runs)} runs scored)"
    fig = _finish(fig, uirevision, title, height)
    fig.update_layout(margin={"l": 60, "r": 40, "t": 80, "b": 30})
    return fig


def leaderboard_frame(runs: pd.DataFrame, hypers: Sequence[str]) -> pd.DataFrame:
    """The leaderboard as shown: `rank` (Int64, <NA> without a score), `nickname`, `run`,
    `optimizer`, the hyperparameters, `score`, `val loss now`, `val acc now`, `step`,
    `status`, `pinned` (bool). Order kept (best first). Text cells are plain text (the
    data table does not render markup)."""
    out = pd.DataFrame({
        "rank": pd.array([None if not math.isfinite(r) else int(r)
                          for r in runs["rank"].to_numpy(dtype=float)], dtype="Int64"),
        "nickname": runs["nickname"].astype(str),
        "run": runs["run_id"].astype(int),
        "optimizer": runs["optimizer"],
    })
    for name in hypers:
        out[name] = runs[name].to_numpy(dtype=float)
    out["score"] = runs["score"].to_numpy(dtype=float)
    out["val loss now"] = runs["val_loss"].to_numpy(dtype=float)
    out["val acc now"] = runs["val_accuracy"].to_numpy(dtype=float)
    out["step"] = runs["step"].astype(int).to_numpy()
    out["status"] = runs["status"].to_numpy()
    out["pinned"] = runs["pinned"].astype(bool).to_numpy()
    return out
