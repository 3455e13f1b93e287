"""The Train page opened from a challenge link (`?challenge=ID`): its Setup preset to the
challenge and locked, a nickname, and Start under the challenge.

Only what the challenge leaves free can be changed: the optimizer (among those it allows) and
the hyperparameters it names. Everything else is drawn disabled with a note why, and is put
back to the challenge's value on every script run (a value kept from another page's Setup
cannot leak in). The server checks the config again at Start
(`runs.service.challenges.start_challenge_run`), so a widget is not the only guard.
A live change of a free hyperparameter goes to the student's own run as on the Train page
(`components.train_actions.on_hyper_change`, ownership-checked by the run service).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from components import links, session_runs
from components.class_text import markdown_text
from components.hyper_widgets import default_index, hyper_widgets, invalid_hypers
from components.page_store import store
from components.train_actions import SETUP_OF_RUN, on_hyper_change
from components.train_setup import apply_config, follow_live_run
from optimizers import registry
from runs.service import challenges
from runs.service.challenges import ChallengeError, ChallengeSpec
from runs.store.challenges import OPEN
from settings import fields

CHALLENGE_KEY = "challenge_id"  # the challenge this session's Train page is locked to
NICKNAME_KEY = "challenge_nickname"
_APPLIED = "_challenge_applied"  # the challenge whose setup was put in the Setup once
# Settings shown (disabled) as the challenge fixes them: RunConfig field -> label.
FIXED_SHOWN = ("dataset", "model", "steps", "batch_size", "eval_every", "label_noise", "seed",
               "dtype", "lr_schedule", "decay")


def challenge_of_link() -> tuple[dict[str, Any], ChallengeSpec] | None:
    """The challenge of the URL's `challenge` parameter, as (row, spec), with the Setup preset
    to it (once per session and challenge) and locked (every run); None without the parameter
    or when it names no challenge (an error says so and the Train page is the usual one)."""
    raw = st.query_params.get("challenge")
    state = st.session_state
    if raw is None:
        state[CHALLENGE_KEY] = None
        return None
    try:
        row, spec = challenges.load_spec(store(), int(raw))
    except (KeyError, ValueError):
        state[CHALLENGE_KEY] = None
        st.error(f"challenge={str(raw)[:20]!r} refused: no such challenge in this lab; ask for "
                 "the link again (the Train page below is the usual one)")
        return None
    state[CHALLENGE_KEY] = row["id"]
    if state.get(_APPLIED) != row["id"]:
        state[_APPLIED] = row["id"]
        apply_config(spec.config())
    return row, spec


def lock(spec: ChallengeSpec) -> None:
    """Put every fixed setting back to the challenge's value (before the widgets are drawn):
    the run fields, the chosen optimizer's options and its fixed hyperparameters."""
    state = st.session_state
    base = spec.config()
    if state.get("optimizer") not in spec.optimizers:
        state["optimizer"] = base.optimizer
    optimizer = state["optimizer"]
    values = fields.session_values(challenges.student_config(spec, optimizer, {}))
    prefix = fields.hyper_prefix(optimizer, challenges.options_for(optimizer, base))
    for key, value in values.items():
        free = key.startswith(prefix) and key[len(prefix):] in spec.free
        if key != "optimizer" and not free:
            state[key] = value
    state["continuous"] = False


def on_challenge_start(challenge_id: int) -> None:
    """Start: the student's run under the challenge (callback); errors in `start_errors`."""
    from runs.service import pool

    state = st.session_state
    state["start_errors"] = []
    try:
        _, spec = challenges.load_spec(store(), challenge_id)
        optimizer = state["optimizer"]
        prefix = fields.hyper_prefix(optimizer,
                                     challenges.options_for(optimizer, spec.config()))
        values = {name: float(state[prefix + name]) for name in spec.free
                  if prefix + name in state}
        config = challenges.student_config(spec, optimizer, values)
        run_id = challenges.start_challenge_run(
            store(), challenge_id, config, state.get(NICKNAME_KEY, ""),
            caller=session_runs.caller(), steps_per_second=state.get("start_speed"),
            on_tab_close=pool.tab_close_policy())
    except (ChallengeError, KeyError) as error:
        state["start_errors"] = [str(error).strip("'\"")]
        return
    except ValueError as error:  # the run service refused (memory budget, pace)
        state["start_errors"] = [f"the run could not start: {error}"]
        return
    state["run_id"] = state["run_select"] = run_id
    state[SETUP_OF_RUN] = run_id
    state["live_messages"] = state["control_messages"] = []


def nickname_input() -> str | None:
    """The nickname box; the checked nickname, or None (with the refusal shown)."""
    st.text_input("your nickname", key=NICKNAME_KEY, max_chars=challenges.NICKNAME_CHARS[1],
                  placeholder="shown on the class board",
                  help=f"no account: a name for the board ({challenges.NICKNAME_ALLOWED})")
    text = st.session_state.get(NICKNAME_KEY, "")
    if not text:
        st.caption("Pick a nickname to start a run.")
        return None
    try:
        return challenges.check_nickname(text)
    except ChallengeError as error:
        st.error(str(error))
        return None


def fixed_settings(spec: ChallengeSpec) -> None:
    """The settings the challenge fixes, as disabled inputs with the reason."""
    base = spec.config()
    st.subheader("Data and run")
    st.caption("Fixed by the challenge (greyed): every student trains the same model on the "
               "same data for the same steps, so the board compares optimizers and "
               "hyperparameters only.")
    for field in FIXED_SHOWN:
        value = getattr(base, field)
        shown = ("constant" if value is None else value["class_name"]) if field == \
            "lr_schedule" else str(value)
        st.text_input(fields.label(field), value=shown, disabled=True,
                      key=f"challenge_fixed_{field}")


def sidebar(row: dict[str, Any], spec: ChallengeSpec, live_run: dict[str, Any] | None) -> None:
    """The Train page's sidebar in a challenge: nickname, the free choices, the fixed settings
    (disabled) and Start."""
    state = st.session_state
    follow_live_run(live_run)
    lock(spec)
    base = spec.config()
    with st.sidebar:
        st.header("Challenge")
        st.markdown(f"**{markdown_text(row['title'])}** · goal: {spec.goal_text()}")
        links.page_link("class_board", label="Open the class board",
                        query_params={"challenge": row["id"]}, icon=":material/groups:")
        is_open = row["status"] == OPEN
        if not is_open:
            st.warning("This challenge is closed: no new runs join it (your runs go on).")
        nickname = nickname_input()
        names = list(spec.optimizers)
        optimizer = st.selectbox("optimizer", names, key="optimizer",
                                 index=default_index("optimizer", names),
                                 disabled=len(names) == 1, help=fields.help_text("optimizer"))
        if len(names) == 1:
            st.caption(f"The challenge fixes the optimizer: {optimizer}.")
        options = challenges.options_for(optimizer, base)
        specs = registry.specs(optimizer, options)
        prefix = fields.hyper_prefix(optimizer, options)
        st.subheader("Hyperparameters")
        free = [s for s in specs if s.name in spec.free]
        fixed = [s for s in specs if s.name not in spec.free]
        if live_run is not None and live_run["config"]["optimizer"] == optimizer:
            st.caption(f"Run #{live_run['id']} is active: moving a value changes it live.")
        values = hyper_widgets(free, prefix, on_change=on_hyper_change)
        if fixed:
            st.caption("Fixed by the challenge: " + ", ".join(s.name for s in fixed) + ".")
            hyper_widgets(fixed, prefix, disabled=True)
        fixed_settings(spec)
        ok = is_open and nickname is not None and not invalid_hypers(free, values)
        st.button("Start", key="start", type="primary", width="stretch", disabled=not ok,
                  on_click=on_challenge_start, args=(row["id"],))
        for message in state["start_errors"]:
            st.error(message)
