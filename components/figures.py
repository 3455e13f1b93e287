"""Pure figure builders: pandas DataFrames from the run store in, plotly `go.Figure` out.

No Streamlit here, so every builder is testable without a page. Every figure sets
`layout.uirevision` to the value passed in (the run id, usually): plotly then keeps the user's
zoom, pan and legend clicks when the live page redraws the figure with new data.

The three charts a live Train page redraws at every refresh (loss, accuracy, learning rate)
are built as plain figure dicts (`loss_spec`, `accuracy_spec`, `learning_rate_spec`, drawn by
`components.charts.chart` live or not; the `*_figure` builders wrap them in a `go.Figure` for
the Setup's preview and the tests): a graph object validates every property it is
given, which cost 27, 13 and 22 ms per build of a 2,000-step run here, more than half of the
server's CPU time per live refresh.
"""

from __future__ import annotations

import html
import math
from collections.abc import Hashable, Sequence
from typing import Any, TypeAlias, overload

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from engine.record_rows import VAL_LOSS_AT_VARIABLES
from schedules.table import EFFECTIVE_LR

# Rows per series read for a chart: a 200,000-step run recorded without decimation would
# otherwise ship 200k points per series to the browser on every refresh (bench/bench_long_run.py
# measured the page refresh growing from 0.8 s to 3.7 s over such a run).
DISPLAY_POINTS = 2_000

# Sources of hyper_changes rows that get a marker (the `init` row is only the start of the line).
MARKED_SOURCES = ("user", "auto-tune")
EMPTY_TEXT = "waiting for data..."
# Steps after which recording decimates to 10-, 100- and 1,000-step means
# (`engine.recording.stride`; not imported: it imports TensorFlow; a test checks they agree).
DECIMATION_STEPS = (1_000, 10_000, 100_000)
# A marker is one SVG path, redrawn at every live refresh. Past a few hundred points per chart
# they merge into a thick line anyway, while a tab watching a 10-minute run (2,000 evaluations
# per series) spent its memory and refresh time on them (bench/bench_long_run.py, markers
# throughout: renderer PSS x1.56-1.64, refresh p95 1.3-2.0 s): longer series are lines.
MARKERS_UP_TO = 200


def point_mode(points: int, line: bool = True) -> str:
    """Plotly scatter `mode` for a series of `points` points: markers (on a line when `line`)
    while each stays distinguishable (<= `MARKERS_UP_TO`), a plain line beyond."""
    if points > MARKERS_UP_TO:
        return "lines"
    return "lines+markers" if line else "markers"


def plain(value: object) -> str:
    """`value` as text that plotly shows literally: `&`, `<` and `>` escaped.

    Plotly renders a subset of HTML (`<a href>`, `<b>`, `<span style>`, `<br>`) in trace names,
    titles, annotations and hover text, so every name a user typed or a store row holds (run
    names, hyperparameter, variable and slot names, sources) goes through this before it
    enters a figure; the figure's own markup (`<extra></extra>`, `<br>`) is added after.
    """
    return html.escape(str(value), quote=False)


Spec: TypeAlias = dict[str, Any]  # a plotly figure dict: {"data": [trace dicts], "layout": {...}}
Fig: TypeAlias = "go.Figure | Spec"  # what the helpers below extend: a graph object or a figure dict


def _layout(uirevision: Hashable, title: str, height: int) -> dict[str, Any]:
    """The layout every figure here shares; `title` is plain text (escaped here, see `plain`)."""
    return {
        "title": {"text": plain(title), "x": 0.0, "xanchor": "left"},
        "uirevision": uirevision,
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right",
                   "x": 1.0},
    }


_EMPTY_NOTE = {"text": EMPTY_TEXT, "showarrow": False, "xref": "paper", "yref": "paper",
               "x": 0.5, "y": 0.5, "font": {"size": 14, "color": "grey"}}


@overload
def _finish(fig: Spec, uirevision: Hashable, title: str, height: int) -> Spec: ...
@overload
def _finish(fig: go.Figure, uirevision: Hashable, title: str, height: int) -> go.Figure: ...
def _finish(fig: Fig, uirevision: Hashable, title: str, height: int) -> Fig:
    """Common layout (`_layout`), and "waiting for data..." on a figure without traces."""
    if isinstance(fig, dict):
        fig["layout"].update(_layout(uirevision, title, height))
        if not fig["data"]:
            fig["layout"].setdefault("annotations", []).append(dict(_EMPTY_NOTE))
        return fig
    fig.update_layout(**_layout(uirevision, title, height))
    if not fig.data:
        fig.add_annotation(**_EMPTY_NOTE)
    return fig


def _add_scatter(fig: Fig, trace: dict[str, Any]) -> None:
    """Append a scatter trace given as a dict (validated only when `fig` is a graph object)."""
    if isinstance(fig, dict):
        fig["data"].append({"type": "scatter", **trace})
    else:
        fig.add_trace(go.Scatter(trace))


def _axis_titles(spec: Spec, x: str, y: str, **yaxis: Any) -> None:
    """Name both axes of a one-plot figure dict; `yaxis`: more y-axis properties."""
    spec["layout"].setdefault("xaxis", {})["title"] = {"text": x}
    spec["layout"].setdefault("yaxis", {}).update({"title": {"text": y}, **yaxis})


def _series(scalars: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of scalar `name` (columns step, value), sorted by step.

    In NumPy: a live refresh calls this five times, and pandas' `.loc[mask, [columns]]` plus
    `sort_values` (an Arrow string index built per call) was a sixth of the server's CPU time
    with 25 pages watching."""
    if scalars is None or scalars.empty:
        return pd.DataFrame({"step": [], "value": []})
    mask = (scalars["name"] == name).to_numpy(dtype=bool, na_value=False)
    steps = scalars["step"].to_numpy()[mask]
    values = scalars["value"].to_numpy()[mask]
    if steps.size > 1 and (np.diff(steps) < 0).any():  # the store's order is by step already
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return pd.DataFrame({"step": steps, "value": values})


def ema(steps: Sequence[int], values: Sequence[float], smoothing: float) -> list[float]:
    """Debiased exponential moving average of a series recorded at `steps` (1-based, rising).

    `s_i = w_i s_{i-1} + (1 - w_i) x_i` with `w_i = smoothing ** (steps_i - steps_{i-1})`, so a
    point that stands for 10 steps (recording decimated, see `DECIMATION_STEPS`) weighs like 10
    per-step points and the curve's smoothness does not change where recording decimates;
    divided by `1 - prod(w)` like TensorBoard's debiasing. `smoothing` in [0, 1): 0 returns the
    values unchanged.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing={smoothing!r} refused: must be in [0, 1)")
    out: list[float] = []
    mean, weight, previous = 0.0, 1.0, 0  # a point at step s stands for steps previous+1..s
    for step, value in zip(steps, values):
        w = smoothing ** max(int(step) - previous, 1)
        mean, weight, previous = w * mean + (1.0 - w) * float(value), weight * w, int(step)
        out.append(mean / (1.0 - weight) if weight < 1.0 else float(value))
    return out


# `add_vline` validates and places one shape per call (82 ms for 9 markers measured here): the
# markers below are built as plain dicts and appended to the layout together.
_ANNOTATION_PLACES = {  # annotation_position -> (y in the axis domain, xanchor, yanchor)
    "top left": (1.0, "right", "top"), "bottom right": (0.0, "left", "bottom"),
    "bottom left": (0.0, "right", "bottom"),
}


def _vlines(fig: Fig, lines: Sequence[tuple[int, dict, dict | None]], place: str,
            row: int | None = None) -> None:
    """Vertical lines across the plot at `(x, line style, annotation or None)`, annotations at
    `place` (a key of `_ANNOTATION_PLACES`), in subplot `row` (1-based) when given."""
    if not lines:
        return
    suffix = "" if not row or row == 1 else str(row)
    xref, yref = f"x{suffix}", f"y{suffix} domain"
    y, xanchor, yanchor = _ANNOTATION_PLACES[place]
    shapes = [{"type": "line", "xref": xref, "yref": yref, "x0": x, "x1": x, "y0": 0, "y1": 1,
               "line": style} for x, style, _ in lines]
    notes = [{"xref": xref, "yref": yref, "x": x, "y": y, "xanchor": xanchor,
              "yanchor": yanchor, "showarrow": False, **note}
             for x, _, note in lines if note is not None]
    if isinstance(fig, dict):
        fig["layout"].setdefault("shapes", []).extend(shapes)
        fig["layout"].setdefault("annotations", []).extend(notes)
        return
    # appended as typed objects: `update_layout(shapes=old + new)` re-validates every old one
    # (60 ms for three batches of markers against 9 ms this way)
    fig.layout.shapes += tuple(go.layout.Shape(shape) for shape in shapes)
    fig.layout.annotations += tuple(go.layout.Annotation(note) for note in notes)


def change_markers(fig: Fig, changes: pd.DataFrame | None, row: int | None = None,
                   span: int | None = None) -> None:
    """A dotted vertical line at every `user` / `auto-tune` row of `changes` (`step, name, old,
    new, source`): the step that first used the new value. Labelled `name -> new`; changes
    closer than `LABEL_GAP` of `span` steps (the chart's width in steps; default the changes'
    own range) share one label ("name -> new +2 more", every change in its hover text), so
    labels never overlap."""
    if changes is None or changes.empty:
        return
    marked = changes[changes["source"].isin(MARKED_SOURCES)].sort_values("step", kind="stable")
    if marked.empty:
        return
    style = {"dash": "dot", "color": "crimson", "width": 1}
    steps = marked["step"].astype(int).to_list()
    texts = [f"{plain(name)} → {_fmt(new)}" for name, new in zip(marked["name"], marked["new"])]
    hovers = [f"{plain(source)} change at step {step}: {text}"
              for step, text, source in zip(steps, texts, marked["source"])]
    gap = LABEL_GAP * max(span or (steps[-1] - steps[0]), 1)
    lines: list[tuple[int, dict, dict | None]] = []
    group: list[int] = []
    for index, step in enumerate(steps + [None]):  # None closes the last group
        if group and (step is None or step - steps[group[0]] > gap):
            first = group[0]
            more = f" +{len(group) - 1} more" if len(group) > 1 else ""
            lines.append((steps[first], style, {
                "text": texts[first] + more, "textangle": -90,
                "font": {"size": 10, "color": "crimson"},
                "hovertext": "<br>".join(hovers[i] for i in group)}))
            lines += [(steps[i], style, None) for i in group[1:]]
            group = []
        if step is not None:
            group.append(index)
    _vlines(fig, lines, "top left", row)


# Change labels closer than this fraction of the chart's width share one label.
LABEL_GAP = 0.03


def decimation_markers(fig: Fig, last_step: int) -> None:
    """A dashed grey line at every `DECIMATION_STEPS` step below `last_step`: from there on a
    recorded train-loss point is the mean of 10x more steps (`engine.recording.stride`), so
    the curve's noise drops there by itself; said in the legend too (one entry), so the drop is
    not read as the effect of a live change."""
    style = {"dash": "dash", "color": "grey", "width": 1}
    strides = [(step, stride) for step, stride in zip(DECIMATION_STEPS, (10, 100, 1_000))
               if last_step > step]
    _vlines(fig, [(step, style, {"text": f"{stride}-step means from here",
                                 "font": {"size": 10, "color": "grey"}})
                  for step, stride in strides], "bottom right")
    if strides:
        _add_scatter(fig, {
            "x": [None], "y": [None], "mode": "lines", "line": style, "hoverinfo": "skip",
            "name": "recording stride: " + ", ".join(
                f"{stride}-step means from step {step:,}" for step, stride in strides)})


def schedule_lines(fig: Fig, marks: Sequence[tuple[int, str]], row: int | None = None
                   ) -> None:
    """A dash-dot green vertical line at every `(step, label)` of a learning-rate schedule
    (`optimizers.schedule_curves.schedule_marks`: boundaries, restarts, staircase steps,
    warm-up end): the first step of the new regime. Labelled when there are at most 12."""
    style = {"dash": "dashdot", "color": "seagreen", "width": 1}
    _vlines(fig, [(int(step), style,
                   {"text": label, "textangle": -90, "font": {"size": 10, "color": "seagreen"}}
                   if len(marks) <= 12 else None) for step, label in marks],
            "bottom left", row)


def learning_rate_spec(
    planned: tuple[Sequence[int] | np.ndarray, Sequence[float] | np.ndarray] | None = None,
    recorded: pd.DataFrame | None = None, marks: Sequence[tuple[int, str]] = (),
    uirevision: Hashable = "lr", height: int = 240, log_y: bool = False,
    now_step: int | None = None,
) -> Spec:
    """The learning rate over a run's steps: the schedule as planned and as the run used it.

    Args:
        planned: (steps [n], learning rates [n]) computed in NumPy from the schedule's formulas
            (`optimizers.schedule_curves.schedule_curve`, step t uses iterations t - 1); a line.
        recorded: scalar rows `step, name, value` whose `learning_rate (effective)` rows (what
            `_decayed_lr` returned, recorded by the run) are drawn as markers.
        marks: `(step, label)` regime changes drawn by `schedule_lines`.
        log_y: logarithmic learning-rate axis.
        now_step: the run's current step, marked "you are here" (a schedule switched on now is
            read from there on).

    Returns:
        a plotly figure dict (`learning_rate_figure`: the same as a `go.Figure`).
    """
    fig: Spec = {"data": [], "layout": {}}
    if planned is not None and len(planned[0]):
        _add_scatter(fig, {"x": list(map(int, planned[0])), "y": list(map(float, planned[1])),
                           "name": "schedule (NumPy)", "mode": "lines",
                           "line": {"color": qualitative.Plotly[2]},
                           "hovertemplate": "step %{x}: lr=%{y:.6g}<extra></extra>"})
    rows = _series(recorded, EFFECTIVE_LR) if recorded is not None else None
    if rows is not None and not rows.empty:
        _add_scatter(fig, {"x": rows["step"].to_numpy(), "y": rows["value"].to_numpy(float),
                           "name": "effective (recorded)",
                           "mode": point_mode(len(rows), line=False),
                           "line": {"dash": "dot", "color": qualitative.Plotly[4]},
                           "marker": {"size": 4, "color": qualitative.Plotly[4]},
                           "hovertemplate": "step %{x}: _decayed_lr=%{y:.6g}<extra></extra>"})
    schedule_lines(fig, marks)
    _axis_titles(fig, "step", "learning rate", type="log" if log_y else "linear",
                 exponentformat="e")
    if now_step is not None:
        _vlines(fig, [(int(now_step), {"color": "black", "width": 1},
                       {"text": f"you are here (step {int(now_step):,})",
                        "font": {"size": 10}})], "top left")
        # plotly's autorange makes room for annotations: in a narrow chart the label alone
        # would stretch the axis to negative steps
        xs = [int(x) for x in (planned[0] if planned is not None and len(planned[0]) else [])]
        if rows is not None and not rows.empty:
            xs += [int(rows["step"].min()), int(rows["step"].max())]
        xs.append(int(now_step))
        if min(xs) < max(xs):
            fig["layout"]["xaxis"]["range"] = [min(xs), max(xs)]
    return _finish(fig, uirevision, "Learning rate", height)


def learning_rate_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """`learning_rate_spec(...)` as a `go.Figure` (same arguments)."""
    return go.Figure(learning_rate_spec(*args, **kwargs))


def loss_spec(
    scalars: pd.DataFrame, uirevision: Hashable = "loss", log_y: bool = False, height: int = 340,
    changes: pd.DataFrame | None = None, smoothing: float = 0.0,
    schedule_marks: Sequence[tuple[int, str]] = (),
) -> Spec:
    """Training loss (every recorded step) and validation loss (every `eval_every` steps).

    Args:
        scalars: long table `step, name, value` (names `train_loss`, `val_loss`, and for a
            schedule-free optimizer `engine.record_rows.VAL_LOSS_AT_VARIABLES`: the validation
            loss at y, drawn dotted beside `val_loss` at x).
        uirevision: kept in `layout.uirevision` so zoom survives refreshes.
        log_y: logarithmic loss axis.
        changes: `hyper_changes` rows; `user` / `auto-tune` ones get a vertical marker.
        smoothing: EMA weight per step in [0, 1) for the train loss (see `ema`); above 0 the
            raw curve stays as a faint `train loss (raw)` trace behind the smoothed one.
        schedule_marks: `(step, label)` of the learning-rate schedule's regime changes
            (`schedule_lines`).

    Returns:
        a plotly figure dict (`loss_figure`: the same as a `go.Figure`).

    Raises:
        ValueError: `smoothing` outside [0, 1) (`ema`).
    """
    fig: Spec = {"data": [], "layout": {}}
    train = _series(scalars, "train_loss")
    if not train.empty:
        steps, values = train["step"].to_numpy(), train["value"].to_numpy(float)
        if smoothing > 0:
            _add_scatter(fig, {"x": steps, "y": values, "name": "train loss (raw)",
                               "mode": "lines", "opacity": 0.3,
                               "line": {"color": qualitative.Plotly[0]}})
            values = np.asarray(ema(steps, values, smoothing))
        # a line through one point draws nothing: a run's first step shows as a marker
        _add_scatter(fig, {"x": steps, "y": values, "name": "train loss",
                           "mode": "lines" if len(steps) > 1 else "markers",
                           "marker": {"size": 5}, "line": {"color": qualitative.Plotly[0]}})
    rows = _series(scalars, "val_loss")
    at_y = _series(scalars, VAL_LOSS_AT_VARIABLES)
    if not rows.empty:
        _add_scatter(fig, {
            "x": rows["step"].to_numpy(), "y": rows["value"].to_numpy(float),
            "name": "val loss at x (the answer)" if not at_y.empty else "val loss",
            "mode": point_mode(len(rows)), "marker": {"size": 5},
            "line": {"color": qualitative.Plotly[1]}})
    if not at_y.empty:  # schedule-free: the training point y beside the average x
        _add_scatter(fig, {
            "x": at_y["step"].to_numpy(), "y": at_y["value"].to_numpy(float),
            "name": "val loss at y (the gradients' point)", "mode": point_mode(len(at_y)),
            "marker": {"size": 5}, "line": {"color": qualitative.Plotly[1], "dash": "dot"}})
    last = int(scalars["step"].max()) if scalars is not None and not scalars.empty else 0
    change_markers(fig, changes, span=last or None)
    schedule_lines(fig, schedule_marks)
    decimation_markers(fig, last)
    _axis_titles(fig, "step", "loss", type="log" if log_y else "linear")
    return _finish(fig, uirevision, "Loss", height)


def loss_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """`loss_spec(...)` as a `go.Figure` (same arguments)."""
    return go.Figure(loss_spec(*args, **kwargs))


def accuracy_spec(
    scalars: pd.DataFrame, uirevision: Hashable = "accuracy", height: int = 340
) -> Spec:
    """Validation accuracy against step (recorded every `eval_every` steps), as a plotly
    figure dict (`accuracy_figure`: the same as a `go.Figure`)."""
    fig: Spec = {"data": [], "layout": {}}
    rows = _series(scalars, "val_accuracy")
    if not rows.empty:
        _add_scatter(fig, {
            "x": rows["step"].to_numpy(), "y": rows["value"].to_numpy(float),
            "name": "val accuracy", "mode": point_mode(len(rows)), "marker": {"size": 5}})
    # an empty plot would autorange to 0..4: an accuracy lies in [0, 1]
    _axis_titles(fig, "step", "accuracy", rangemode="tozero",
                 **({"range": [0, 1]} if rows.empty else {}))
    return _finish(fig, uirevision, "Validation accuracy", height)


def accuracy_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """`accuracy_spec(...)` as a `go.Figure` (same arguments)."""
    return go.Figure(accuracy_spec(*args, **kwargs))


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "none"
    return f"{value:.6g}"


def hyper_trace_figure(
    changes: pd.DataFrame,
    last_step: int,
    uirevision: Hashable = "hypers",
    log_names: tuple[str, ...] = (),
    row_height: int = 150,
) -> go.Figure:
    """Each hyperparameter's value over the steps: one subplot row per hyperparameter.

    The trace is the step function (`line_shape="hv"`) through the `hyper_changes` rows, extended
    flat to `last_step`; every `user` / `auto-tune` change gets a marker whose hover text reads
    `old -> new, source`.

    Args:
        changes: `step, name, old, new, source` rows in the order they took effect.
        last_step: the run's last step (the lines end there).
        log_names: hyperparameters drawn on a log axis (e.g. learning rates).
    """
    names = [] if changes is None or changes.empty else list(dict.fromkeys(changes["name"]))
    if not names:
        return _finish(go.Figure(), uirevision, "Hyperparameters", row_height + 60)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[plain(n) for n in names])
    for row, name in enumerate(names, start=1):
        rows = changes[changes["name"] == name]
        shown = plain(name)
        steps = [int(s) for s in rows["step"]]
        values = [float(v) for v in rows["new"]]
        end = max(int(last_step), steps[-1])
        fig.add_trace(go.Scatter(
            x=steps + [end], y=values + [values[-1]], name=shown, mode="lines",
            line_shape="hv", showlegend=False, hovertemplate=f"{shown}=%{{y:.6g}}<extra></extra>",
        ), row=row, col=1)
        marked = rows[rows["source"].isin(MARKED_SOURCES)]
        if not marked.empty:
            text = [f"{_fmt(o)} -> {_fmt(n)}, {plain(s)}"
                    for o, n, s in zip(marked["old"], marked["new"], marked["source"])]
            fig.add_trace(go.Scatter(
                x=[int(s) for s in marked["step"]], y=[float(v) for v in marked["new"]],
                name=f"{shown} changes", mode="markers", text=text, showlegend=False,
                marker={"size": 9, "symbol": "diamond", "color": "crimson"},
                hovertemplate=f"{shown} at step %{{x}}: %{{text}}<extra></extra>",
            ), row=row, col=1)
        if name in log_names:
            fig.update_yaxes(type="log", row=row, col=1)
    fig.update_xaxes(title_text="step", row=len(names), col=1)
    fig = _finish(fig, uirevision, "", row_height * len(names) + 40)
    fig.update_layout(hovermode="closest", margin={"t": 30})
    return fig


def hyper_trace_dict(
    changes: pd.DataFrame,
    last_step: int,
    uirevision: Hashable = "hypers",
    log_names: tuple[str, ...] = (),
    row_height: int = 150,
) -> dict:
    """`hyper_trace_figure(...)` as a plotly figure dict, built once per set of changes.

    A live run redraws this chart twice a second while only its end moves (the last step):
    `make_subplots` and the traces cost ~30 ms per call for four hyperparameters, a cache hit
    well under 1 ms. The cached dict is never changed: each call gets a new figure dict and new
    dicts for the lines it extends to `last_step` (the layout is shared: read it, do not edit).

    Args and result: as `hyper_trace_figure` (a dict `{"data": [...], "layout": {...}}`, which
    `st.plotly_chart` and `components.live_chart` draw as they draw a Figure).
    """
    key = (changes.to_csv(index=False) if changes is not None else "", uirevision,
           tuple(log_names), row_height)
    base = _HYPER_TRACES.get(key)
    if base is None:  # the lines end at their last change; extended below
        base = hyper_trace_figure(changes, 0, uirevision, log_names, row_height).to_plotly_json()
        if len(_HYPER_TRACES) >= _HYPER_TRACES_KEPT:
            _HYPER_TRACES.clear()  # a handful of runs are watched at once: rebuilding is cheap
        _HYPER_TRACES[key] = base
    data = []
    for trace in base["data"]:
        if trace.get("line", {}).get("shape") == "hv":  # a value line: extend it to the end
            x = list(trace["x"])
            trace = {**trace, "x": x[:-1] + [max(int(last_step), x[-2])]}
        data.append(trace)
    return {"data": data, "layout": base["layout"]}


# (changes as CSV, uirevision, log_names, row_height) -> figure dict of `hyper_trace_dict`
_HYPER_TRACES: dict[tuple, dict] = {}
_HYPER_TRACES_KEPT = 64
