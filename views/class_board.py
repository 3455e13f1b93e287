"""The Class page: a teacher's challenges and their live board.

A teacher (a session that entered `OPTIMIZER_LAB_TEACHER_SECRET`) creates a challenge from
the Train setup (`components.class_create`), shares its link and QR code
(`components.class_link`), pins and stops runs, closes the challenge and exports the board.
Everyone may watch a board (`?challenge=ID`); a student steers only their own runs. The board
refreshes itself (`components.class_board_panels.live_board`).
"""

from __future__ import annotations

import os

import streamlit as st

from components import class_board_panels, class_create, class_link, session_runs
from components.class_create import MESSAGES
from components.class_text import markdown_text
from components.page_store import store
from components.store_guard import guard_page
from runs.service import challenge_board, challenges
from runs.service.ownership import TEACHER_SECRET_ENV, NotOwner
from runs.store.challenges import OPEN, ChallengeTables

CHOSEN = "board_challenge"  # the challenge shown (also in the URL as `?challenge=ID`)


def init_state() -> None:
    """Every session-state entry of this page, with its default, in one place."""
    defaults: dict[str, object] = {MESSAGES: [], "board_export": None}
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def on_teacher_secret() -> None:
    ok = session_runs.set_teacher_secret(st.session_state.get("class_teacher_secret", ""))
    st.session_state[MESSAGES] = [
        ("success", "teacher role on: create challenges, pin and stop any run of a challenge "
                    "(each stop is recorded with the run)") if ok else
        ("error", "teacher secret refused: it does not match OPTIMIZER_LAB_TEACHER_SECRET")]


def on_close(challenge_id: int) -> None:
    try:
        challenges.close_challenge(store(), challenge_id, caller=session_runs.caller())
    except (KeyError, NotOwner) as error:
        st.session_state[MESSAGES] = [("error", str(error).strip("'\""))]
        return
    st.session_state[MESSAGES] = [("success", f"challenge {challenge_id} closed: no new runs "
                                              "join it; its runs go on")]


def on_export(challenge_id: int) -> None:
    from runs.io.board_export import board_zip

    if not session_runs.caller().is_teacher:
        return
    _, spec = challenges.load_spec(store(), challenge_id)
    st.session_state["board_export"] = (
        challenge_id, board_zip(challenge_board.board(store(), challenge_id, spec)))


def teacher_box(teacher: bool) -> None:
    """The teacher secret input (when the server has one and this session has not entered it)."""
    if teacher:
        return
    if not os.environ.get(TEACHER_SECRET_ENV):
        st.caption(f"Challenges are created by a teacher: start the server with "
                   f"{TEACHER_SECRET_ENV} set and enter it here.")
        return
    with st.expander("Teacher"):
        st.text_input("teacher secret", type="password", key="class_teacher_secret",
                      on_change=on_teacher_secret,
                      help="the OPTIMIZER_LAB_TEACHER_SECRET of this server")


def chosen_challenge(table) -> int:
    """The challenge to show: the URL's, else the one picked, else the newest."""
    state = st.session_state
    ids = [int(i) for i in table["id"]]
    raw = st.query_params.get("challenge")
    if raw is not None and raw.isdigit() and int(raw) in ids and state.get("_board_link") != raw:
        state[CHOSEN] = int(raw)  # a link once; the picker wins afterwards
        state["_board_link"] = raw
    if state.get(CHOSEN) not in ids:
        state[CHOSEN] = ids[0]
    titles = dict(zip(ids, table["title"]))
    status = dict(zip(ids, table["status"]))
    st.selectbox("challenge", ids, key=CHOSEN,
                 format_func=lambda i: f"{i}: {titles[i]} ({status[i]})")
    if st.query_params.get("challenge") != str(state[CHOSEN]):
        st.query_params["challenge"] = str(state[CHOSEN])
    return int(state[CHOSEN])


def teacher_tools(row: dict, teacher: bool) -> None:
    """Close and export (the teacher's), beside the link."""
    challenge_id = row["id"]
    if not teacher:
        return
    st.button("Close the challenge", key="board_close", on_click=on_close,
              args=(challenge_id,), disabled=row["status"] != OPEN,
              help="no new runs join; the runs training go on")
    st.button("Export the board (CSV + Parquet)", key="board_export_button",
              on_click=on_export, args=(challenge_id,),
              help="every run's hyperparameters, score and curves")
    done = st.session_state["board_export"]
    if done and done[0] == challenge_id:
        st.download_button("Download the zip", done[1], file_name=f"challenge-{challenge_id}.zip",
                           mime="application/zip", key="board_download")


@guard_page  # a read-only or full data directory: one line, not a traceback
def page() -> None:
    init_state()
    st.title("Optimizer Lab · Class")
    teacher = session_runs.caller().is_teacher
    teacher_box(teacher)
    table = ChallengeTables(store()).all()
    if teacher:
        with st.expander("New challenge", expanded=table.empty):
            class_create.form()
    if table.empty:
        for level, text in st.session_state[MESSAGES]:
            getattr(st, level)(text)
        st.info("No challenge yet. A teacher creates one here from a Train setup; students "
                "join it with its link or QR code.")
        return
    challenge_id = chosen_challenge(table)
    row, spec = challenges.load_spec(store(), challenge_id)
    st.header(markdown_text(row["title"]))
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"**Goal:** {spec.goal_text()} · **status:** {row['status']}")
        base = spec.config()
        st.markdown(f"**Fixed:** {base.dataset}/{base.model}, {base.steps:,} steps, batch "
                    f"{base.batch_size}, seed {base.seed}, label noise {base.label_noise:g} · "
                    f"**students choose:** optimizer among {', '.join(spec.optimizers)}; "
                    + (", ".join(f"`{n}`" for n in spec.free) or "no hyperparameter"))
        teacher_tools(row, teacher)
    with right:
        class_link.link_and_qr(challenge_id)
    class_board_panels.live_board(challenge_id, spec.model_dump())
