"""The class board's live part: leaderboard, overlaid loss curves, the parallel-coordinates
plot, and the actions on runs (the teacher's pin and stop, a student's stop of their own runs).

The board is a fragment that reruns every `BOARD_EVERY_S` seconds for everyone who has it
open; each refresh reads the board in a few queries (`runs.service.challenge_board.board`),
whatever the number of runs. Actions go through the run service: `runs.service.challenges`
(pin: teacher only) and `control.stop` (the run's owner, or a teacher: recorded with the run).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from components import class_figures, session_runs
from components.charts import chart
from components.class_create import MESSAGES
from components.class_text import markdown_text
from components.page_store import store
from components.store_guard import guard_page
from optimizers import registry
from runs.protocol import LIVE_STATUSES
from runs.service import challenge_board, challenges
from runs.service.challenges import ChallengeSpec

BOARD_EVERY_S = 2.0  # the board's refresh period (the target: board refresh p95 <= 3 s)
COLUMNS = {
    "rank": st.column_config.NumberColumn("rank", format="%d", width="small"),
    "run": st.column_config.NumberColumn("run", format="#%d", width="small"),
    "score": st.column_config.NumberColumn("score", format="%.4g"),
    "val loss now": st.column_config.NumberColumn("val loss now", format="%.4f"),
    "val acc now": st.column_config.NumberColumn("val acc now", format="%.3f"),
    "learning_rate": st.column_config.NumberColumn("learning_rate", format="%.3e"),
    "pinned": st.column_config.CheckboxColumn("pinned", width="small"),
}


def score_label(spec: ChallengeSpec) -> str:
    """The score's name with its unit."""
    if spec.goal == "val_loss_at_step":
        return f"val loss at step {spec.goal_step} (nats)"
    return f"steps to {spec.goal_accuracy:.0%} val acc"


def log_hypers(spec: ChallengeSpec) -> set[str]:
    """The free hyperparameters whose spec is log-scale in any allowed optimizer."""
    base = spec.config()
    return {s.name for name in spec.optimizers
            for s in registry.specs(name, challenges.options_for(name, base))
            if s.log_scale and s.name in spec.free}


@st.cache_data(ttl=BOARD_EVERY_S, show_spinner=False, max_entries=64)
def board_data(store_path: str, challenge_id: int,
               spec_json: dict[str, Any]) -> challenge_board.Board:
    """The board's tables, shared by every session watching this challenge for up to
    `BOARD_EVERY_S` s: a class of 50 open boards reads the store once per period, not 50
    times (`clear` after an action, so its author sees it at once)."""
    return challenge_board.board(store(), challenge_id, ChallengeSpec.model_validate(spec_json))


# ----- actions (callbacks) ------------------------------------------------------------------
def _run_action(action: str, challenge_id: int, run_id: int) -> None:
    state = st.session_state
    caller = session_runs.caller()
    try:
        if action in ("pin", "unpin"):
            challenges.pin(store(), challenge_id, run_id, action == "pin", caller=caller)
            text = f"run #{run_id} {action}ned"
        else:
            challenges.stop_challenge_run(store(), challenge_id, run_id, caller=caller)
            text = f"run #{run_id}: stop sent"
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        state[MESSAGES] = [("error", str(error).strip("'\""))]
        return
    board_data.clear()
    state[MESSAGES] = [("success", text)]


def run_actions(challenge_id: int, runs: Any, teacher: bool) -> None:
    """Pick a run of the board; the teacher may pin/unpin or stop any of them, a student only
    stop their own (`components.session_runs.owns`)."""
    owner = session_runs.caller().owner
    ids: list[int] = [int(i) for i, o in zip(runs["run_id"], runs["owner"])
                      if teacher or o == owner]
    if not ids:
        return
    labels = {int(i): f"#{int(i)} {n}" for i, n in zip(runs["run_id"], runs["nickname"])}
    left, middle, right = st.columns([2, 1, 1], vertical_alignment="bottom")
    run_id = left.selectbox("run", ids, key="board_run", format_func=lambda i: labels[i],
                            help="every run of the challenge" if teacher else
                                 "your runs in this challenge")
    if run_id is None:
        return
    row = runs[runs["run_id"] == run_id].iloc[0]
    if teacher:
        action = "unpin" if bool(row["pinned"]) else "pin"
        middle.button(action.capitalize(), key="board_pin", on_click=_run_action,
                      args=(action, challenge_id, run_id), width="stretch")
    right.button("Stop", key="board_stop", on_click=_run_action,
                 args=("stop", challenge_id, run_id), width="stretch",
                 disabled=row["status"] not in LIVE_STATUSES,
                 help=None if row["owner"] == owner else
                 "a teacher's stop is recorded with the run")


# ----- the board ------------------------------------------------------------------------------
def board_body(challenge_id: int, spec: ChallengeSpec) -> None:
    """One refresh of the board."""
    for level, text in st.session_state.get(MESSAGES, []):  # the last action's outcome
        getattr(st, level)(text)
    data = board_data(str(store().path), challenge_id, spec.model_dump())
    runs = data.runs
    teacher = session_runs.caller().is_teacher
    live = int(runs["status"].isin(LIVE_STATUSES).sum())
    scored = int(runs["score"].notna().sum())
    st.caption(f"{len(runs)} runs · {live} training · {scored} scored · refreshed every "
               f"{BOARD_EVERY_S:g} s")
    if runs.empty:
        st.info("No run has joined yet: students open the link (or scan the QR code), pick a "
                "nickname and press Start on the Train page.")
        return
    mine = set(session_runs.my_runs(store()))
    yours = [markdown_text(n) for i, n in zip(runs["run_id"], runs["nickname"]) if int(i) in mine]
    if yours:
        st.markdown("You are on the board as " + ", ".join(f"**{n}**" for n in
                                                           dict.fromkeys(yours)) + ".")
    st.dataframe(class_figures.leaderboard_frame(runs, data.hypers), hide_index=True,
                 width="stretch", key="board_table", column_config=COLUMNS)
    run_actions(challenge_id, runs, teacher)
    labels = {int(i): class_figures.run_label(n, i)
              for i, n in zip(runs["run_id"], runs["nickname"])}
    pinned = [int(i) for i, p in zip(runs["run_id"], runs["pinned"]) if p]
    # one above the other, full width: a parallel-coordinates plot needs room between its axes
    chart(class_figures.loss_overlay_figure(data.curves, labels, pinned,
                                            uirevision=f"board-{challenge_id}"), "board_curves")
    loss_goal = spec.goal == "val_loss_at_step"
    chart(class_figures.parcoords_figure(
        runs, data.hypers, score_label(spec), log_hypers(spec),
        now_column="val_loss" if loss_goal else "val_accuracy",
        now_label="val loss now (nats)" if loss_goal else "val acc now",
        higher_is_better=not loss_goal, uirevision=f"board-{challenge_id}"),
        "board_parcoords")
    st.caption("Curves: every run's training loss, pinned runs thick and coloured. Parallel "
               "coordinates: one "
               "line per run through its hyperparameters as it trains now (after live "
               "changes), its validation metric now and its score; drag along an axis to "
               "select a range. `none`: the run's optimizer has no such hyperparameter; "
               "`not yet`: no score yet.")


@st.fragment(run_every=BOARD_EVERY_S)
@guard_page
def live_board(challenge_id: int, spec_json: dict[str, Any]) -> None:
    """The board, redrawn every `BOARD_EVERY_S` s (a fragment: the rest of the page stays)."""
    board_body(challenge_id, ChallengeSpec.model_validate(spec_json))


__all__ = ["BOARD_EVERY_S", "board_body", "live_board", "score_label"]
