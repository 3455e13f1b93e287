"""Pure figure builders of the Inside-one-step page (NumPy arrays in, plotly figures out)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
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


__all__ = ["as_matrix", "heatmap_row"]
