"""The Train page's actions: Start, and a Setup change sent to the selected live run.

Widget callbacks (`on_click=`/`on_change=`): they run before the page reruns, read the Setup
from session state, send a command through `runs.service.control` (imported on first use: the server
never needs it to draw) and leave what happened in `start_errors` / `live_messages` for the
page to show.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import MutableMapping
from typing import Any

import pydantic
import streamlit as st

from components import run_controls, session_runs
from components.page_store import store
from optimizers import registry
from schedules import table as schedule_specs
from optimizers.hyperparams import InvalidHyperparameter
from runs.protocol import ACTIVE_STATUSES
from settings import fields
from settings.run_config import RunConfig


# The live run the Setup was last set from (`components.train_setup.follow_live_run`): once
# per run and session, so a value the user moves afterwards is not put back.
SETUP_OF_RUN = "_setup_of_run"
# Session state: the token the Start buttons drawn last carry (their callback's argument).
START_TOKEN = "_start_token"


@st.cache_data(show_spinner=False)
def specs_of(optimizer: str, options_json: str):
    return registry.specs(optimizer, json.loads(options_json))


def run_specs(run: dict[str, Any]):
    config = run["config"]
    try:
        return specs_of(config["optimizer"], json.dumps(config.get("options", {}), sort_keys=True))
    except (KeyError, ValueError):
        return ()


def selected_run() -> dict[str, Any] | None:
    run_id = st.session_state.get("run_select")
    if run_id is None:
        return None
    try:
        return store().run(int(run_id))
    except KeyError:
        return None


def stored_number(value: float) -> float:
    """A hyperparameter read back from a run: Keras 2 keeps every `_set_hyper` value in a
    float32 variable (0.9 reads 0.8999999762), so 7 significant digits give the number the
    user set (float32 has 24 bits, 7.2 decimal digits)."""
    return float(f"{float(value):.7g}")


def live_hyperparameters(run: dict[str, Any]) -> dict[str, float]:
    """name -> the value the run uses now (or has been told to use), for every numeric
    hyperparameter of its optimizer, read from the store only.

    Per name, the first found of: its newest `set_hyper` command still pending (sent, not yet
    taken), its newest `hyper_changes` row (every applied change: the user's, a teacher's,
    auto-tuning's), the run's saved optimizer config (`get_config()` after each change), its
    start config."""
    config = run["config"]
    values = {s.name: float(s.default) for s in run_specs(run)}
    values.update({name: float(value) for name, value in config.get("hyperparameters", {}).items()
                   if name in values and isinstance(value, (int, float))})
    saved = run.get("optimizer_config") or {}
    values.update({name: stored_number(saved[name]) for name in values
                   if isinstance(saved.get(name), (int, float))
                   and not isinstance(saved.get(name), bool)})
    changes = store().hyper_changes(run["id"])
    for name, rows in changes.groupby("name") if not changes.empty else ():
        if name in values:
            values[name] = stored_number(rows["new"].iloc[-1])
    commands = store().commands(run["id"])
    pending = commands[(commands["kind"] == "set_hyper") & (commands["status"] == "pending")]
    for payload in pending["payload"]:
        sent = json.loads(payload)
        if sent.get("name") in values and isinstance(sent.get("value"), (int, float)):
            values[sent["name"]] = float(sent["value"])
    return values


def live_config(run: dict[str, Any]) -> RunConfig | None:
    """The run's setup as it trains now: its start config with its current hyperparameters
    (`live_hyperparameters`), schedule and `decay` (`run_controls.run_schedule`); None when the
    stored config does not validate (a plugin optimizer no longer registered)."""
    schedule, decay = run_controls.run_schedule(run)
    try:
        return RunConfig.model_validate({**run["config"],
                                         "hyperparameters": live_hyperparameters(run),
                                         "lr_schedule": schedule, "decay": decay})
    except (pydantic.ValidationError, InvalidHyperparameter, KeyError, ValueError):
        return None


def setup_config() -> RunConfig:
    """A `RunConfig` from the Setup widgets, every field read through the settings table
    (`settings.fields.config_from_session`).

    Raises:
        pydantic.ValidationError: a value `RunConfig` refuses. KeyError, ValueError: unknown
            optimizer or options.
    """
    return fields.config_from_session(st.session_state)


def start_token() -> str:
    """The token to draw the Start buttons with (`on_click=on_start, args=(start_token(),)`)."""
    return st.session_state.setdefault(START_TOKEN, secrets.token_hex(8))


def claim_start(state: MutableMapping[str, Any], token: str) -> bool:
    """True once per drawn Start button: `token` is the one the page drew last, and a new one
    replaces it. False for a token already claimed: the same click delivered twice (which
    happens under load) or a second click before the page was drawn again. A real second
    Start comes from a button drawn after the first, with the new token."""
    if state.get(START_TOKEN) != token:
        return False
    state[START_TOKEN] = secrets.token_hex(8)
    return True


def on_start(token: str) -> None:
    """Start a run with the Setup (the Start buttons' callback; `token` from `start_token`)."""
    from runs.service import control, pool

    state = st.session_state
    if not claim_start(state, token):
        return  # this click has started its run already
    state["start_errors"] = []
    try:
        config = setup_config()
    except pydantic.ValidationError as error:
        state["start_errors"] = [
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in error.errors()
        ]
        return
    except (InvalidHyperparameter, KeyError, ValueError) as error:
        state["start_errors"] = [str(error)]
        return
    try:
        run_id = control.start_run(config, store(), on_tab_close=pool.tab_close_policy(),
                                   caller=session_runs.caller(),
                                   steps_per_second=state["start_speed"])
    except Exception as error:  # the engine refused: show why, keep the page alive
        state["start_errors"] = [f"the run could not start: {error}"]
        return
    state["run_id"] = state["run_select"] = run_id
    state[SETUP_OF_RUN] = run_id  # the Setup is this run's already
    state["live_messages"] = state["control_messages"] = []


def live_run_followed() -> dict[str, Any] | None:
    """The selected run when it is live and this session's (its Setup is what it runs); None
    otherwise. Reads only: says nothing and sends nothing."""
    run = selected_run()
    if run is None or run["status"] not in ACTIVE_STATUSES or not session_runs.owns(run):
        return None
    return run


def live_run_to_steer(name: str) -> dict[str, Any] | None:
    """The selected run when it is live and this session's (a change of `name` is sent to it);
    None otherwise, saying so when the run is another session's."""
    run = selected_run()
    if run is None or run["status"] not in ACTIVE_STATUSES:
        return None
    if not session_runs.owns(run):
        st.session_state["live_messages"] = [
            ("info", f"{name} not sent: run #{run['id']} belongs to another browser session "
                     "(view only)")]
        return None
    return run


def on_hyper_change(name: str) -> None:
    """A Setup hyperparameter widget moved: send it to the selected run when that run is live."""
    state = st.session_state
    run = live_run_to_steer(name)
    if run is None:
        return
    optimizer = state["optimizer"]
    options = {k: state[f"opt_{optimizer}_{k}"] for k in registry.option_defaults(optimizer)}
    value = float(state[f"{fields.hyper_prefix(optimizer, options)}{name}"])
    if run["config"]["optimizer"] != optimizer or name not in {s.name for s in run_specs(run)}:
        state["live_messages"] = [("info", f"{name} not sent: run #{run['id']} uses "
                                           f"{run['config']['optimizer']}, the setup {optimizer}")]
        return
    if stored_number(value) == stored_number(live_hyperparameters(run)[name]):
        return  # the value the run has (a box or slider sending its value again): no change
    from runs.service import control, ownership

    try:
        command = control.set_hyper(store(), run["id"], name, value, source="user",
                                    caller=session_runs.caller())
    except ownership.NotOwner as error:
        state["live_messages"] = [("info", f"{name} not sent: {error}")]
        return
    except InvalidHyperparameter as error:
        current = (run["optimizer_config"] or {}).get(name)
        keeps = f"; it goes on with {name} = {current:.6g}" if isinstance(current, float) else ""
        state["live_messages"] = [("error", f"not sent to run #{run['id']}{keeps}: {error}")]
        return
    done = wait_until_handled(command) == "done"
    state["live_messages"] = [
        ("success", f"{name} = {value:.6g} {'applied to' if done else 'sent to'} run "
                    f"#{run['id']} (command {command})")
    ]


# How long a live change's callback waits for the run to carry the command out. The run polls
# every 0.1 s and makes the change's rows readable before it marks the command done, so the
# rerun that follows the callback already draws the change (trace, marker, changes table)
# instead of the next 0.5 s refresh. A run busy for longer (a retrace) is not waited for.
HANDLED_WAIT_S = 0.5


def wait_until_handled(command: int, timeout_s: float = HANDLED_WAIT_S) -> str | None:
    """The command's status once it is no longer `pending`, or after `timeout_s` seconds
    (then `pending`); polls the store every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = store().command_status(command)
        if status != "pending" or time.monotonic() >= deadline:
            return status
        time.sleep(0.02)


# Where a schedule switched on mid-run starts its clock: the radio's session key and choices.
SCHEDULE_START = "schedule_start"
FROM_NOW, FROM_ZERO = "from now", "from step 0"


def on_schedule_change(name: str) -> None:
    """The schedule picker, a schedule parameter or `decay` moved: send it to the selected run
    when that run is live and this session's, saying which kind of change it is."""
    state = st.session_state
    run = live_run_to_steer(name)
    if run is None:
        return
    current, current_decay = run_controls.run_schedule(run)
    now = None
    try:
        if name == "decay":
            value: Any = float(state[fields.session_key("decay")])
            kind = "retrace" if value != current_decay else "none"
        else:
            value = schedule_specs.validate_schedule(
                "lr_schedule", fields.schedule_from_session(state))
            now = schedule_specs.validate_schedule("lr_schedule", current)
            if value and now and value["class_name"] == now["class_name"] \
                    and now.get("start_step"):  # new numbers keep where its clock started
                value["start_step"] = now["start_step"]
            same = schedule_specs.structure(value) == schedule_specs.structure(now)
            kind = ("none" if value == now else "assign" if same else "retrace")
            if kind == "retrace" and value is not None and int(run["step"]) > 0 \
                    and state.get(SCHEDULE_START, FROM_NOW) == FROM_NOW:
                value = {**value, "start_step": "now"}  # the run knows its exact step
    except (schedule_specs.ScheduleError, ValueError) as error:
        state["live_messages"] = [("error", f"not sent to run #{run['id']}: {error}")]
        return
    if kind == "none":
        return
    from runs.service import control, ownership

    try:
        command = control.set_hyper(store(), run["id"], name, value, source="user",
                                    caller=session_runs.caller())
    except (ownership.NotOwner, ValueError) as error:
        state["live_messages"] = [("error", f"{name} not sent: {error}")]
        return
    wait_until_handled(command)  # the rerun after this callback then draws the change
    if isinstance(value, dict) and kind == "assign":
        before = now["config"] if now else {}
        shown = value["class_name"] + " (" + ", ".join(
            f"{k}: {before.get(k)} -> {v}" for k, v in value["config"].items()
            if before.get(k) != v) + ")"
    else:
        shown = value["class_name"] if isinstance(value, dict) else (
            "constant" if value is None else f"{value:g}")
        if isinstance(value, dict) and value.get("start_step") == "now":
            shown += " from now (its step 0 = the run's next step)"
    state["live_messages"] = [("success" if kind == "assign" else "warning", (
        f"{name} = {shown} sent to run #{run['id']} (command {command}): "
        + ("new numbers of the same schedule: tf.Variable assigns, in effect at the next step, "
           "no retrace" if kind == "assign" else
           "a different kind of change (a new schedule object, or decay, a plain attribute "
           "the trace baked in): the step function is rebuilt between two steps, costing one "
           "retrace (see `step traces` in the changes table)")))]

