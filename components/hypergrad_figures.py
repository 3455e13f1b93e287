"""Pure builders of the Hyper-gradients page: store frames in, plotly figures / tables out.

No Streamlit, no TensorFlow. Inputs are the frames of `RunStore.hypergradients` (`step, name,
exact, one_step, reverse, val_loss`), `RunStore.response_slices` (`request_id, step, name,
value, loss, hypergradient, center`) and the run's `hypergradient_meta` dict.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Hashable, Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import _finish, plain, point_mode
from schedules import table as schedule_table
from optimizers.hyperparams import HyperSpec

EXACT_COLOR = "#1f77b4"
ONE_STEP_COLOR = "#ff7f0e"
REVERSE_COLOR = "#2ca02c"


SCHEDULE_PREFIX = "lr_schedule."


def parameter_label(name: str, lr_schedule: Mapping[str, Any] | None = None) -> str:
    """A followed name as shown: a schedule parameter says which schedule it belongs to,
    e.g. `lr_schedule.decay_rate (ExponentialDecay)`; other names unchanged.

    Args:
        lr_schedule: the run's serialized schedule (`{"class_name": ..., "config": ...}`) or None.
    """
    if name.startswith(SCHEDULE_PREFIX) and lr_schedule:
        return f"{name} ({lr_schedule.get('class_name', 'schedule')})"
    return name


def schedule_specs(lr_schedule: Mapping[str, Any] | None) -> dict[str, HyperSpec]:
    """`lr_schedule.<param>` -> a `HyperSpec` (current value, range, log scale) for each float
    parameter of the run's schedule, from the TF-free table `optimizers.schedule_specs`; {} for
    a constant learning rate or an unknown class."""
    if not lr_schedule:
        return {}
    try:
        table = {p.name: p for p in schedule_table.params(lr_schedule["class_name"])}
        names = schedule_table.float_params(lr_schedule)
    except (KeyError, TypeError):
        return {}
    config = lr_schedule.get("config") or {}
    return {SCHEDULE_PREFIX + n: HyperSpec(
        SCHEDULE_PREFIX + n, float(config[n]), table[n].low, table[n].high, table[n].help,
        low_inclusive=not table[n].low_open, log_scale=table[n].log) for n in names}


def learning_rate_text(lr_schedule: Mapping[str, Any] | None, decay: float = 0.0) -> str:
    """How the learning rate of each step is made, in one line: `constant` or
    `ExponentialDecay(initial_learning_rate=0.05, decay_steps=6, ...)`, then
    ` / (1 + decay·t)` when the legacy decay is on."""
    text = "constant"
    if lr_schedule:
        config = lr_schedule.get("config") or {}
        text = f"{lr_schedule.get('class_name')}(" + ", ".join(
            f"{k}={v}" for k, v in config.items() if k != "name" and v is not None) + ")"
    if decay:
        text += f" / (1 + {decay:g}·t)"
    return text


def correctness_table(result: Mapping[str, Any]) -> pd.DataFrame:
    """The correctness check's rows (`hypergrad.correctness` JSON) as a table whose
    `hyperparameter` column holds the labels (a schedule parameter names its schedule)."""
    table = pd.DataFrame(result.get("rows") or [])
    labels = result.get("labels") or {}
    if not table.empty:
        table["hyperparameter"] = [labels.get(n, n) for n in table["hyperparameter"]]
    return table


def followed_names(frame: pd.DataFrame) -> list[str]:
    """Hyperparameter names of a hypergradients frame, in order of first appearance."""
    return [] if frame is None or frame.empty else list(dict.fromkeys(frame["name"]))


SIGN_AGREEMENT_NOTE = ("sign agreement: % of recorded steps where one-step and exact point "
                       "the same way, i.e. how often the one-step hyper-gradient would move "
                       "the hyperparameter in the right direction")


def sign_agreement(frame: pd.DataFrame) -> dict[str, float]:
    """name -> % of recorded steps where exact and one-step have the same sign (a zero counts
    as agreeing only with a zero); NaN when no step has both values."""
    out: dict[str, float] = {}
    for name in followed_names(frame):
        rows = frame[frame["name"] == name].dropna(subset=["exact", "one_step"])
        if rows.empty:
            out[name] = float("nan")
            continue
        same = np.sign(rows["exact"].to_numpy(float)) == np.sign(rows["one_step"].to_numpy(float))
        out[name] = 100.0 * float(same.mean())
    return out


def asinh_ticks(values: np.ndarray, per_side: int = 4) -> tuple[list[float], list[str]]:
    """Tick positions on an asinh axis and their labels in REAL units: 0 and +-10^k for the
    decades the finite `values` span (at most `per_side` decades each side, the largest kept).

    Returns:
        (asinh(tick values), tick labels such as "-1e-3", "0", "10").
    """
    finite = np.abs(values[np.isfinite(values)])
    nonzero = finite[finite > 0]
    if nonzero.size == 0:
        return [0.0], ["0"]
    top = int(math.ceil(math.log10(nonzero.max())))
    bottom = max(int(math.floor(math.log10(nonzero.min()))), top - per_side + 1)
    decades = [10.0 ** k for k in range(bottom, top + 1)]
    ticks = [-d for d in reversed(decades)] + [0.0] + decades
    return [float(np.arcsinh(v)) for v in ticks], [f"{v:g}" for v in ticks]


def hypergradient_figure(frame: pd.DataFrame, uirevision: Hashable = "hypergrads",
                         row_height: int = 190, symlog: bool = False,
                         labels: Mapping[str, str] | None = None) -> go.Figure:
    """dE/dlambda over the steps, one subplot row per followed hyperparameter or schedule
    parameter: the exact (forward-mode) line, the one-step line and the truncated reverse-mode
    markers.

    Args:
        frame: `step, name, exact, one_step, reverse[, val_loss]` rows.
        symlog: draw asinh(value) instead of the value (signs kept, decades compressed);
            the tick labels stay in real units (`asinh_ticks`).
        labels: name -> the label shown in titles and hover text (`parameter_label`, e.g.
            which schedule a `lr_schedule.<param>` belongs to); default the name.
    """
    names = followed_names(frame)
    if not names:
        return _finish(go.Figure(), uirevision, "Hyper-gradients dE_val/dλ", row_height + 60)
    agreement = sign_agreement(frame)
    shown_as = {n: (labels or {}).get(n, n) for n in names}
    titles = [plain(f"dE_val/d{shown_as[n]} · sign agreement {agreement[n]:.0f}%"
                    if math.isfinite(agreement[n]) else f"dE_val/d{shown_as[n]}") for n in names]
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=titles)
    transform = np.arcsinh if symlog else (lambda v: v)
    for row, name in enumerate(names, start=1):
        rows = frame[frame["name"] == name].sort_values("step", kind="stable")
        steps = [int(s) for s in rows["step"]]
        first = row == 1
        for column, label, color, dash in (("exact", "exact (forward mode)", EXACT_COLOR, None),
                                           ("one_step", "one-step (Baydin et al.)",
                                            ONE_STEP_COLOR, "dot")):
            values = rows[column].to_numpy(float)
            fig.add_trace(go.Scatter(
                x=steps, y=transform(values).tolist(), name=label, mode="lines",
                line={"color": color, "dash": dash}, legendgroup=column, showlegend=first,
                customdata=values.tolist(),
                hovertemplate=f"{plain(shown_as[name])} {column} at step %{{x}}: "
                              "%{customdata:.4g}<extra></extra>",
            ), row=row, col=1)
        reverse = rows.dropna(subset=["reverse"])
        if not reverse.empty:
            values = reverse["reverse"].to_numpy(float)
            fig.add_trace(go.Scatter(
                x=[int(s) for s in reverse["step"]], y=transform(values).tolist(),
                name="reverse (truncated, last T steps)",
                mode=point_mode(len(reverse), line=False),
                marker={"color": REVERSE_COLOR, "size": 9, "symbol": "x"},
                line={"color": REVERSE_COLOR, "dash": "dot"},
                legendgroup="reverse", showlegend=first, customdata=values.tolist(),
                hovertemplate=f"{plain(shown_as[name])} reverse at step %{{x}}: "
                              "%{customdata:.4g}<extra></extra>",
            ), row=row, col=1)
        fig.add_hline(y=0, line={"color": "grey", "width": 1}, row=row, col=1)
        if symlog:
            shown = rows[["exact", "one_step", "reverse"]].to_numpy(float).ravel()
            tickvals, ticktext = asinh_ticks(shown)
            fig.update_yaxes(tickvals=tickvals, ticktext=ticktext, title_text="asinh axis",
                             row=row, col=1)
    fig.update_xaxes(title_text="step", row=len(names), col=1)
    if any(math.isfinite(v) for v in agreement.values()):
        # the titles' percentage, said where it is read
        fig.add_annotation(text=SIGN_AGREEMENT_NOTE, xref="paper", yref="paper", x=0.0,
                           y=1.0, yshift=52, xanchor="left", yanchor="bottom", showarrow=False,
                           font={"size": 11, "color": "grey"})
    fig = _finish(fig, uirevision, "", row_height * len(names) + 90)
    # the legend sits above the first subplot's title, not on it
    fig.update_layout(hovermode="closest", margin={"t": 80},
                      legend={"yref": "container", "y": 0.995, "yanchor": "top",
                              "x": 1.0, "xanchor": "right"})
    return fig


def cost_metrics(meta: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, help) of the cost meter from a run's `hypergradient_meta`."""

    def ms(v):
        return "–" if v is None else f"{v:.2f} ms"

    ratio = meta.get("ratio")
    horizon = meta.get("reverse_horizon") or 0
    window = meta.get("window_bytes")
    return [
        ("plain step", ms(meta.get("plain_step_ms")),
         "the engine's compiled apply_gradients step, timed at the start (then undone)"),
        ("step with hyper-gradients", ms(meta.get("hyper_step_ms")),
         "forward-mode step (new state + tangents), median of recent steps"),
        ("cost ratio", "–" if ratio is None else f"{ratio:.2f}×",
         "hyper step / plain step (the lab's target: ≤ 2× for one followed hyperparameter)"),
        ("tangent memory", f"{(meta.get('tangent_bytes') or 0) / 1e6:.2f} MB",
         "exact tangents k × (weights + slots) plus one-step tangents k × weights"),
        ("reverse window", "off" if not horizon else f"{(window or 0) / 1e6:.2f} MB",
         f"T = {horizon} stored states (weights + slots) for truncated reverse mode"),
    ]


def latest_slice(slices: pd.DataFrame) -> pd.DataFrame:
    """The rows of the newest response-slice request (by request_id), sorted by value."""
    if slices is None or slices.empty:
        return pd.DataFrame(columns=["request_id", "step", "name", "value", "loss",
                                     "hypergradient", "center"])
    last = slices["request_id"].max()
    return slices[slices["request_id"] == last].sort_values("value").reset_index(drop=True)


def response_slice_figure(rows: pd.DataFrame, uirevision: Hashable = "slice",
                          log_x: bool = False, horizon: int | None = None,
                          label: str | None = None) -> go.Figure:
    """Validation loss after the horizon vs the hyperparameter's value, with the tangent line
    loss_c + g (lambda - lambda_c) at the current value (g = the reverse-mode hyper-gradient of
    the same function), drawn over the sweep's span. `label` replaces the name in the texts
    (`parameter_label`)."""
    if rows is None or rows.empty:
        return _finish(go.Figure(), uirevision, "Response slice", 360)
    rows = rows.sort_values("value")
    name = plain(label or rows["name"].iloc[0])  # in names, hover text and the axis title
    step = int(rows["step"].iloc[0])
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=rows["value"].tolist(), y=rows["loss"].tolist(), mode="lines+markers",
        name="E_val after the horizon", line={"color": EXACT_COLOR},
        hovertemplate=f"{name}=%{{x:.4g}}: loss %{{y:.5g}}<extra></extra>",
    ))
    center = rows[rows["center"] == 1]
    if not center.empty:
        c = center.iloc[0]
        x0, y0, g = float(c["value"]), float(c["loss"]), c["hypergradient"]
        if g is not None and math.isfinite(float(g)):
            lo, hi = float(rows["value"].min()), float(rows["value"].max())
            xs = np.geomspace(lo, hi, 25) if log_x and lo > 0 else np.linspace(lo, hi, 25)
            fig.add_trace(go.Scatter(
                x=xs.tolist(), y=(y0 + float(g) * (xs - x0)).tolist(), mode="lines",
                name=f"tangent at the current value, slope dE/d{name} = {float(g):.4g}",
                line={"color": "crimson", "dash": "dash"}, hoverinfo="skip",
            ))
        fig.add_trace(go.Scatter(
            x=[x0], y=[y0], mode="markers", name=f"current {name} = {x0:.4g}",
            marker={"color": "crimson", "size": 12, "symbol": "diamond"},
        ))
        # keep the y range on the sweep (a steep tangent would squash the curve)
        span = float(rows["loss"].max() - rows["loss"].min()) or abs(y0) * 0.1 or 1.0
        fig.update_yaxes(range=[float(rows["loss"].min()) - 0.3 * span,
                                float(rows["loss"].max()) + 0.3 * span])
    fig.update_xaxes(title_text=name, type="log" if log_x else "linear")
    fig.update_yaxes(title_text="validation loss (nats)")
    after = f" after {horizon} more steps" if horizon else ""
    fig = _finish(fig, uirevision, f"Response slice at step {step}: E_val{after}", 440)
    fig.update_layout(hovermode="closest", margin={"b": 110},  # legend under the x axis title
                      legend={"orientation": "v", "yanchor": "top", "y": -0.22,
                              "xanchor": "left", "x": 0.0})
    return fig
