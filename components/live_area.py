"""A run's live area: a fragment that re-reads the run from the store every `REFRESH_S` while it
trains (less often when many pages watch live runs: `components.refresh_pace`), and draws it
with the page's own body.

The Train and Hyper-gradients pages share it: the run may vanish from the store (deleted on the
Runs page), and the moment it ends the whole page is drawn once more, so that the parts outside
the fragment (run selector labels, buttons that only an active run offers) leave their live mode.
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Callable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from components import page_visibility
from components.refresh_pace import PACE
from components.page_store import store
from components.store_guard import guard_page
from runs.protocol import LIVE_STATUSES

REFRESH_S = 0.5  # seconds between two reads of a training run
HIDDEN_REFRESH_S = 5.0  # the same, while the browser tab is hidden (nobody sees the page)
# A page resets its timer to a new pace (a whole page run) at most this often.
REPACE_AFTER_S = 15.0
_EVERY_KEY = "_live_refresh_every"  # session state: (interval the page set, hidden, when)

Body = Callable[[dict[str, Any], bool], None]


def live_area(run_id: int, active: bool, body: Body,
             live_statuses: tuple[str, ...] = LIVE_STATUSES) -> None:
    """Draw run `run_id` with `body(run, live)` inside a fragment, rerun every `REFRESH_S`
    seconds while `active` and the tab is shown, every `HIDDEN_REFRESH_S` while it is hidden
    (`components.page_visibility`), never once the run has ended (a static drawing: the
    browser's timer is cleared by the page run that draws it). When many pages of this server
    watch live runs, a shown page refreshes at their shared pace instead (`PACE.interval()`,
    at least `REFRESH_S`), said under the run.

    Args:
        run_id: the store's run id.
        active: the run's status, when the page read it, is in `live_statuses`.
        body: draws the run dict of `RunStore.run`; its second argument says whether the run
            is in `live_statuses` now (charts patched in place).
        live_statuses: the statuses the page treats as live (the Train page counts a queued
            run, the Hyper-gradients page only one that has a process).
    """
    hidden = active and page_visibility.hidden()
    every = refresh_every(active, hidden, PACE.interval())
    st.session_state[_EVERY_KEY] = (every, hidden, time.monotonic())
    st.fragment(run_every=every)(live_body)(
        run_id, active, body, live_statuses)


def refresh_every(active: bool, hidden: bool, pace: float = REFRESH_S) -> float | None:
    """Seconds between two refreshes of a live area: the server's pace (`REFRESH_S` when it
    has room) for a live run on a shown tab, at least `HIDDEN_REFRESH_S` on a hidden one, None
    (no timer) for a run that has ended."""
    if not active:
        return None
    return max(HIDDEN_REFRESH_S, pace) if hidden else max(REFRESH_S, pace)


def _keep_pace(pace_line: Any) -> None:
    """Say the pace in `pace_line` (an `st.empty` slot) when it is slower than `REFRESH_S`, and
    rerun the page (which sets the timer again) when the server's pace moved away from the one
    this page set, at most once per `REPACE_AFTER_S`."""
    every, hidden, since = st.session_state.get(_EVERY_KEY, (None, False, 0.0))
    if every is None:
        return
    if not hidden and every > REFRESH_S:
        watchers = PACE.watchers()
        who = "page watches a live run" if watchers == 1 else "pages watch live runs"
        pace_line.caption(f"Live refresh every {every:g} s: {watchers} {who} on this server; "
                          "live pages share its CPU.")
    if refresh_every(True, hidden, PACE.interval_from(every)) != every and \
            time.monotonic() - since >= REPACE_AFTER_S:
        st.rerun(scope="app")


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
    pace_line = st.empty()  # above the run's status line, filled once the refresh is measured
    started = time.thread_time()  # this session's script thread only: others' load excluded
    body(run, active)
    if active:
        ctx = get_script_run_ctx()
        PACE.note(ctx.session_id if ctx else "bare", time.thread_time() - started)
        _keep_pace(pace_line)


__all__ = ["HIDDEN_REFRESH_S", "REFRESH_S", "REPACE_AFTER_S", "live_area", "live_body",
           "refresh_every"]
