"""A run's live area: a fragment that re-reads the run from the store every `REFRESH_S` while it
trains, and draws it with the page's own body.

The Train and Hyper-gradients pages share it: the run may vanish from the store (deleted on the
Runs page), and the moment it ends the whole page is drawn once more, so that the parts outside
the fragment (run selector labels, buttons that only an active run offers) leave their live mode.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import streamlit as st

from components import page_visibility
from components.page_store import store
from components.store_guard import guard_page
from runs.protocol import LIVE_STATUSES

REFRESH_S = 0.5  # seconds between two reads of a training run
HIDDEN_REFRESH_S = 5.0  # the same, while the browser tab is hidden (nobody sees the page)

Body = Callable[[dict[str, Any], bool], None]


def live_area(run_id: int, active: bool, body: Body,
             live_statuses: tuple[str, ...] = LIVE_STATUSES) -> None:
    """Draw run `run_id` with `body(run, live)` inside a fragment, rerun every `REFRESH_S`
    seconds while `active` and the tab is shown, every `HIDDEN_REFRESH_S` while it is hidden
    (`components.page_visibility`), never once the run has ended (a static drawing: the
    browser's timer is cleared by the page run that draws it).

    Args:
        run_id: the store's run id.
        active: the run's status, when the page read it, is in `live_statuses`.
        body: draws the run dict of `RunStore.run`; its second argument says whether the run
            is in `live_statuses` now (charts patched in place).
        live_statuses: the statuses the page treats as live (the Train page counts a queued
            run, the Hyper-gradients page only one that has a process).
    """
    every = refresh_every(active, active and page_visibility.hidden())
    st.fragment(run_every=every)(live_body)(
        run_id, active, body, live_statuses)


def refresh_every(active: bool, hidden: bool) -> float | None:
    """Seconds between two refreshes of a live area: `REFRESH_S` for a live run on a shown
    tab, `HIDDEN_REFRESH_S` on a hidden one, None (no timer) for a run that has ended."""
    if not active:
        return None
    return HIDDEN_REFRESH_S if hidden else REFRESH_S


@guard_page  # a read-only or full data directory: one line, not a traceback
def live_body(run_id: int, was_active: bool, body: Body,
              live_statuses: tuple[str, ...] = LIVE_STATUSES) -> None:
    """One refresh of `live_area`: the run as stored now, drawn by `body`."""
    try:
        run = store().run(run_id)
    except KeyError:
        st.warning(f"run #{run_id} is no longer in the store")
        return
    active = run["status"] in live_statuses
    if was_active and not active:
        st.rerun(scope="app")  # once: redraw the whole page (selector labels, static mode)
    body(run, active)


__all__ = ["HIDDEN_REFRESH_S", "REFRESH_S", "live_area", "live_body", "refresh_every"]
