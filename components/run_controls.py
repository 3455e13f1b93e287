"""The Train page's run controls: Pause / Resume / Step / Stop, the speed control and the status
line of a run, and the run's learning-rate panel (`learning_rate_panel`: the schedule it uses now,
in NumPy, beside the effective rate it recorded).

One click, one command: a button whose command is still pending in the store is disabled
(`pending_kinds`) until the run process has taken it (it then changes the status, e.g. to
`paused`), and `runs.service.control` does not queue a twin of a pending pause/resume/step/stop/
set_speed (`RunStore.send_command_once`), so a click repeated under load sends nothing more. A
Stop (or Pause...) of a run that has ended meanwhile is told as "already stopped", not as an
error. Ownership is checked by the run service (`runs.service.ownership`), never here.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import streamlit as st

from components import figures, session_runs
from components.charts import chart
from components.hyper_widgets import default_value
from schedules import preview as schedule_curves, table as schedule_specs
from runs.protocol import ACTIVE_STATUSES, FINAL_STATUSES, LIVE_STATUSES, QUEUED
from runs.store.run_store import RunStore
from settings import fields

# Choices of the speed control, in steps per second; None is full speed (no sleep). One step at
# a time is Pause + Step.
SPEEDS: tuple[float | None, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, None)


# The Train page's default pace at Start: a default run (10,000 steps, README "Default setup")
# then lasts about 3 minutes, long enough to move a hyperparameter while it trains.
START_SPEED = 50.0


def continuous_steps() -> int:
    """`steps` of a continuous run: the largest the settings table allows (1,000,000 steps)."""
    return fields.bounds("steps")[1]


def speed_label(speed: float | None) -> str:
    return "full speed" if speed is None else f"{speed:g} steps/s"


def pending_kinds(commands: pd.DataFrame) -> set[str]:
    """Kinds of the run's commands still `pending` (not yet taken by the run process)."""
    if commands is None or commands.empty:
        return set()
    return set(commands.loc[commands["status"] == "pending", "kind"])


def send(store: RunStore, kind: str, run_id: int) -> None:
    """Pause/resume/step/stop this session's run (a callback: one call per click).

    A run that ended meanwhile is told ("run #3 is already stopped"), not warned about; other
    refusals (not the owner, not paused for Step) are shown.
    """
    from runs.service import control, ownership

    state = st.session_state
    try:
        run = store.run(run_id)
    except KeyError:
        state["control_messages"] = [("info", f"run #{run_id} is no longer in the store")]
        return
    if run["status"] in FINAL_STATUSES:
        state["control_messages"] = [("info", f"run #{run_id} is already {run['status']}")]
        return
    try:
        getattr(control, kind)(store, run_id, caller=session_runs.caller())
    except ownership.NotOwner as error:
        state["control_messages"] = [("info", f"{kind} not sent: {error}")]
    except (KeyError, ValueError) as error:
        status = store.run(run_id)["status"]
        if status in FINAL_STATUSES:  # it ended between the read above and the command
            state["control_messages"] = [("info", f"run #{run_id} is already {status}")]
        else:
            state["control_messages"] = [("warning", f"{kind} refused: {error}")]
    else:
        state["control_messages"] = []


def send_speed(store: RunStore, run_id: int) -> None:
    """The speed control moved: queue `set_speed` (callback); nothing when the run already
    goes (or was last told to go) at that pace."""
    from runs.service import control, ownership

    speed = st.session_state[f"speed_{run_id}"]
    if speed == control.speed(store, run_id):
        return
    try:
        control.set_speed(store, run_id, speed, caller=session_runs.caller())
    except ownership.NotOwner as error:
        st.session_state["control_messages"] = [("info", f"speed not sent: {error}")]
    except (KeyError, ValueError) as error:
        st.session_state["control_messages"] = [("warning", f"speed refused: {error}")]


def take_control(store: RunStore, run_id: int) -> None:
    """Take a run over (allowed by the run service only when nobody answers for it)."""
    from runs.service import ownership

    try:
        why = session_runs.adopt(run_id, store)
    except (KeyError, ownership.NotOwner) as error:
        st.session_state["control_messages"] = [("warning", str(error))]
        return
    st.session_state["control_messages"] = [("success", f"run #{run_id} is now yours ({why}); "
                                                     "the takeover is recorded with the run")]


def status_line(store: RunStore, run: dict[str, Any], scalars: pd.DataFrame) -> str:
    """`Run #id · status · step n/total (or "continuous") · steps/s · device · traces`."""
    parts = [f"**Run #{run['id']}** · status **{run['status']}**"]
    if run["status"] == QUEUED:
        from runs.service import pool

        positions = store.queue_positions()
        return " · ".join(parts + [
            f"queue position **{positions.get(run['id'])}** of {len(positions)}",
            f"{store.active_count()} of {pool.pool_size()} pool places busy "
            "(`OPTIMIZER_LAB_POOL_SIZE`); it starts when a run ends",
        ])
    if run["total_steps"] >= continuous_steps():
        parts.append(f"step {run['step']} · **continuous** (trains until Pause/Stop)")
    else:
        parts.append(f"step {run['step']}/{run['total_steps']}")
    waits = first_step_wait(store, run)
    if waits:
        parts.append(waits)
    silent = store.stalled_for(run)
    if silent is not None:
        parts.append(f":warning: **no heartbeat for {silent:.0f} s** (the process lives but "
                     "does not answer: stalled; Stop kills it)")
    rate = scalars[scalars["name"].str.contains("steps_per", na=False)]
    if not rate.empty:
        parts.append(f"{rate['value'].iloc[-1]:.1f} steps/s")
    parts.append(f"device `{run['device'] or 'auto'}`")
    parts.append(f"traces {run['traces']} (1 = no retrace)")
    return " · ".join(parts)


def first_step_wait(store: RunStore, run: dict[str, Any]) -> str:
    """What a started run without a step yet waits for ("" once it has one, or when not
    started): its run host importing TensorFlow (the first Start of a fresh server waits ~6-10 s
    for it, counted from the host's start), its engine being built and its first step traced,
    or a process of its own."""
    from runs.service import worker_table

    if run["step"] or run["status"] not in ("starting", "running"):
        return ""
    host = worker_table.host_id_of(run.get("worker"))
    if host is not None:
        try:
            worker = worker_table.row(store, host)
        except KeyError:
            worker = {"state": "gone"}
        if worker["state"] == "warming":  # how long so far: the wait's progress
            since = max(0.0, time.time() - float(worker["created"]))
            return (f"waiting for run host {host} to import TensorFlow ({since:.0f} s so far; "
                    "a new host takes ~6-10 s, longer on a busy machine)")
        return "building its model and tracing its first step"
    if run.get("worker") == "cold":
        return "its own process imports TensorFlow, then builds the model (~10 s)"
    return "waiting for a process to take it"


def controls(store: RunStore, run: dict[str, Any], commands: pd.DataFrame) -> None:
    """Take control (view only), or Pause / Resume / Step / Stop and the speed of the run."""
    from runs.service import control, ownership

    events = store.events(run["id"])
    told = st.container()  # one element however many events: the buttons keep their position
    for _, event in events.tail(2).iterrows():  # a takeover or a teacher's action is told
        told.caption(f"recorded: {event['kind'].replace('_', ' ')} "
                     f"({pd.Timestamp(event['created'], unit='s'):%Y-%m-%d %H:%M} UTC): "
                     f"{event['detail']}")
    rid = run["id"]
    if not session_runs.owns(run):
        if run["status"] in LIVE_STATUSES:
            left, right = st.columns([1, 4])
            if ownership.may_take_control(run, session_runs.caller()):
                left.button("Take control", key=f"adopt_{rid}", on_click=take_control,
                            args=(store, rid), width="stretch")
                right.caption("View only: nobody answers for this run (no owner, or its "
                              "owner's browser has been gone for long). Take control to steer "
                              "it; the takeover is recorded with the run.")
            else:
                right.caption("View only: this run belongs to another browser session. Only "
                              "its owner may pause, stop or retune it.")
        return
    status = run["status"]
    live, paused = status in LIVE_STATUSES, status == "paused"
    steerable = status in ACTIVE_STATUSES
    busy = pending_kinds(commands)
    cols = st.columns([1, 1, 1, 1, 4])
    cols[0].button("Pause", key=f"pause_{rid}", on_click=send, args=(store, "pause", rid),
                   disabled=not steerable or paused or "pause" in busy, width="stretch")
    cols[1].button("Resume", key=f"resume_{rid}", on_click=send, args=(store, "resume", rid),
                   disabled=not paused or "resume" in busy, width="stretch")
    cols[2].button("Step", key=f"step_{rid}", on_click=send, args=(store, "step", rid),
                   disabled=not paused or bool(busy & {"step", "resume"}), width="stretch",
                   help="train exactly one step of the paused run")
    cols[3].button("Stop", key=f"stop_{rid}", on_click=send, args=(store, "stop", rid),
                   disabled=not live or "stop" in busy, width="stretch")
    key = f"speed_{rid}"
    if key not in st.session_state:
        st.session_state[key] = control.speed(store, rid)
    # its value as its default too (`hyper_widgets.default_value`): without it, the default of
    # this control is the last choice, full speed (None is one of SPEEDS), and a browser that
    # draws it from a later run's message sent that back as a move, i.e. `set_speed null`
    cols[4].select_slider("speed", SPEEDS, key=key, format_func=speed_label,
                          value=default_value(key, None),
                          on_change=send_speed, args=(store, rid), disabled=not steerable,
                          help="at most this many steps per second (the run sleeps between "
                               "steps); Pause + Step for one step at a time")


# ----- the learning rate of a run ---------------------------------------------------------------
def run_schedule(run: dict[str, Any]) -> tuple[dict[str, Any] | None, float]:
    """The schedule (None = constant) and `decay` a run uses NOW: from its saved optimizer
    config (updated after every live change), else from its start config."""
    saved = run.get("optimizer_config") or {}
    rate = saved.get("learning_rate")
    if isinstance(rate, dict) and rate.get("class_name") == "ScheduleFromStep":
        # Keras's wrapper of a schedule started mid-run: the lab's form keeps the offset
        inner = (rate.get("config") or {}).get("schedule") or {}
        schedule = {"class_name": inner.get("class_name"), "config": inner.get("config", {}),
                    "start_step": (rate.get("config") or {}).get("start_step", 0)}
    elif isinstance(rate, dict):
        schedule = {"class_name": rate.get("class_name"), "config": rate.get("config", {})}
    elif "learning_rate" in saved:
        schedule = None
    else:
        schedule = run["config"].get("lr_schedule")
    return schedule, float(saved.get("decay", run["config"].get("decay", 0.0)) or 0.0)


def learning_rate_panel(run: dict[str, Any], scalars: pd.DataFrame, live: bool = False) -> None:
    """The learning rate of a run: planned (NumPy, the schedule in use now, when it has one) and
    the effective rate recorded (`_decayed_lr` at each recorded step), regime changes marked;
    `live`: patched in place (`components.live_chart`), the current step marked."""
    schedule, decay = run_schedule(run)
    recorded = scalars[scalars["name"] == schedule_specs.EFFECTIVE_LR] if not scalars.empty \
        else scalars
    if schedule is None and not decay and recorded.empty:
        return  # nothing recorded yet (the effective rate comes with the first record)
    total = min(int(run["total_steps"]), max(int(run["step"]) * 2, 1000))
    rate = float(run["config"].get("hyperparameters", {}).get("learning_rate", 0.01))
    try:
        schedule = schedule_specs.validate_schedule("lr_schedule", schedule)
    except schedule_specs.ScheduleError:
        schedule = None
    # a constant rate has no plan to draw: its live changes are the recorded dots themselves
    preview = schedule_curves.preview_points(schedule, total, rate, decay) \
        if schedule is not None or decay else None
    marks = schedule_curves.schedule_marks(schedule, total)
    started = schedule_specs.start_step(schedule)
    st.markdown(f"**Learning rate** ({schedule['class_name'] if schedule else 'constant'}"
                f"{f', started at step {started + 1:,}' if started else ''}"
                f"{f', decay {decay:g}' if decay else ''}; line = the schedule in use now, in "
                "NumPy; dots = the effective rate `_decayed_lr` returned at each recorded step)")
    chart(figures.learning_rate_spec(preview, recorded, marks, uirevision=run["id"],
                                     now_step=int(run["step"]) if live else None),
          f"lr_{run['id']}", live)
