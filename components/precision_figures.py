"""Pure figure builders of the "Mixed precision & distribution" page: tables in, plotly
figures out (no Streamlit, no TensorFlow)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import plain


def loss_scale_figure(steps: pd.DataFrame, title: str = "") -> go.Figure:
    """Two panels over steps: the loss scale after each step (log2 axis) with skipped steps
    marked by red crosses, and the float32 (unscaled) loss.

    Args:
        steps: `teaching.mixed_precision.Run.steps`: columns `step`, `loss_scale_after`,
            `skipped` (bool), `loss`, `multiplier`.
        title: the figure title (escaped).
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("loss scale after the step", "loss (float32)"))
    fig.add_trace(go.Scatter(x=steps["step"], y=steps["loss_scale_after"], mode="lines+markers",
                             name="loss scale", line={"shape": "hv"}), 1, 1)
    skipped = steps[steps["skipped"]]
    fig.add_trace(go.Scatter(x=skipped["step"], y=skipped["loss_scale_after"], mode="markers",
                             name="skipped step (non-finite gradient)",
                             marker={"symbol": "x", "size": 12, "color": "crimson"}), 1, 1)
    fig.add_trace(go.Scatter(x=steps["step"], y=steps["loss"], mode="lines", name="loss"), 2, 1)
    forced = steps[steps["multiplier"] != 1.0]
    for step in forced["step"]:
        fig.add_vline(x=float(step), line_dash="dot", line_color="gray")
    fig.update_yaxes(type="log", dtick=0.30102999566, row=1, col=1)  # a tick per power of 2
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(title=plain(title), height=460, margin={"t": 60, "b": 40})
    return fig


def live_hyper_figure(trace: pd.DataFrame, changes: pd.DataFrame | None = None,
                      title: str = "") -> go.Figure:
    """Two panels over steps: each hyperparameter's value as the inner optimizer read it
    inside the traced step (one line per `<name> used` column) and the float32 loss; a dotted
    vertical line before every step that follows a change.

    Args:
        trace: `teaching.mixed_precision.LiveMixedRun.trace()`: columns `step`, `loss`,
            `<name> used` (float).
        changes: `LiveMixedRun.changes` as a table (column `before step`), or None.
        title: the figure title (escaped).
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("hyperparameter value used by the inner optimizer",
                                        "loss (float32)"))
    for column in [c for c in trace.columns if c.endswith(" used")]:
        fig.add_trace(go.Scatter(x=trace["step"], y=trace[column], mode="lines+markers",
                                 name=plain(column), line={"shape": "hv"}), 1, 1)
    fig.add_trace(go.Scatter(x=trace["step"], y=trace["loss"], mode="lines", name="loss"), 2, 1)
    if changes is not None and len(changes):
        for step in dict.fromkeys(changes["before step"]):
            fig.add_vline(x=float(step) - 0.5, line_dash="dot", line_color="gray")
    used = trace[[c for c in trace.columns if c.endswith(" used")]]
    if len(used.columns) and bool((used.to_numpy() > 0).all()):  # lr and betas differ 1000x
        fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(title=plain(title), height=440, margin={"t": 60, "b": 40})
    return fig


def policy_difference_figure(runs: dict[str, pd.DataFrame]) -> go.Figure:
    """Loss over steps per policy on the same seed and batches.

    Args:
        runs: policy name -> steps table (columns `step`, `loss`).
    """
    fig = go.Figure()
    for name, steps in runs.items():
        fig.add_trace(go.Scatter(x=steps["step"], y=steps["loss"], mode="lines",
                                 name=plain(name)))
    fig.update_layout(title="loss per policy (same seed, same batches)", height=320,
                      xaxis_title="step", yaxis_title="loss", margin={"t": 50, "b": 40})
    return fig


def replica_gradients_figure(replicas: pd.DataFrame) -> go.Figure:
    """Grouped bars per step: each replica's local gradient global norm and the all-reduced
    (SUM) gradient's norm.

    Args:
        replicas: columns `step`, `replica` (label), `grad_norm` (float, L2 over all variables).
    """
    fig = go.Figure()
    for label in dict.fromkeys(replicas["replica"]):
        rows = replicas[replicas["replica"] == label]
        fig.add_trace(go.Bar(x=rows["step"], y=rows["grad_norm"], name=plain(label)))
    fig.update_layout(barmode="group", height=320, title="gradient norm: per replica vs "
                      "all-reduced", xaxis_title="step", yaxis_title="||g||_2",
                      margin={"t": 50, "b": 40})
    return fig
