"""Pure builders of the Runs page: the runs table, legend names and overlay figures.

DataFrames from the run store in, a DataFrame or a plotly `go.Figure` out; no Streamlit. Every
figure sets `layout.uirevision` to the value passed in (keep it stable while the same runs are
compared so zoom survives reruns). Each run keeps one colour in every chart (`run_colors`).
"""

from __future__ import annotations

import json
from typing import Any
from collections.abc import Hashable, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from components.figures import _finish, decimation_markers, plain, point_mode

KEY_HYPERS = ("learning_rate", "beta_1", "beta_2", "momentum", "rho", "weight_decay")
IGNORED_FIELDS = ("device",)  # shown in the table, not a difference worth a legend entry


# ----- comparing configs ----------------------------------------------------------------------
def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def differing_fields(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Dotted paths of the config fields whose values are not the same in every config.

    Nested dicts are compared leaf by leaf (`hyperparameters.learning_rate`); a field present in
    some configs only counts as differing. Order: first appearance over the configs.
    Fewer than two configs differ in nothing (`[]`).
    """
    if len(configs) < 2:
        return []
    flat = [_flatten(c) for c in configs]
    paths = list(dict.fromkeys(p for f in flat for p in f))
    return [p for p in paths
            if len({json.dumps(f[p], default=str) if p in f else "<missing>" for f in flat}) > 1]


def legend_fields(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The `differing_fields` worth naming in a legend: `device` is left out, and so is a field
    missing from some configs whose present values all agree (it comes with the optimizer,
    e.g. Adam's `beta_1` beside SGD, and `optimizer=` already says so)."""
    flat = [_flatten(c) for c in configs]
    out = []
    for path in differing_fields(configs):
        if path in IGNORED_FIELDS:
            continue
        present = {json.dumps(f[path], default=str) for f in flat if path in f}
        if len(present) > 1:
            out.append(path)
    return out


SHORT_NAMES = {"learning_rate": "lr", "eval_every": "eval every", "batch_size": "batch"}


def _short(path: str) -> str:
    leaf = path.rsplit(".", 1)[-1]
    return SHORT_NAMES.get(leaf, leaf)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def run_labels(run_ids: Sequence[int], configs: Sequence[Mapping[str, Any]],
               names: Sequence[str] | None = None) -> dict[int, str]:
    """Legend name of each run: `#id` (+ its name) + the fields that differ between the runs.

    Example: `#3 sgd, lr=0.1` when optimizer and learning rate are what differs (fields as
    `legend_fields`; the optimizer by its name alone, `SHORT_NAMES` abbreviate). Identical
    configs give just `#id`.
    """
    fields = legend_fields(configs)
    out = {}
    for index, (run_id, config) in enumerate(zip(run_ids, configs)):
        flat = _flatten(config)
        parts = [_value(flat.get(f)) if f == "optimizer" else f"{_short(f)}={_value(flat.get(f))}"
                 for f in fields]
        name = names[index] if names else ""
        head = f"#{run_id}" + (f" {name}" if name else "")
        out[int(run_id)] = head + (f" {', '.join(parts)}" if parts else "")
    return out


def run_colors(run_ids: Sequence[int]) -> dict[int, str]:
    """One plotly colour per run, in the order given."""
    palette = qualitative.Plotly
    return {int(r): palette[i % len(palette)] for i, r in enumerate(run_ids)}


# ----- the table ------------------------------------------------------------------------------
def overview_table(runs: pd.DataFrame, finals: pd.DataFrame) -> pd.DataFrame:
    """The Runs page table, one row per run (the order of `runs`).

    Args:
        runs: `store.runs()` (id, name, created, status, optimizer, dataset, model, seed, device,
            step, total_steps, config JSON).
        finals: `store.last_scalars()` (run_id, name, step, value).

    Returns:
        Columns id, name, optimizer, hyperparameters (text of the key ones), learning_rate,
        dataset, model, seed, device, status, step, total_steps, val_loss, val_accuracy,
        created (datetime, UTC).
    """
    columns = ["id", "name", "optimizer", "hyperparameters", "learning_rate", "dataset", "model",
               "seed", "device", "status", "step", "total_steps", "val_loss", "val_accuracy",
               "created"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    configs = [json.loads(c) for c in runs["config"]]
    hypers = [c.get("hyperparameters", {}) for c in configs]
    table = runs.copy()
    table["hyperparameters"] = [
        ", ".join(f"{k}={_value(h[k])}" for k in KEY_HYPERS if k in h) for h in hypers]
    table["learning_rate"] = [h.get("learning_rate") for h in hypers]
    table["created"] = pd.to_datetime(table["created"], unit="s")
    for name in ("val_loss", "val_accuracy"):
        rows = finals[finals["name"] == name] if not finals.empty else finals
        value = dict(zip(rows["run_id"], rows["value"])) if not rows.empty else {}
        table[name] = [value.get(i) for i in table["id"]]
    table["val_loss"] = table["val_loss"].astype(float)
    table["val_accuracy"] = table["val_accuracy"].astype(float)
    return table[columns].reset_index(drop=True)


def filter_table(table: pd.DataFrame, text: str = "", statuses: Sequence[str] = (),
                 optimizers: Sequence[str] = ()) -> pd.DataFrame:
    """Rows whose status / optimizer are among those given (all when empty) and whose name,
    optimizer, dataset, model or hyperparameters contain `text` (case-insensitive)."""
    keep = pd.Series(True, index=table.index)
    if statuses:
        keep &= table["status"].isin(statuses)
    if optimizers:
        keep &= table["optimizer"].isin(optimizers)
    if text:
        haystack = table[["name", "optimizer", "dataset", "model", "hyperparameters"]].astype(str)
        found = haystack.apply(lambda col: col.str.contains(text, case=False, regex=False))
        keep &= found.any(axis=1)
    return table[keep].reset_index(drop=True)


# ----- overlay figures ------------------------------------------------------------------------
def _line(x, y, label: str, color: str, **kwargs) -> go.Scatter:
    """A run's line; `label` is plain text (escaped here: run names are typed by users)."""
    return go.Scatter(x=[int(v) for v in x], y=[float(v) for v in y], name=plain(label),
                      line={"color": color, **kwargs.pop("line", {})}, **kwargs)


def overlay_loss_figure(scalars: Mapping[int, pd.DataFrame], labels: Mapping[int, str],
                        uirevision: Hashable = "runs-loss", log_y: bool = False,
                        height: int = 380) -> go.Figure:
    """Training loss of every run (solid) and its validation loss (dotted, markers).

    Args:
        scalars: run id -> `step, name, value` long table.
        labels: run id -> legend name (`run_labels`).
    """
    colors = run_colors(list(scalars))
    fig = go.Figure()
    for run_id, frame in scalars.items():
        for name, suffix, extra in (("train_loss", "train", {"mode": "lines"}),
                                    ("val_loss", "val", {"line": {"dash": "dot"},
                                                         "marker": {"size": 5}})):
            rows = frame[frame["name"] == name].sort_values("step", kind="stable")
            if not rows.empty:
                fig.add_trace(_line(rows["step"], rows["value"], f"{labels[run_id]} · {suffix}",
                                    colors[run_id], legendgroup=str(run_id),
                                    **{"mode": point_mode(len(rows)), **extra}))
    # past these steps a train-loss point is the mean of 10x more steps: the drop in noise
    # there is the recording's, not an effect of a change
    decimation_markers(fig, max((int(f["step"].max()) for f in scalars.values() if not f.empty),
                                default=0))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss", type="log" if log_y else "linear")
    fig = _finish(fig, uirevision, "Loss (solid: train, dotted: validation)", height)
    fig.update_layout(legend={"orientation": "h", "y": -0.18, "yanchor": "top", "x": 0.0,
                              "xanchor": "left"}, hovermode="closest")
    return fig


def overlay_validation_figure(scalars: Mapping[int, pd.DataFrame], labels: Mapping[int, str],
                              uirevision: Hashable = "runs-val", height: int = 420) -> go.Figure:
    """Validation loss and validation accuracy of every run (two rows, shared step axis)."""
    colors = run_colors(list(scalars))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=["validation loss", "validation accuracy"])
    for run_id, frame in scalars.items():
        for row, name in enumerate(("val_loss", "val_accuracy"), start=1):
            rows = frame[frame["name"] == name].sort_values("step", kind="stable")
            if not rows.empty:
                fig.add_trace(_line(rows["step"], rows["value"], labels[run_id], colors[run_id],
                                    mode=point_mode(len(rows)), marker={"size": 5},
                                    legendgroup=str(run_id), showlegend=row == 1), row=row, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig = _finish(fig, uirevision, "Validation metrics", height)
    fig.update_layout(hovermode="closest")
    return fig


# `hyper_changes` sources that are not a change made while the run trained: the values a run
# starts with, and the retrace counts (numbers of compiles, not hyperparameters).
NOT_LIVE_SOURCES = ("init",)
TRACES_NAME = "step traces"


def live_changes(changes: pd.DataFrame) -> pd.DataFrame:
    """A run's changes made while it trained: `step, name, old, new, source` rows of
    `hyper_changes` other than its starting values and the retrace counts, in order."""
    columns = ["step", "name", "old", "new", "source"]
    if changes is None or changes.empty:
        return pd.DataFrame(columns=columns)
    live = changes[~changes["source"].isin(NOT_LIVE_SOURCES) & (changes["name"] != TRACES_NAME)]
    return live[columns].reset_index(drop=True)


def trajectory_differences(changes: Mapping[int, pd.DataFrame]) -> list[str]:
    """Names of the hyperparameters whose trajectories differ between the runs: the same name
    changed at other steps or to other values while training (`live_changes`). Runs that
    started from the same config but were steered differently differ here, not in their
    configs. Fewer than two runs differ in nothing."""
    if len(changes) < 2:
        return []
    paths = {run_id: live_changes(frame) for run_id, frame in changes.items()}
    names = list(dict.fromkeys(n for f in paths.values() for n in f["name"]))
    return [name for name in names
            if len({tuple(zip(f.loc[f["name"] == name, "step"].astype(int),
                              f.loc[f["name"] == name, "new"].astype(str)))
                    for f in paths.values()}) > 1]


def live_changes_table(changes: Mapping[int, pd.DataFrame], labels: Mapping[int, str]
                       ) -> pd.DataFrame:
    """Every run's live changes in one table: `run, step, name, old, new, source`, by run then
    step (the Runs page lists them under the comparison)."""
    frames = [live_changes(frame).assign(run=labels[run_id]) for run_id, frame in changes.items()]
    frames = [f for f in frames if not f.empty]
    columns = ["run", "step", "name", "old", "new", "source"]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def overlay_hyper_figure(changes: Mapping[int, pd.DataFrame], last_steps: Mapping[int, int],
                         labels: Mapping[int, str], uirevision: Hashable = "runs-hypers",
                         row_height: int = 150) -> go.Figure:
    """Every hyperparameter's trace (step function through `hyper_changes`), one row each,
    one line per run; rows are the union of the runs' hyperparameter names."""
    colors = run_colors(list(changes))
    names = list(dict.fromkeys(n for f in changes.values() if not f.empty for n in f["name"]))
    if not names:
        return _finish(go.Figure(), uirevision, "Hyperparameters", row_height + 60)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=[plain(n) for n in names])
    shown: set[int] = set()
    for run_id, frame in changes.items():
        for row, name in enumerate(names, start=1):
            rows = frame[frame["name"] == name] if not frame.empty else frame
            if rows.empty:
                continue
            steps = [int(s) for s in rows["step"]]
            values = [float(v) for v in rows["new"]]
            end = max(int(last_steps.get(run_id, steps[-1])), steps[-1])
            fig.add_trace(_line(steps + [end], values + [values[-1]], labels[run_id],
                                colors[run_id], mode="lines", line_shape="hv",
                                legendgroup=str(run_id), showlegend=run_id not in shown),
                          row=row, col=1)
            shown.add(run_id)
    fig.update_xaxes(title_text="step", row=len(names), col=1)
    fig = _finish(fig, uirevision, "Hyperparameter traces", row_height * len(names) + 80)
    fig.update_layout(hovermode="closest")
    return fig


def overlay_slot_figure(stats: Mapping[int, pd.DataFrame], variable: str, slot: str,
                        labels: Mapping[int, str], statistic: str = "norm",
                        uirevision: Hashable = "runs-slots", height: int = 380) -> go.Figure:
    """One slot statistic (`norm`, `mean` or `std`) of (`variable`, `slot`) for every run."""
    colors = run_colors(list(stats))
    fig = go.Figure()
    for run_id, frame in stats.items():
        if frame.empty:
            continue
        rows = frame[(frame["variable"] == variable) & (frame["slot"] == slot)]
        rows = rows.sort_values("step", kind="stable")
        if not rows.empty:
            fig.add_trace(_line(rows["step"], rows[statistic], labels[run_id], colors[run_id],
                                mode="lines"))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=statistic)
    fig = _finish(fig, uirevision, f"{statistic} of slot {slot} of {variable}", height)
    fig.update_layout(hovermode="closest")
    return fig


def overlay_hypergradient_figure(hypergrads: Mapping[int, pd.DataFrame],
                                 labels: Mapping[int, str],
                                 uirevision: Hashable = "runs-hypergrads",
                                 row_height: int = 170) -> go.Figure:
    """d(validation loss)/d(hyperparameter) over the steps: one row per hyperparameter, one line
    per run (runs without recorded hyper-gradients are skipped).

    Args:
        hypergrads: run id -> `RunStore.hypergradients` frame (`step, name, exact, ...`); the
            forward-mode `exact` value is drawn.
    """
    colors = run_colors(list(hypergrads))
    usable = {r: f for r, f in hypergrads.items() if not f.empty and "exact" in f}
    names = list(dict.fromkeys(n for f in usable.values() for n in f["name"]))
    if not names:
        return _finish(go.Figure(), uirevision, "Hyper-gradients", row_height + 60)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[plain(f"dL_val/d{n}") for n in names])
    shown: set[int] = set()
    for run_id, frame in usable.items():
        for row, name in enumerate(names, start=1):
            rows = frame[frame["name"] == name].sort_values("step", kind="stable")
            if rows.empty:
                continue
            fig.add_trace(_line(rows["step"], rows["exact"], labels[run_id], colors[run_id],
                                mode="lines", legendgroup=str(run_id),
                                showlegend=run_id not in shown), row=row, col=1)
            shown.add(run_id)
    fig.update_xaxes(title_text="step", row=len(names), col=1)
    fig = _finish(fig, uirevision, "Hyper-gradients", row_height * len(names) + 80)
    fig.update_layout(hovermode="closest")
    return fig
