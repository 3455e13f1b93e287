"""Pure figure builders of the training-dynamics diagnostics (DataFrame -> plotly Figure).

Input: the long `diagnostics` table of a run (`RunStore.diagnostics`: step, name, variable,
value, seconds), names from `engine.diagnostics.catalog`. No Streamlit, no TensorFlow.

* `sharpness_figure`: lambda_1(H) against its threshold (2/lr, 2(1+beta)/lr, ...) and, for
  Adam/RMSprop, lambda_1(P^-1 H) against (2 + 2 beta_1)/((1 - beta_1) lr), with the first step
  where each reached its threshold marked (`threshold_crossing`);
* `update_ratio_figure` (`update_ratio_spec`, a figure dict, live): ||delta w|| / ||w|| per
  variable on a log axis with the 1e-3 band;
* `noise_scale_figure`: B_simple beside the run's batch size (log axis);
* `cost_metrics`: the cost meter (ms per record, amortised ms per step, share of the step);
* `comparison_figure`: one diagnostic of several runs overlaid (the Runs page).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import Spec, _finish, _vlines
from components.run_figures import run_colors
from engine.diagnostics import catalog

# "Reached the threshold": within this fraction below it. Sharpness at the edge of stability
# hovers around the threshold, a little above and below (Cohen et al. 2021, fig. 1), and a
# 20-step Lanczos estimate is a lower bound of lambda_1.
REACH_TOLERANCE = 0.02
COLORS = {"value": "#1f77b4", "threshold": "#d62728", "band": "rgba(44, 160, 44, 0.15)"}


def series(diagnostics: pd.DataFrame | None, name: str, variable: str = "") -> pd.DataFrame:
    """The rows of one diagnostic (columns step, value, seconds), sorted by step."""
    if diagnostics is None or diagnostics.empty:
        return pd.DataFrame({"step": [], "value": [], "seconds": []})
    rows = diagnostics[(diagnostics["name"] == name) & (diagnostics["variable"] == variable)]
    return rows[["step", "value", "seconds"]].sort_values("step").reset_index(drop=True)


def threshold_crossing(diagnostics: pd.DataFrame | None, name: str, threshold_name: str,
                       tolerance: float = REACH_TOLERANCE) -> int | None:
    """The first recorded step where diagnostic `name` reached its threshold (recorded at the
    same step): value >= (1 - tolerance) * threshold; None if it never did."""
    values, limits = series(diagnostics, name), series(diagnostics, threshold_name)
    if values.empty or limits.empty:
        return None
    both = values.merge(limits, on="step", suffixes=("", "_limit")).dropna(
        subset=["value", "value_limit"])
    reached = both[both["value"] >= (1.0 - tolerance) * both["value_limit"]]
    return None if reached.empty else int(reached["step"].iloc[0])


def _pairs(diagnostics: pd.DataFrame | None) -> list[tuple[str, str]]:
    """(value, threshold) names present, plain first."""
    out = []
    for value, limit in ((catalog.SHARPNESS, catalog.SHARPNESS_THRESHOLD),
                         (catalog.PRECONDITIONED, catalog.PRECONDITIONED_THRESHOLD)):
        if not series(diagnostics, value).empty:
            out.append((value, limit))
    return out


def sharpness_figure(diagnostics: pd.DataFrame | None, optimizer: str,
                     options: Mapping[str, Any] | None = None, uirevision: Hashable = "sharp",
                     height: int = 380) -> go.Figure:
    """Sharpness against its threshold line(s), one row per eigenvalue, the step where each
    reached its threshold marked (a dotted line and a diamond)."""
    options = options or {}
    pairs = _pairs(diagnostics)
    titles = {catalog.SHARPNESS: "sharpness λ₁(H)",
              catalog.PRECONDITIONED: "preconditioned sharpness λ₁(P⁻¹H)"}
    fig = make_subplots(rows=max(len(pairs), 1), cols=1, shared_xaxes=True,
                        vertical_spacing=0.12,
                        subplot_titles=[titles[v] for v, _ in pairs] or [""])
    for row, (value_name, limit_name) in enumerate(pairs, start=1):
        values, limits = series(diagnostics, value_name), series(diagnostics, limit_name)
        fig.add_trace(go.Scatter(x=values["step"], y=values["value"], mode="lines+markers",
                                 name=titles[value_name], marker={"size": 4},
                                 line={"color": COLORS["value"]}), row=row, col=1)
        formula = catalog.threshold_formula(optimizer, options,
                                            value_name == catalog.PRECONDITIONED)
        if not limits.empty:
            fig.add_trace(go.Scatter(x=limits["step"], y=limits["value"], mode="lines",
                                     name=f"threshold {formula}".strip(), line_shape="hv",
                                     line={"color": COLORS["threshold"], "dash": "dash"}),
                          row=row, col=1)
        reached = threshold_crossing(diagnostics, value_name, limit_name)
        if reached is not None:
            at = values[values["step"] == reached]["value"].iloc[0]
            fig.add_vline(x=reached, line={"color": "grey", "dash": "dot"}, row=row, col=1)
            fig.add_trace(go.Scatter(
                x=[reached], y=[at], mode="markers+text", text=[f"reached at step {reached:,}"],
                textposition="bottom right", marker={"symbol": "diamond", "size": 11,
                                                     "color": COLORS["threshold"]},
                name=f"reached threshold (step {reached:,})", showlegend=False),
                row=row, col=1)
    fig.update_xaxes(title_text="step", row=max(len(pairs), 1), col=1)
    fig = _finish(fig, uirevision, "", height if len(pairs) < 2 else height + 200)
    fig.update_layout(hovermode="closest")
    return fig


def update_ratio_spec(diagnostics: pd.DataFrame | None, uirevision: Hashable = "ratio",
                      marks: Sequence[int] = (), height: int = 340) -> Spec:
    """||delta w|| / ||w|| per variable (log y), the 3e-4..3e-3 band around the 1e-3 rule of
    thumb, and dotted lines at `marks` (steps where the learning rate was changed or a
    schedule changes regime), as a plotly figure dict: redrawn at every live refresh, where a
    graph object's validation (`add_hrect`, `add_hline`, an `add_vline` per mark) cost more
    than every other chart of the page together."""
    spec: Spec = {"data": [], "layout": {}}
    rows = (diagnostics[diagnostics["name"] == catalog.UPDATE_RATIO]
            if diagnostics is not None and not diagnostics.empty else pd.DataFrame())
    for variable, part in (rows.groupby("variable", sort=False) if not rows.empty else ()):
        part = part.sort_values("step")
        spec["data"].append({"type": "scatter", "x": part["step"].to_numpy(),
                             "y": part["value"].to_numpy(float), "mode": "lines",
                             "name": variable})
    low, high = catalog.RATIO_BAND
    target = catalog.RATIO_TARGET
    spec["layout"] = {
        "shapes": [
            {"type": "rect", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1, "y0": low,
             "y1": high, "fillcolor": COLORS["band"], "line": {"width": 0}, "layer": "below"},
            {"type": "line", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1, "y0": target,
             "y1": target, "line": {"color": "green", "dash": "dash", "width": 1}}],
        # on a log axis an annotation's y is log10 of the value (plotly.js), a shape's is not
        "annotations": [{"text": "1e-3 rule of thumb", "showarrow": False, "xref": "x domain",
                         "x": 0, "xanchor": "left", "yref": "y", "y": math.log10(target),
                         "yanchor": "bottom"}],
        "yaxis": {"type": "log", "title": {"text": "‖Δw‖ / ‖w‖"}},
        "xaxis": {"title": {"text": "step"}},
    }
    _vlines(spec, [(int(step), {"color": "grey", "dash": "dot"}, None) for step in marks],
            "top left")
    return _finish(spec, uirevision, "Update / weight ratio per variable", height)


def update_ratio_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """`update_ratio_spec(...)` as a `go.Figure` (same arguments)."""
    return go.Figure(update_ratio_spec(*args, **kwargs))


def noise_scale_figure(diagnostics: pd.DataFrame | None, batch_size: int,
                       uirevision: Hashable = "noise", height: int = 320) -> go.Figure:
    """B_simple (running means) and each record's own tr(Σ)/|G|² (faint) on a log axis, beside
    a line at the run's batch size."""
    fig = go.Figure()
    scale = series(diagnostics, catalog.NOISE_SCALE)
    trace, norm = series(diagnostics, catalog.GRADIENT_NOISE), series(diagnostics,
                                                                      catalog.GRADIENT_NORM_SQ)
    if not trace.empty and not norm.empty:
        raw = trace.merge(norm, on="step", suffixes=("", "_norm"))
        raw = raw[raw["value_norm"] > 0]
        fig.add_trace(go.Scatter(x=raw["step"], y=raw["value"] / raw["value_norm"],
                                 mode="markers", name="one estimate",
                                 marker={"size": 4, "color": "rgba(31,119,180,0.3)"}))
    if not scale.empty:
        fig.add_trace(go.Scatter(x=scale["step"], y=scale["value"], mode="lines",
                                 name="B_simple (running means)",
                                 line={"color": COLORS["value"]}))
    fig.add_hline(y=batch_size, line={"color": COLORS["threshold"], "dash": "dash"},
                  annotation_text=f"batch size {batch_size:,}", annotation_position="top left")
    fig.update_yaxes(type="log", title_text="examples")
    fig.update_xaxes(title_text="step")
    return _finish(fig, uirevision, "Gradient noise scale B_simple = tr(Σ) / |G|²", height)


def latest(diagnostics: pd.DataFrame | None, name: str) -> float | None:
    """The last recorded finite value of `name`, or None."""
    rows = series(diagnostics, name).dropna(subset=["value"])
    return None if rows.empty else float(rows["value"].iloc[-1])


def cost_metrics(diagnostics: pd.DataFrame | None, every: Mapping[str, int]
                 ) -> list[tuple[str, str, str]]:
    """(label, value, help) of the diagnostics' cost meter.

    Args:
        diagnostics: the run's rows (their `seconds` and the `step_seconds` rows).
        every: diagnostic ("sharpness", "noise_scale", "update_ratio") -> K of the run (steps
            between records); a diagnostic that is off is left out.
    """
    step = latest(diagnostics, catalog.STEP_SECONDS)
    out = [("step interval", "–" if step is None else f"{1e3 * step:.2f} ms",
            "median wall time between two steps without the diagnostics (a paced run's pause "
            "included)")]
    for key, k in every.items():
        rows = (_ratio_seconds(diagnostics) if key == "update_ratio"
                else series(diagnostics, catalog.MAIN_ROW[key]))
        # the first record traces and compiles its function: not a record's usual cost
        seconds = rows["seconds"].iloc[1:] if len(rows) > 1 else rows["seconds"]
        if seconds.empty:
            out.append((key.replace("_", " "), "–", f"every {k:,} steps; no record yet"))
            continue
        per_call = float(seconds.median())
        per_step = per_call / max(k, 1)
        share = (f", {100 * per_step / step:.1f}% of the step" if step else "")
        out.append((key.replace("_", " "), f"{1e3 * per_step:.3f} ms/step",
                    f"{1e3 * per_call:.1f} ms per record, every {k:,} steps{share}"))
    return out


def _ratio_seconds(diagnostics: pd.DataFrame | None) -> pd.DataFrame:
    """The update-ratio rows that carry the record's time (one per record)."""
    if diagnostics is None or diagnostics.empty:
        return pd.DataFrame({"step": [], "value": [], "seconds": []})
    rows = diagnostics[(diagnostics["name"] == catalog.UPDATE_RATIO)
                       & (diagnostics["seconds"] > 0)]
    return rows[["step", "value", "seconds"]].sort_values("step").reset_index(drop=True)


def comparison_figure(frames: Mapping[int, pd.DataFrame], labels: Mapping[int, str], name: str,
                      variable: str = "", uirevision: Hashable = "compare",
                      log_y: bool = False, height: int = 360) -> go.Figure:
    """Diagnostic `name` (of `variable`, "" for run-level values) of several runs overlaid;
    a sharpness-like name also draws each run's threshold dashed in the run's colour."""
    colors = run_colors(list(frames))
    limit = {catalog.SHARPNESS: catalog.SHARPNESS_THRESHOLD,
             catalog.PRECONDITIONED: catalog.PRECONDITIONED_THRESHOLD}.get(name)
    fig = go.Figure()
    for run_id, frame in frames.items():
        values = series(frame, name, variable)
        if values.empty:
            continue
        fig.add_trace(go.Scatter(x=values["step"], y=values["value"], mode="lines",
                                 name=labels.get(run_id, f"#{run_id}"), legendgroup=str(run_id),
                                 line={"color": colors[run_id]}))
        limits = series(frame, limit) if limit else pd.DataFrame()
        if not limits.empty:
            fig.add_trace(go.Scatter(x=limits["step"], y=limits["value"], mode="lines",
                                     line_shape="hv", name="threshold", showlegend=False,
                                     legendgroup=str(run_id),
                                     line={"color": colors[run_id], "dash": "dash"}))
    if name == catalog.UPDATE_RATIO:
        fig.add_hrect(y0=catalog.RATIO_BAND[0], y1=catalog.RATIO_BAND[1],
                      fillcolor=COLORS["band"], line_width=0, layer="below")
    if log_y:
        fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="step")
    title = name.replace("_", " ") + (f" of {variable}" if variable else "")
    return _finish(fig, uirevision, title, height)
