"""The Slots view's figures: one optimizer slot's statistics over the steps, and a slot's (or a
variable's) value distribution as a heatmap on one grid of bins.

Pure builders like `components.figures` (DataFrames from the run store in, plotly `go.Figure`
out), sharing its layout (`_finish`) and escaping (`plain`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from components.figures import _finish, plain

# Steps (heatmap columns) of a distribution read from the store for one drawing.
HEATMAP_STEPS = 500
SLOT_STAT_ROWS = (("norm", "L2 norm"), ("mean", "mean"), ("std", "std"))
GRID_BINS = 64
# Slots drawn on a log axis by default: second moments and accumulators (positive, spanning
# decades; Adam's `v` is invisible on a linear axis beside `m`).
LOG_SLOTS = ("v", "vhat", "rms", "accumulator")


def default_log_slots(slots: Sequence[str]) -> list[str]:
    """The slots of `slots` drawn on a log axis unless the user says otherwise (`LOG_SLOTS`)."""
    return [slot for slot in slots if slot in LOG_SLOTS]


def slot_rows_figure(
    stats: pd.DataFrame, variable: str, log_slots: Sequence[str] = (),
    uirevision: Hashable = "slots", row_height: int = 170,
) -> go.Figure:
    """One subplot row per slot of `variable`: its L2 norm, mean and std over the steps, the
    row's y axis logarithmic for the slots in `log_slots` (non-positive values, e.g. a
    negative mean, are not drawn on a log axis: plotly drops them).

    Args:
        stats: `step, variable, slot, norm, mean, std` rows (`slot="update"` is the effective
            per-parameter step `var_before - var_after`).
        variable: the model variable whose slots are drawn.
        log_slots: slot names whose row has a log axis (see `default_log_slots`).
    """
    rows = stats[stats["variable"] == variable] if stats is not None and not stats.empty else None
    slots = [] if rows is None or rows.empty else list(dict.fromkeys(rows["slot"]))
    if not slots:
        return _finish(go.Figure(), uirevision, f"Slots of {variable}", row_height + 60)
    titles = [plain(f"{slot} (log axis)" if slot in log_slots else slot) for slot in slots]
    fig = make_subplots(rows=len(slots), cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=titles)
    colors = qualitative.Plotly
    for row, slot in enumerate(slots, start=1):
        part = rows[rows["slot"] == slot].sort_values("step", kind="stable")
        for index, (column, label) in enumerate(SLOT_STAT_ROWS):
            fig.add_trace(go.Scatter(
                x=part["step"].to_numpy(), y=part[column].to_numpy(float), name=label, mode="lines",
                legendgroup=label, showlegend=row == 1, line={"color": colors[index]},
                hovertemplate=f"{plain(slot)} {label}=%{{y:.4g}}<extra></extra>",
            ), row=row, col=1)
        fig.update_yaxes(type="log" if slot in log_slots else "linear", row=row, col=1)
    fig.update_xaxes(title_text="step", row=len(slots), col=1)
    return _finish(fig, uirevision, f"Slots of {variable}", row_height * len(slots) + 60)


def common_edges(histograms: pd.DataFrame, bins: int = GRID_BINS) -> np.ndarray:
    """`bins + 1` equal-width edges spanning every snapshot's `lo..hi` (widened when flat)."""
    lo, hi = float(histograms["lo"].min()), float(histograms["hi"].max())
    if not hi > lo:
        pad = max(abs(lo) * 1e-3, 1e-12)
        lo, hi = lo - pad, hi + pad
    return np.linspace(lo, hi, bins + 1)


def rebin(lo: float, hi: float, counts: list[int] | np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Spread one equal-width histogram (`counts` between `lo` and `hi`) onto `edges`.

    Each source bin's count is split over the target cells in proportion to their overlap
    (values are taken as uniform inside a bin), so the total count is conserved exactly up to
    rounding. A flat snapshot (`lo == hi`) puts everything into the cell holding `lo`.
    """
    counts = np.asarray(counts, dtype=float)
    cells = len(edges) - 1
    if not hi > lo:
        index = int(np.clip(np.searchsorted(edges, lo, side="right") - 1, 0, cells - 1))
        out = np.zeros(cells)
        out[index] = counts.sum()
        return out
    src = np.linspace(lo, hi, len(counts) + 1)
    left = np.maximum(src[:-1, None], edges[None, :-1])
    right = np.minimum(src[1:, None], edges[None, 1:])
    overlap = np.clip(right - left, 0.0, None) / (src[1:] - src[:-1])[:, None]
    overlap /= np.where(overlap.sum(axis=1, keepdims=True) > 0, overlap.sum(axis=1, keepdims=True), 1)
    return counts @ overlap


def distribution_matrix(histograms: pd.DataFrame, bins: int = GRID_BINS) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(steps, cell centres, z) with `z[cell, snapshot]` = count re-binned on a common grid."""
    edges = common_edges(histograms, bins)
    z = np.column_stack([
        rebin(lo, hi, counts, edges)
        for lo, hi, counts in zip(histograms["lo"], histograms["hi"], histograms["counts"])
    ])
    return [int(s) for s in histograms["step"]], (edges[:-1] + edges[1:]) / 2, z


def distribution_heatmap(
    histograms: pd.DataFrame, title: str = "", uirevision: Hashable = "distribution",
    bins: int = GRID_BINS, height: int = 380,
) -> go.Figure:
    """How a tensor's value distribution moves over the steps (like TensorBoard distributions).

    Args:
        histograms: `step, lo, hi, counts` rows (counts: equal-width bins between lo and hi).
        title: figure title.
        bins: cells of the common value grid spanning all snapshots' `lo..hi`.
    """
    fig = go.Figure()
    if histograms is not None and not histograms.empty:
        rows = histograms.sort_values("step", kind="stable")
        steps, centres, z = distribution_matrix(rows, bins)
        fig.add_trace(go.Heatmap(
            x=steps, y=centres.tolist(), z=z.tolist(), colorscale="Viridis", name="count",
            colorbar={"title": {"text": "count"}},
            hovertemplate="step %{x}<br>value %{y:.3g}<br>count %{z:.1f}<extra></extra>",
        ))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="value")
    fig = _finish(fig, uirevision, title, height)
    fig.update_layout(hovermode="closest")
    return fig
