"""What crosses the process boundary of the run service, declared once: run statuses, command
kinds with their payload models, `parse`, `Refused`, and the checks a command shares with the
settings (a run's name, a live `lr_schedule` or `decay`).

The server (pages, CLI) and the run process both import this module, so it imports no
TensorFlow (tests/test_tf_free_server.py) and no Streamlit.

A page queues a command row (`RunStore.send_command`: `kind`, JSON `payload`) through the
service (`runs.service.control`, which validates it once); the run process reads its pending
rows (`RunStore.pending`) and parses each with `parse`, which

1. looks the kind up in `PAYLOADS` (an unknown kind is refused, listing the known kinds);
2. decodes the payload and validates it with the kind's pydantic model: it must be a JSON
   object (no duplicate keys) holding the model's fields with their types; anything else is
   refused naming the field (and the hyperparameter it was for), and the run trains on;
3. for `set_hyper` of a run setting (`lr_schedule`, `decay`) checks the value as the settings
   table does (`checked_run_setting`): a row written past the service cannot hand the run an
   unchecked schedule.

Payloads (extra keys are ignored):

* `set_hyper {name: str, value: number, source: str = "user"}`: the value of a hyperparameter
  is checked against the optimizer's `HyperSpec` by the service; the run process only calls the
  optimizer, whose `_set_hyper` keeps the library's own guard.
  `set_hyper {name: "lr_schedule", value: schedule | null}` and `{name: "decay", value:
  number}` change the run's learning-rate schedule (Keras's serialized form, checked against
  `schedules.table`; null = constant at the schedule's current value) and legacy
  `decay` (see `runs.process.handlers`).
* `autotune {name: str, hyper_learning_rate: number | null}` (null switches auto-tune off)
* `response_slice {name: str, horizon: int = 20, points: int = 9}`
* `pause {}`, `resume {}`, `stop {}`
* `step {}`: while paused, train exactly one more step and stay paused
* `set_speed {steps_per_second: number in [MIN_SPEED, MAX_SPEED] | null}` (null = full speed)
* `lr_range {lr_min: number, lr_max: number, steps: int, start: "current" | "init"}`: a
  learning-rate range test of a copy of the run (`engine.lr_range_sweep`), from its current
  state or from its initial weights; ranges as `engine.lr_range.check`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from engine import lr_range
from schedules.table import validate_schedule
from settings import fields as setting_fields

# ----- run statuses -----------------------------------------------------------------------------
# `queued` waits for a free place in the run pool (`runs.service.pool.dispatch`); it has no
# process yet, so it is neither active (no commands but `stop`) nor final.
QUEUED = "queued"
ACTIVE_STATUSES = ("starting", "running", "paused")
LIVE_STATUSES = (QUEUED,) + ACTIVE_STATUSES
# `imported`: a run read back from an exported zip with its records (`RunStore.import_run`);
# nothing trains it, so it is final from the start and no command ever reaches it.
IMPORTED = "imported"
FINAL_STATUSES = ("finished", "stopped", "failed", "diverged", "interrupted", IMPORTED)

# ----- limits shared by the service and the run process ------------------------------------------
SLICE_HORIZON = 20  # the defaults of hypergrad.stepper (kept here: no TensorFlow import)
SLICE_POINTS = 9
MIN_SPEED = 0.1  # steps per second of `set_speed` (0.1 = one step every 10 s)
MAX_SPEED = 1000.0  # above this the loop is compute-bound anyway: use null (full speed)
MAX_NAME = 120  # characters of a run's display name
# `set_hyper` names that are run settings (the schedule the step evaluates), not `_set_hyper`s
SCHEDULE_NAMES = ("lr_schedule", "decay")


class Refused(Exception):
    """A command the run cannot carry out; `args[0]` is the message (it names the field)."""


def checked_name(name: object) -> str:
    """A run's display name, stripped.

    Raises:
        ValueError: longer than `MAX_NAME` characters.
    """
    name = str(name).strip()
    if len(name) > MAX_NAME:
        raise ValueError(f"name refused: {len(name)} characters, at most {MAX_NAME} allowed")
    return name


def checked_run_setting(name: str, value: Any) -> Any:
    """The value of a live `set_hyper` of a run setting, checked as the settings table checks it.

    Args:
        name: `lr_schedule` (a serialized schedule, or None for a constant rate) or `decay` (a
            float in the settings table's range of `decay`).

    Returns:
        The schedule with every parameter filled in (`validate_schedule`), or `decay` as float.

    Raises:
        schedules.table.ScheduleError: a schedule refused (names the field).
        ValueError: a `decay` that is not a float in range (names the range); `name` is not one
            of `SCHEDULE_NAMES`.
    """
    if name == "lr_schedule":
        return validate_schedule("lr_schedule", value, allow_now=True)
    if name != "decay":
        raise ValueError(f"name={name!r} refused: run settings are {', '.join(SCHEDULE_NAMES)}")
    low, high = setting_fields.bounds("decay")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            low <= value <= high):  # NaN fails too
        raise ValueError(f"decay={value!r} refused: must be a float in [{low:g}, {high:g}]")
    return float(value)


# ----- payload models ---------------------------------------------------------------------------
class Payload(BaseModel):
    """A command's payload: extra keys ignored, immutable once parsed."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class NoPayload(Payload):
    """`pause`, `resume`, `stop`, `step`: an empty object."""


class SetSpeed(Payload):
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


class SetHyper(Payload):
    """`set_hyper`: a hyperparameter's value is checked against its `HyperSpec` by the service
    (the spec depends on the run's optimizer); a run setting's by `parse`."""

    name: StrictStr
    value: Any = Field(...)  # required; its type and range are the spec's job (names the field)
    source: StrictStr = Field("user", min_length=1, max_length=64)


class Autotune(Payload):
    """`autotune`: RTHO of a followed hyperparameter on with this eta, or off (None)."""

    name: StrictStr
    hyper_learning_rate: StrictFloat | None = Field(...)


class ResponseSlice(Payload):
    """`response_slice`: ranges are checked by the service and `HyperStepper.response_slice`."""

    name: StrictStr
    horizon: StrictInt | None = SLICE_HORIZON
    points: StrictInt | None = SLICE_POINTS


class CheckHypergradients(Payload):
    """`check_hypergradients`: forward = reverse = finite differences on a float64 copy of the
    run over its next `horizon` steps (`hypergrad.run_check`); the range is the service's."""

    horizon: StrictInt = Field(...)


class LrRange(Payload):
    """`lr_range`: sweep a copy of the run from `lr_min` to `lr_max` in `steps` geometric steps,
    from its `current` state or from its initial weights (`init`); the run does not move."""

    lr_min: StrictFloat | StrictInt = lr_range.LR_MIN
    lr_max: StrictFloat | StrictInt = lr_range.LR_MAX
    steps: StrictInt = lr_range.STEPS
    start: Literal["current", "init"] = "current"

    @pydantic.model_validator(mode="after")
    def _in_range(self) -> LrRange:
        lr_range.check(float(self.lr_min), float(self.lr_max), self.steps)
        return self


PAYLOADS: dict[str, type[Payload]] = {
    "set_hyper": SetHyper,
    "autotune": Autotune,
    "response_slice": ResponseSlice,
    "pause": NoPayload,
    "resume": NoPayload,
    "stop": NoPayload,
    "step": NoPayload,
    "set_speed": SetSpeed,
    "check_hypergradients": CheckHypergradients,
    "lr_range": LrRange,
}
COMMAND_KINDS = tuple(PAYLOADS)


# ----- decoding ---------------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValueError(f"duplicate key {key!r}")
    return dict(pairs)


def parse(kind: Any, payload: Any) -> Payload:
    """The validated payload of a command row.

    Args:
        kind: the row's `kind` column.
        payload: the row's `payload` column: JSON text of an object (a dict is accepted too).

    Returns:
        An instance of `PAYLOADS[kind]`; for `set_hyper` of a run setting its value as
        `checked_run_setting` returns it.

    Raises:
        Refused: unknown kind (lists the known kinds), payload not JSON, not an object, with a
            duplicate key, a missing field or a field of the wrong type (names the field, and
            the hyperparameter the payload names), a run setting out of range.
    """
    model = PAYLOADS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise Refused(f"command kind={kind!r} refused: known kinds are {', '.join(PAYLOADS)}")
    fields = ", ".join(model.model_fields) or "no fields"
    if isinstance(payload, (str, bytes)):
        try:
            payload = json.loads(payload, object_pairs_hook=_no_duplicates)
        except ValueError as error:  # JSONDecodeError and the duplicate-key refusal
            raise Refused(f"{kind} refused: payload is not a JSON object ({error})") from None
    if not isinstance(payload, dict):
        raise Refused(f"{kind} refused: payload must be a JSON object ({fields}), "
                      f"got {type(payload).__name__} {str(payload)[:60]}")
    try:
        parsed = model.model_validate(payload)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        named = payload.get("name")
        what = f" for hyperparameter {named!r}" if isinstance(named, str) and field != "name" \
            else ""
        if first["type"] == "missing":
            raise Refused(f"{kind} refused: field {field} is required{what} (fields: "
                          f"{fields})") from None
        raise Refused(f"{kind} refused: field {field}={repr(first.get('input'))[:60]}{what}: "
                      f"{first['msg']}") from None
    if isinstance(parsed, SetHyper) and parsed.name in SCHEDULE_NAMES:
        try:
            value = checked_run_setting(parsed.name, parsed.value)
        except ValueError as error:  # ScheduleError is one
            raise Refused(str(error)) from None
        parsed = parsed.model_copy(update={"value": value})
    return parsed
