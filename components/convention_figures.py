"""Pure figure builders of the Conventions view: `teaching.conventions.compare` tables in,
plotly figures out (no Streamlit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import plain

DASHES = ("solid", "dash", "dot", "dashdot")
# Relative loss difference below which two curves are one line on a log axis 380 px high.
COINCIDE_RTOL = 1e-3


def _coincides(loss, reference) -> bool:
    """True when `loss` stays within `COINCIDE_RTOL` of `reference` at every common step."""
    n = min(len(loss), len(reference))
    return n > 0 and bool(np.all(np.abs(loss[:n] - reference[:n])
                                 <= COINCIDE_RTOL * np.abs(reference[:n])))


def conventions_figure(table: pd.DataFrame, family: str, change_at: int | None = None) -> go.Figure:
    """Two panels over steps: each convention's distance from the first (max |w - w_first|,
    log axis; the first convention itself is 0 and omitted) and each one's loss.

    Args:
        table: columns `step`, `convention`, `max_abs_difference`, `loss`.
        family: the title.
        change_at: the step where the learning rate changed (a dashed line), or None.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "distance from the first convention: max |w - w_first|", "loss"))
    labels = list(dict.fromkeys(table["convention"]))
    first_loss = table[table["convention"] == labels[0]]["loss"].to_numpy(float)
    for index, label in enumerate(labels):
        rows = table[table["convention"] == label]
        # Conventions often train to losses equal to the plot's resolution: a dash pattern per
        # convention (and wider lines below narrower ones) keeps coinciding lines visible, and
        # the legend says which ones coincide.
        line = {"color": f"hsl({index * 110}, 60%, 45%)", "dash": DASHES[index % len(DASHES)],
                "width": max(3.5 - index, 1.5)}
        name = plain(label)
        if index > 0 and _coincides(rows["loss"].to_numpy(float), first_loss):
            name += f" (loss identical to {plain(labels[0])} at this scale)"
        if index > 0:
            fig.add_trace(go.Scatter(x=rows["step"], y=rows["max_abs_difference"].clip(lower=1e-18),
                                     name=name, mode="lines", legendgroup=label, line=line), 1, 1)
        fig.add_trace(go.Scatter(x=rows["step"], y=rows["loss"], name=name, mode="lines",
                                 legendgroup=label, showlegend=index == 0, line=line), 1, 2)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="step")
    if change_at is not None:
        for col in (1, 2):
            fig.add_vline(x=change_at, line_dash="dash", line_color="grey", row=1, col=col)
    fig.update_layout(title={"text": plain(family), "x": 0.0}, uirevision=family, height=380,
                      margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      legend={"orientation": "h", "y": -0.2})
    return fig


__all__ = ["conventions_figure"]
