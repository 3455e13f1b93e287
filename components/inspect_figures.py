"""Pure figure and table builders of the Inside-one-step page and the Train page's Config tab
(NumPy arrays in, plotly figures out; JSON rows in, pandas tables out). No TensorFlow here: the
Streamlit server imports this module."""

from __future__ import annotations

from collections.abc import Mapping

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def as_matrix(array: np.ndarray) -> np.ndarray:
    """A 2-D view for a heatmap: scalars -> [1, 1], vectors -> [1, n], higher ranks -> [rows, -1]."""
    array = np.asarray(array, dtype=np.float64)
    if array.ndim == 0:
        return array.reshape(1, 1)
    if array.ndim == 1:
        return array.reshape(1, -1)
    return array.reshape(array.shape[0], -1)


def heatmap_row(arrays: Mapping[str, np.ndarray], title: str = "", height: int = 240,
                symmetric: bool = True) -> go.Figure:
    """One heatmap per named array, side by side (subplot title = name, trace name = name).

    With `symmetric`, each heatmap's colour scale is centred on 0 (RdBu), so a sign is readable.
    """
    names = list(arrays)
    fig = make_subplots(rows=1, cols=max(len(names), 1), subplot_titles=names or [""],
                        horizontal_spacing=0.04)
    for i, name in enumerate(names, start=1):
        z = as_matrix(arrays[name])
        bound = float(np.max(np.abs(z))) or 1.0
        fig.add_trace(go.Heatmap(
            z=z, name=name, colorscale="RdBu", reversescale=True, showscale=False,
            zmin=-bound if symmetric else None, zmax=bound if symmetric else None,
            hovertemplate=f"{name}[%{{y}}, %{{x}}] = %{{z:.4g}}<extra></extra>",
        ), row=1, col=i)
        fig.update_yaxes(autorange="reversed", showticklabels=z.shape[0] > 1, row=1, col=i)
    fig.update_layout(title={"text": title, "x": 0.0}, height=height,
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig


# Column titles of `hyper_kinds_frame`: what each base-class method produced.
KIND_COLUMNS = {
    "stored": "_hyper[name]",
    "aggregation": "aggregation=",
    "get_hyper": "_get_hyper(name, dtype)",
    "decayed_lr": "_decayed_lr(dtype)",
    "serialized": "_serialize_hyperparameter",
    "set_hyper_now": "_set_hyper(name, x) now",
}


def _exact(value: float) -> str:
    # repr, not a rounded format: the point is to show 0.0010000000474974513 where it happens
    return repr(float(value))


def _get_hyper_text(row: Mapping) -> str:
    if row.get("get_hyper_value") is None:
        return str(row.get("get_hyper_type") or "")
    return f"{row['get_hyper_type']} {row['get_hyper_dtype']} {_exact(row['get_hyper_value'])}"


def _serialized_text(row: Mapping) -> str:
    value = row.get("serialized")
    if isinstance(value, dict):  # a schedule: Keras's {"class_name", "config", ...}
        # class and config only (Keras also writes module / registered_name); compact separators
        # keep the cell narrow enough for the table to fit the page
        shown = {"class_name": value.get("class_name"), "config": value.get("config")}
        return f"dict {json.dumps(shown, separators=(', ', ':'))}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{row.get('serialized_type') or type(value).__name__} {_exact(value)}"
    return str(value)


def hyper_kinds_frame(rows: list[Mapping]) -> pd.DataFrame:
    """A readable table of `optimizers.hyper_kinds` rows (JSON dicts, e.g. read from the run store).

    Columns: "owner" (only when some row is a wrapper's inner optimizer's), "name", "kind", then
    `KIND_COLUMNS` in order. Numbers are shown exactly (`repr`), a schedule's serialized dict as
    JSON of its class_name and config, a missing value as "".
    """
    records = []
    for row in rows:
        decayed = row.get("decayed_lr")
        records.append({
            "owner": row.get("owner", "optimizer"),
            "name": row.get("name", ""),
            "kind": row.get("kind", ""),
            KIND_COLUMNS["stored"]: row.get("stored", ""),
            KIND_COLUMNS["aggregation"]: row.get("aggregation") or "",
            KIND_COLUMNS["get_hyper"]: _get_hyper_text(row),
            KIND_COLUMNS["decayed_lr"]: "" if decayed is None else
            f"{_exact(decayed)} at iterations {row.get('iterations')}",
            KIND_COLUMNS["serialized"]: _serialized_text(row),
            KIND_COLUMNS["set_hyper_now"]: row.get("set_hyper_now") or "",
        })
    frame = pd.DataFrame(records, columns=["owner", "name", "kind", *KIND_COLUMNS.values()])
    if not (frame["owner"] == "inner").any():
        frame = frame.drop(columns="owner")
    return frame


__all__ = ["KIND_COLUMNS", "as_matrix", "heatmap_row", "hyper_kinds_frame"]
