"""The Train page: set up a run, start it, watch it live and change its hyperparameters live.

Thin on purpose: no TensorFlow maths here. The sidebar (`components.train_setup`) builds a
`RunConfig`; Start and live changes go through `components.train_actions` and
`runs.service.control`; the live area below re-reads the run store every 0.5 s
(`components.live_area`) and draws it with the pure builders of `components.figures`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from components import lesson_panel, run_controls, run_panels, session_runs, setup_state
from components import live_area, live_rows, lr_range_panel, train_setup
from components import class_join, dynamics_panel
from components.hyper_widgets import default_value
from components.page_store import store
from components.store_guard import guard_page
from components.train_actions import run_specs, selected_run
from runs.protocol import ACTIVE_STATUSES, LIVE_STATUSES, QUEUED
from runs.service import ray_hosts

# ----- live area ------------------------------------------------------------------------------
def run_label(runs_table: pd.DataFrame, run_id: int) -> str:
    row = runs_table.loc[runs_table["id"] == run_id]
    if row.empty:
        return f"#{run_id}"
    r = row.iloc[0]
    # No live status here: the selector is outside the refreshing fragment, so a status in
    # the label would go stale while the run trains (the status line below is live).
    return f"#{run_id} {r['optimizer']} on {r['dataset']}/{r['model']}, {r['total_steps']} steps"


def live_view(run: dict[str, Any], active: bool) -> None:
    """One refresh of the live area (`components.live_area`): status, controls and the chosen
    view of the run."""
    run_id = run["id"]
    scalars = live_rows.scalars(store(), run, run_panels.DISPLAY_POINTS)  # new rows only
    # One container for everything above the charts: the number of messages varies from one
    # refresh to the next, and a chart whose position among its siblings shifts is remounted
    # by the browser (drawn from scratch: blank for a moment). Inside a container the shift
    # stays inside it, and the charts below keep their element identity.
    with st.container():
        st.markdown(run_controls.status_line(store(), run, scalars))
        ray_hosts.report_problem(st.error)  # the Ray cluster refused or gone: said, not hidden
        if run["total_steps"] < run_controls.continuous_steps():
            st.progress(min(run["step"] / max(run["total_steps"], 1), 1.0))
        # a fixed slot, filled or not: the buttons below keep their position when a message
        # comes or goes (Pause, Resume), so no stale copy of them stays beside the new ones
        # while the fragment reruns
        message = st.empty()
        if run["message"]:
            (message.error if run["status"] in ("failed", "diverged") else message.caption)(
                run["message"])
        commands = store().commands(run_id)
        run_controls.controls(store(), run, commands)
        for level, text in st.session_state["control_messages"]:  # told at once, by the buttons
            getattr(st, level)(text)
        for _, row in commands[commands["status"] == "refused"].tail(3).iterrows():
            st.warning(f"command {row['id']} {row['kind']} {row['payload']} refused: "
                       f"{row['message']}")
    views = {  # live: charts patched in place while the run trains (`components.live_chart`)
        "Curves": lambda: (run_panels.curves_tab(
            store(), run, scalars, tuple(s.name for s in run_specs(run) if s.log_scale),
            live=active),
            run_controls.learning_rate_panel(run, scalars, live=active)),
        "Slots": lambda: run_panels.slots_tab(store(), run, live=active),
        "Config": lambda: run_panels.config_tab(store(), run),
        "Dynamics": lambda: dynamics_panel.dynamics_tab(store(), run, live=active),
        "LR range test": lambda: lr_range_panel.panel(store(), run),
    }
    if run["status"] == QUEUED:
        return
    if active:
        # While training, only the chosen view is rebuilt on every refresh: redrawing every
        # hidden tab's charts twice a second left the browser (on 2 busy cores) mid-redraw,
        # with blank charts in most frames.
        choice = st.segmented_control(
            "view", list(views), key="live_view", default="Curves",
            help="only the chosen view refreshes live while the run trains",
        )
        views[choice or "Curves"]()
        return
    for tab, show in zip(st.tabs(list(views)), views.values()):
        with tab:
            show()


@guard_page  # a read-only or full data directory: one line, not a traceback
def page() -> None:
    train_setup.plugins_for_this_page()
    train_setup.init_state()
    # before the Setup widgets exist
    lesson_panel.load("train", apply_run_setup=train_setup.apply_config)
    runs_table = store().runs()
    ids = [int(i) for i in runs_table["id"]]
    state = st.session_state
    if state.get("run_select") not in ids:
        # A session opens on its own newest run, never on another user's (see session_runs).
        mine = [i for i in session_runs.my_runs(store()) if i in ids]
        state["run_select"] = mine[-1] if mine else None
    run = selected_run()
    live_run = (run if run is not None and run["status"] in ACTIVE_STATUSES
                and session_runs.owns(run) else None)
    challenge = class_join.challenge_of_link()  # `?challenge=ID`: preset and locked
    if challenge is not None:
        class_join.sidebar(*challenge, live_run)
    else:
        train_setup.sidebar(live_run)
        train_setup.share_setup()
        with st.sidebar:
            setup_state.copy_link(state.get("share_url"))
    setup_state.remember()  # after the widgets: kept under non-widget keys (page switches)

    st.title("Optimizer Lab · Train")
    lesson_panel.show("train")
    if live_run is None:  # nothing of this session trains: Start first, where the eye lands
        train_setup.start_here()
    if run is None:
        st.info("No run in this session yet: **Start training** trains the setup above"
                   + ("; or open a run of the store below (view only unless it is yours)."
                      if ids else "."))
    if not ids:
        return
    # the select box's own default is the run it holds (None: nothing), never the store's
    # first run, which a browser drawing it from a later script run would fall back to
    current = default_value("run_select", None)
    st.selectbox("run", ids, key="run_select", format_func=lambda i: run_label(runs_table, i),
                 index=ids.index(current) if current in ids else None,
                 placeholder="open a run of the store (view only unless it is yours)",
                 help="this session's newest run by default; runs of other sessions open view "
                      "only")
    if run is None:
        return
    live_area.live_area(run["id"], run["status"] in LIVE_STATUSES, live_view)
