"""The one way a page draws a plotly figure: full width, without the plotly logo, and patched in
place while a run trains.

A live chart goes through `components.live_chart` (the same browser element on every refresh,
so it is never blank between two refreshes); an ended run's chart, and every chart of a page
that shows no live run, is a plain `st.plotly_chart`.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from components import live_chart

DEFAULT_HEIGHT = 340  # px, for a figure whose layout sets none


def chart(fig: go.Figure | dict[str, Any], key: str, live: bool = False) -> None:
    """Draw `fig` under `key`.

    Args:
        fig: a plotly Figure, or a figure dict (`{"data": [...], "layout": {...}}`, as the
            `*_spec` builders return: not validated on a live refresh, validated once by
            `st.plotly_chart` otherwise).
        key: the element's key: the same key on the next refresh updates the same chart.
        live: patch the chart in place (`components.live_chart`); its height is the figure's
            `layout.height` in pixels, or `DEFAULT_HEIGHT`.

    Raises:
        ValueError: a live figure's height outside `live_chart.MIN_HEIGHT`..`MAX_HEIGHT`.
    """
    if live:
        height = fig["layout"].get("height") if isinstance(fig, dict) else fig.layout.height
        live_chart.live_chart(fig, key, height=int(height or DEFAULT_HEIGHT))
    else:  # a dict as a Figure: `st.plotly_chart` refuses a dict without traces
        figure = go.Figure(fig) if isinstance(fig, dict) else fig
        st.plotly_chart(figure, key=key, width="stretch", config={"displaylogo": False})


__all__ = ["DEFAULT_HEIGHT", "chart"]
