"""The command table of a run process: `{kind: (payload model, handler)}`.

A page queues a command row (`RunStore.send_command`: `kind`, JSON `payload`); the run process
reads its pending rows with `pending` and passes each to `handle`, which

1. looks the kind up in `COMMANDS` (an unknown kind is refused, listing the known kinds);
2. decodes the payload and validates it with the kind's pydantic model: it must be a JSON
   object (no duplicate keys) holding the model's fields with their types; anything else is
   refused naming the field, and the run trains on;
3. calls the handler, which either acts on the run (the command is then `done` at the next
   step, the first step that sees its effect) or raises `Refused` (e.g. a value outside a
   hyperparameter's range).

Payloads (extra keys are ignored):

* `set_hyper {name: str, value: number, source: str = "user"}` (refused for `learning_rate`
  while a schedule replaces it: Keras would swap the schedule for a float the compiled step
  never reads). An assign to the hyperparameter's `tf.Variable`, no retrace; except a change
  of the optimizer's `trace_signature()` (SGD/RMSprop momentum crossing 0 switches the fused
  path's regime, Python state like `self.t_cur = 5`): the step is rebuilt between two steps
  and a `step traces` row records the retrace.
  `set_hyper {name: "lr_schedule", value: schedule | null}` and `{name: "decay", value:
  number}` change the run's learning-rate schedule (Keras's serialized form, checked against
  `optimizers.schedule_specs`; null = constant at the schedule's current value) and legacy
  `decay`. New numbers of the same schedule class and structure are variable assigns that take
  effect at the next step with no retrace (`lr_schedule.<name>` rows); another class,
  constant <-> schedule, or a new `decay` (a plain attribute, not `_set_hyper`) is a different
  kind of change: the step function is rebuilt between two steps, which costs one retrace,
  recorded as a `step traces` row (old -> new count; the source says which change). Refused
  for a run following hyper-gradients when it would retrace.
* `autotune {name: str, hyper_learning_rate: number | null}` (null switches auto-tune off)
* `response_slice {name: str, horizon: int = 20, points: int = 9}`
* `pause {}`, `resume {}`, `stop {}`
* `step {}`: while paused, train exactly one more step and stay paused (refused when running)
* `set_speed {steps_per_second: number in [MIN_SPEED, MAX_SPEED] | null}` (null = full speed):
  the run loop sleeps between steps so that it trains at most this many steps per second

The handlers act on the run loop (`runs.run_loop._Run`): its engine, hyper stepper, record
buffers and flags. Never imports Streamlit.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from engine.record_rows import HyperChangeRow
from optimizers.hyperparams import InvalidHyperparameter
from schedules.table import ScheduleError, validate_schedule
from settings import fields as setting_fields

if TYPE_CHECKING:
    from runs.run_loop import _Run
    from runs.store import RunStore

SLICE_HORIZON = 20  # the defaults of hypergrad.stepper (kept here: no TensorFlow import)
SLICE_POINTS = 9
MIN_SPEED = 0.1  # steps per second of `set_speed` (0.1 = one step every 10 s)
MAX_SPEED = 1000.0  # above this the loop is compute-bound anyway: use null (full speed)


class Refused(Exception):
    """A command the run cannot carry out; `args[0]` is the message (it names the field)."""


# ----- payload models ---------------------------------------------------------------------------
class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class NoPayload(_Payload):
    """`pause`, `resume`, `stop`: an empty object."""


class SetSpeed(_Payload):
    """`set_speed`: at most `steps_per_second` steps per second, in [MIN_SPEED, MAX_SPEED];
    None trains at full speed (no sleep between steps)."""

    steps_per_second: StrictFloat | StrictInt | None = Field(...)

    @pydantic.field_validator("steps_per_second")
    @classmethod
    def _in_range(cls, value: float | None) -> float | None:
        if value is not None and not MIN_SPEED <= value <= MAX_SPEED:  # NaN fails too
            raise ValueError(f"must be in [{MIN_SPEED:g}, {MAX_SPEED:g}] steps per second, or "
                             "null for full speed")
        return None if value is None else float(value)


class SetHyper(_Payload):
    """`set_hyper`: the value is checked by the optimizer's `HyperSpec` in the handler."""

    name: StrictStr
    value: Any = Field(...)  # required; its type and range are the spec's job (names the field)
    source: StrictStr = Field("user", min_length=1, max_length=64)


class Autotune(_Payload):
    """`autotune`: RTHO of a followed hyperparameter on with this eta, or off (None)."""

    name: StrictStr
    hyper_learning_rate: StrictFloat | None = Field(...)


class ResponseSlice(_Payload):
    """`response_slice`: ranges are checked by `HyperStepper.response_slice` (1..200, 3..25)."""

    name: StrictStr
    horizon: StrictInt | None = SLICE_HORIZON
    points: StrictInt | None = SLICE_POINTS


# ----- handlers ---------------------------------------------------------------------------------
TRACES_ROW = "step traces"  # hyper_changes row of a change that recompiled the step


def _message(error: BaseException) -> str:
    return str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)


SCHEDULE_NAMES = ("lr_schedule", "decay")  # `set_hyper` names that are run settings


def _set_hyper(run: "_Run", command_id: int, payload: SetHyper) -> None:
    # Handlers run in the run process, which has TensorFlow; the pages import this module
    # (the payload models) in the server, which must not (tests/test_tf_free_server.py).
    from optimizers.base import trace_signature

    if payload.name in SCHEDULE_NAMES:
        _set_schedule(run, payload)
        return
    opt = run.engine.optimizer
    if payload.name == "learning_rate" and getattr(run.engine, "live_schedule", None) is not None:
        raise Refused("set_hyper learning_rate refused: this run's learning rate is a "
                      f"{run.engine.live_schedule.class_name} schedule; change its parameters "
                      "or pick constant (set_schedule)")
    try:
        value = opt.spec(payload.name).validate(payload.value)
        old = opt.hyper_values()[payload.name]
        signature = trace_signature(opt)
        opt._set_hyper(payload.name, value)
    except (InvalidHyperparameter, KeyError) as error:
        raise Refused(_message(error)) from None
    new = opt.hyper_values()[payload.name]
    step = run.step + 1
    run.buffers["hyper_changes"].append(
        HyperChangeRow(step, payload.name, old, new, payload.source))
    # A change the compiled step cannot see through a tf.Variable (e.g. SGD/RMSprop momentum
    # crossing 0 switches the fused path's Python-chosen regime): rebuild the step between
    # two steps and count the retrace. A hyper-gradient run steps through the pure rule (by
    # value), which needs none.
    if trace_signature(opt) != signature and run.hyper is None and hasattr(run.engine, "retrace"):
        traces = run.engine.traces
        run.engine.retrace()
        run.buffers["hyper_changes"].append(HyperChangeRow(
            step, TRACES_ROW, traces, run.engine.traces,
            f"{payload.source}: {payload.name} regime (retrace)"[:64]))
    run.flush(wait=True)  # the row is readable once the command reads `done`
    run.save_optimizer()


def _set_schedule(run: "_Run", payload: SetHyper) -> None:
    """`set_hyper` of `lr_schedule` or `decay` (see the module docstring)."""
    from engine import recording  # TensorFlow: in the run process only (see `_set_hyper`)

    engine = run.engine
    if not hasattr(engine, "set_schedule"):
        raise Refused(f"set_hyper {payload.name} refused: this engine has no live schedule")
    schedule, decay = engine.schedule_values(), engine.decay
    if payload.name == "lr_schedule":
        try:
            schedule = validate_schedule("lr_schedule", payload.value)
        except ScheduleError as error:
            raise Refused(str(error)) from None
    else:
        low, high = setting_fields.bounds("decay")
        value = payload.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                low <= value <= high):  # NaN fails too
            raise Refused(f"decay={value!r} refused: must be a float in [{low:g}, {high:g}]")
        decay = float(value)
    live = engine.live_schedule
    assign = decay == engine.decay and (
        (schedule is None and live is None)
        or (schedule is not None and live is not None and live.same_structure(schedule)))
    if not assign and run.hyper is not None:
        raise Refused("set_schedule refused: this change rebuilds the step (a retrace) and the "
                      "run follows hyper-gradients, whose tangents hold the old schedule; change "
                      "numbers of the same schedule only, or start a new run")
    before = recording.schedule_parameter_values(engine.schedule_values())
    traces = engine.traces
    try:
        kind, changes = engine.set_schedule(schedule, decay, None)
    except (InvalidHyperparameter, ValueError) as error:
        raise Refused(_message(error)) from None
    step, source = run.step + 1, payload.source
    after = recording.schedule_parameter_values(engine.schedule_values())
    rows = [HyperChangeRow(step, name, before.get(name), value, source)
            for name, value in after.items() if before.get(name) != value]
    if "decay" in changes:
        rows.append(HyperChangeRow(step, "decay", *changes["decay"], source))
    if kind == "retrace":
        old, new = changes.get("lr_schedule", ("", ""))
        what = f"{old} -> {new}" if old != new else f"decay {engine.decay:g}"
        rows.append(HyperChangeRow(step, TRACES_ROW, traces, engine.traces,
                                   f"{source}: {what} (retrace)"[:64]))
    run.buffers["hyper_changes"] += rows
    run.flush(wait=True)  # the rows (and the new trace count) are readable once `done`
    run.save_optimizer()


def _hyper_stepper(run: "_Run", kind: str):
    if run.hyper is None:
        raise Refused(f"{kind} refused: this run does not follow hyper-gradients "
                      "(config.hypergradients is empty)")
    return run.hyper


def _autotune(run: "_Run", command_id: int, payload: Autotune) -> None:
    hyper = _hyper_stepper(run, "autotune")
    try:
        hyper.set_autotune(payload.name, payload.hyper_learning_rate)
    except (KeyError, ValueError) as error:
        raise Refused(_message(error)) from None
    run.save_meta()


def _response_slice(run: "_Run", command_id: int, payload: ResponseSlice) -> None:
    hyper = _hyper_stepper(run, "response_slice")
    try:
        rows = hyper.response_slice(
            command_id, run.step, payload.name,
            horizon=SLICE_HORIZON if payload.horizon is None else payload.horizon,
            points=SLICE_POINTS if payload.points is None else payload.points)
    except (KeyError, ValueError, InvalidHyperparameter) as error:
        raise Refused(_message(error)) from None
    run.buffers["response_slices"] += rows
    run.flush(wait=True)  # the rows are readable once the command reads `done`


def _pause(run: "_Run", command_id: int, payload: NoPayload) -> None:
    run.paused = True
    run.single_steps = 0
    run.flush(wait=True)
    run.store.set_status(run.run_id, "paused", f"paused before step {run.step + 1}")


def _resume(run: "_Run", command_id: int, payload: NoPayload) -> None:
    if run.paused:
        run.paused = False
        run.single_steps = 0
        run.store.set_status(run.run_id, "running")


def _stop(run: "_Run", command_id: int, payload: NoPayload) -> None:
    run.stop_requested = True
    run.stop_message = f"stopped by the user after step {run.step}"


def _step(run: "_Run", command_id: int, payload: NoPayload) -> None:
    if not run.paused:
        raise Refused("step refused: the run is not paused (Pause first; Step trains exactly "
                      "one step of a paused run)")
    run.single_steps += 1


def _set_speed(run: "_Run", command_id: int, payload: SetSpeed) -> None:
    run.steps_per_second = payload.steps_per_second


@dataclass(frozen=True)
class Command:
    """One command kind: the model its payload must satisfy and the handler that runs it."""

    payload: type[_Payload]
    handler: Callable[["_Run", int, Any], None]


COMMANDS: dict[str, Command] = {
    "set_hyper": Command(SetHyper, _set_hyper),
    "autotune": Command(Autotune, _autotune),
    "response_slice": Command(ResponseSlice, _response_slice),
    "pause": Command(NoPayload, _pause),
    "resume": Command(NoPayload, _resume),
    "stop": Command(NoPayload, _stop),
    "step": Command(NoPayload, _step),
    "set_speed": Command(SetSpeed, _set_speed),
}


# ----- decoding ---------------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValueError(f"duplicate key {key!r}")
    return dict(pairs)


def parse(kind: Any, payload: Any) -> tuple[Command, _Payload]:
    """The command of `kind` and its validated payload.

    Args:
        kind: the row's `kind` column.
        payload: the row's `payload` column: JSON text of an object (a dict is accepted too).

    Raises:
        Refused: unknown kind (lists the known kinds), payload not JSON, not an object, with a
            duplicate key, a missing field or a field of the wrong type (names the field).
    """
    command = COMMANDS.get(kind) if isinstance(kind, str) else None
    if command is None:
        raise Refused(f"command kind={kind!r} refused: known kinds are {', '.join(COMMANDS)}")
    fields = ", ".join(command.payload.model_fields) or "no fields"
    if isinstance(payload, (str, bytes)):
        try:
            payload = json.loads(payload, object_pairs_hook=_no_duplicates)
        except ValueError as error:  # JSONDecodeError and the duplicate-key refusal
            raise Refused(f"{kind} refused: payload is not a JSON object ({error})") from None
    if not isinstance(payload, dict):
        raise Refused(f"{kind} refused: payload must be a JSON object ({fields}), "
                      f"got {type(payload).__name__} {str(payload)[:60]}")
    try:
        return command, command.payload.model_validate(payload)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        if first["type"] == "missing":
            raise Refused(f"{kind} refused: field {field} is required (fields: {fields})") \
                from None
        raise Refused(f"{kind} refused: field {field}={repr(first.get('input'))[:60]}: "
                      f"{first['msg']}") from None


_PENDING = ("SELECT id, kind, payload FROM commands WHERE run_id = ? AND status = 'pending'"
            " ORDER BY id")


def pending(store: "RunStore", run_id: int, con: sqlite3.Connection | None = None
            ) -> list[dict[str, Any]]:
    """The run's pending command rows, oldest first: `id, kind, payload` with the payload as
    stored (text, decoded by `parse`), so that one malformed row cannot stop the others.

    `con`: an open connection to the store to read through (the run loop polls ten times a
    second: a new connection per poll costs ~0.3 ms, a held one ~4 us); on any SQLite error
    the read is retried on a new connection, which raises the store's own errors
    (`StoreUnavailable`).
    """
    if con is not None:
        try:
            rows = con.execute(_PENDING, (run_id,)).fetchall()
            return [{"id": i, "kind": k, "payload": p} for i, k, p in rows]
        except sqlite3.Error:
            pass
    with store._connect() as fresh:
        rows = fresh.execute(_PENDING, (run_id,)).fetchall()
    return [{"id": i, "kind": k, "payload": p} for i, k, p in rows]


def handle(run: "_Run", command: dict[str, Any]) -> str:
    """Validate and carry out one command row on `run`; mark it `done` or `refused`.

    Args:
        run: the run loop.
        command: `id, kind, payload` (payload as stored or already decoded).

    Returns:
        The command's new status, `done` or `refused`.
    """
    next_step = run.step + 1
    try:
        spec, payload = parse(command["kind"], command["payload"])
        spec.handler(run, command["id"], payload)
    except Refused as refused:
        run.store.finish_command(command["id"], "refused", str(refused.args[0]), next_step)
        return "refused"
    run.store.finish_command(command["id"], "done", "", next_step)
    return "done"
