"""A live page's copy of its run's scalars, grown by the rows stored since the last refresh.

A Train page refreshes twice a second; reading the whole run each time costs a query and a
DataFrame of up to `DISPLAY_POINTS` steps per scalar, over and over, for rows the page already
has. The session keeps the rows it has read (thinned as `RunStore.scalars(max_points=...)`
thins them) with the store's cursor (`RunStore.scalars_since`), and each refresh reads only the
rows after it. When the run grows past the next display width (every 2,000, 4,000, 10,000 ...
steps for 2,000 points) the copy is read again in full: a width of 5 keeps steps that a width
of 2 dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from runs.store.records import display_width
from runs.store.run_store import RunStore

_KEY = "_live_scalars"  # session state: {run id: _Copy}, the page's current run only


@dataclass
class _Copy:
    width: int  # display width (steps) the rows are thinned to
    cursor: int  # `RunStore.scalars_since` cursor of the last row read
    rows: pd.DataFrame  # step, name, value; thinned to `width` (heads: see `thin`)


def thin(rows: pd.DataFrame, width: int, head: int) -> pd.DataFrame:
    """The rows `RunStore.scalars(max_points=...)` keeps at display `width`: steps that are
    multiples of it, steps 0 and 1, and the run's last step `head` (the curves' live end)."""
    if width == 1 or rows.empty:
        return rows
    steps = rows["step"]
    return rows[(steps % width == 0) | (steps <= 1) | (steps == head)]


def scalars(store: RunStore, run: dict[str, Any], max_points: int) -> pd.DataFrame:
    """`step, name, value` rows of `run` as `store.scalars(run["id"], max_points=max_points)`
    returns them (ordered by the order stored, which is by step for each name), read
    incrementally: only the rows stored since this session's previous call for this run.

    Args:
        store: the page's run store.
        run: the run dict of `RunStore.run` (its `id` and `step`).
        max_points: about this many steps per scalar (`RunStore.scalars`), > 0.

    Raises:
        runs.store.files.StoreUnavailable: as `RunStore.scalars_since`.
    """
    copies: dict[int, _Copy] = st.session_state.setdefault(_KEY, {})
    rid = int(run["id"])
    width = display_width(int(run["step"]), max_points)
    copy = copies.get(rid)
    if copy is None or copy.width != width:
        rows, cursor = store.scalars_since(rid, 0)
        parts = [rows]
    else:
        new, cursor = store.scalars_since(rid, copy.cursor)
        parts = [copy.rows, new] if not new.empty else [copy.rows]
    rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    head = max(int(run["step"]), int(rows["step"].max()) if not rows.empty else 0)
    rows = thin(rows, width, head).reset_index(drop=True)
    copies.clear()  # one run per page: the copy of a run no longer shown is dropped
    copies[rid] = _Copy(width, cursor, rows)
    return rows


__all__ = ["scalars", "thin"]
