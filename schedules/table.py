"""The learning-rate schedules a run may use, as a TensorFlow-free table.

`SCHEDULE_SPECS` maps each allow-listed Keras class (`optimizers.keras_schedules.ALLOWED_SCHEDULES`
holds the tf_keras classes themselves; a test keeps the two tables equal) to its constructor
parameters: name, kind (`float`, `int`, `bool`, `floats`/`ints` = a list), default, UI range,
log scale, help. Settings validate a run's `lr_schedule` against it (`validate_schedule`) without
importing TensorFlow; the run worker then builds the real schedule with
`optimizers.keras_schedules.schedule_from_config`. The curves in NumPy are `schedules.preview`.
A run's step `t` (1-based) uses the schedule at `iterations = t - 1`.

The serialized form is Keras's: `{"class_name": "ExponentialDecay", "config": {...}}`, plus an
optional `"start_step": k` (k > 0): the schedule started at iteration k, so step t uses the
schedule at `max(iterations - k, 0)`. A schedule switched on mid-run "from now" gets k = the
run's iterations at the switch; without it the schedule is evaluated at the global step
(ExponentialDecay switched on at step 5,238 would start at its value for step 5,238). In a
command payload `"start_step": "now"` asks the run process for its own iteration count; Keras
expresses the offset by wrapping the schedule (`optimizers.keras_schedules.ScheduleFromStep`).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping


KERAS_DOC = "https://www.tensorflow.org/api_docs/python/tf/keras/optimizers/schedules/"
MAX_STEPS = 1_000_000
MAX_PIECES = 16  # PiecewiseConstantDecay: at most this many boundaries
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
KINDS = ("float", "int", "bool", "floats", "ints")
# The scalar series a run records with its effective learning rate (`_decayed_lr`) per step.
EFFECTIVE_LR = "learning_rate (effective)"


@dataclass(frozen=True)
class ScheduleParam:
    """One constructor parameter of a schedule class.

    Attributes:
        name: the constructor keyword (= the `get_config` key).
        kind: one of `KINDS`; `floats`/`ints` are lists of that kind.
        default: the lab's default (None allowed only when `optional`).
        low, high: the UI/validation range of a number (of each element of a list), both included
            unless `low_open` (e.g. a learning rate in (0, 10]).
        log: the UI steps the value on a log scale (learning rates).
        optional: None is allowed (CosineDecay's `warmup_target`: None = no warm-up).
        help: one line for the widget's tooltip.
    """

    name: str
    kind: str
    default: Any
    low: float = 0.0
    high: float = 0.0
    low_open: bool = False
    log: bool = False
    optional: bool = False
    help: str = ""

    def allowed(self) -> str:
        """What the parameter accepts, as text for an error message."""
        if self.kind == "bool":
            return "true or false"
        left = "(" if self.low_open else "["
        noun = "an integer" if self.kind in ("int", "ints") else "a float"
        text = f"{noun} in {left}{_shown(self.low)}, {_shown(self.high)}]"
        if self.kind in ("floats", "ints"):
            text = f"a list of {1}..{MAX_PIECES + 1} numbers, each {text}"
        return text + (" or null" if self.optional else "")

    def is_variable(self) -> bool:
        """True when a run holds the value in a `tf.Variable` (a change is an assign, no
        retrace): numbers and lists of numbers; bools and None select code paths."""
        return self.kind != "bool"


def _shown(number: float) -> str:
    """1000000 rather than 1e+06 for a whole number, else `%g`."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


_LR = ScheduleParam("initial_learning_rate", "float", 0.01, 0.0, 10.0, low_open=True, log=True,
                    help="learning rate at step 0")
_DECAY_STEPS = ScheduleParam("decay_steps", "int", 100, 1, MAX_STEPS,
                             help="steps over which the rate decays")
_STAIRCASE = ScheduleParam("staircase", "bool", False,
                           help="decay in discrete jumps every decay_steps")
_ALPHA = ScheduleParam("alpha", "float", 0.0, 0.0, 1.0,
                       help="floor of the decay, as a fraction of the initial learning rate")

# class name -> its parameters (Keras docs: KERAS_DOC + class name); `name` (the op name) is
# accepted in configs but never shown.
SCHEDULE_SPECS: dict[str, tuple[ScheduleParam, ...]] = {
    "ExponentialDecay": (
        _LR, _DECAY_STEPS,
        ScheduleParam("decay_rate", "float", 0.9, 0.0, 1.0, low_open=True,
                      help="factor applied every decay_steps"),
        _STAIRCASE),
    "InverseTimeDecay": (
        _LR, _DECAY_STEPS,
        ScheduleParam("decay_rate", "float", 0.5, 0.0, 100.0,
                      help="lr / (1 + decay_rate * step / decay_steps)"),
        _STAIRCASE),
    "PiecewiseConstantDecay": (
        ScheduleParam("boundaries", "ints", [300, 600], 0, MAX_STEPS,
                      help="strictly increasing steps where the value changes"),
        ScheduleParam("values", "floats", [0.01, 0.005, 0.001], 0.0, 10.0, low_open=True,
                      log=True, help="one more value than boundaries")),
    "PolynomialDecay": (
        _LR, _DECAY_STEPS,
        ScheduleParam("end_learning_rate", "float", 0.0001, 0.0, 10.0, log=True,
                      help="learning rate after decay_steps"),
        ScheduleParam("power", "float", 1.0, 0.0, 10.0, help="1 = linear decay"),
        ScheduleParam("cycle", "bool", False, help="start again past decay_steps")),
    "CosineDecay": (
        _LR, _DECAY_STEPS, _ALPHA,
        ScheduleParam("warmup_target", "float", None, 0.0, 10.0, low_open=True, log=True,
                      optional=True, help="warm up linearly to this rate first (null: no "
                                          "warm-up)"),
        ScheduleParam("warmup_steps", "int", 0, 0, MAX_STEPS, help="length of the warm-up")),
    "CosineDecayRestarts": (
        _LR,
        ScheduleParam("first_decay_steps", "int", 100, 1, MAX_STEPS,
                      help="length of the first period"),
        ScheduleParam("t_mul", "float", 2.0, 1.0, 10.0,
                      help="each period is t_mul times longer"),
        ScheduleParam("m_mul", "float", 1.0, 0.0, 1.0, low_open=True,
                      help="each restart starts m_mul times lower"),
        _ALPHA),
}
SOURCES = {  # paper of each formula (the Keras docs cite them)
    "CosineDecay": "Loshchilov & Hutter, SGDR, ICLR 2017 (arXiv:1608.03983), eq. 5; warm-up: "
                   "Goyal et al. 2017 (arXiv:1706.02677)",
    "CosineDecayRestarts": "Loshchilov & Hutter, SGDR, ICLR 2017 (arXiv:1608.03983), eq. 5",
}


class ScheduleError(ValueError):
    """A schedule config was refused; `field` is its dotted path
    (`lr_schedule.config.decay_steps`), `str(error)` is `<field>=<value> refused: ...`."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field = field
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        super().__init__(f"{field}={shown} refused: must be {allowed}")


def params(class_name: str) -> tuple[ScheduleParam, ...]:
    """The parameters of `class_name`.

    Raises:
        KeyError: not an allow-listed class (the message lists them).
    """
    if class_name not in SCHEDULE_SPECS:
        raise KeyError(f"{class_name!r} is not an allowed schedule: one of "
                       f"{', '.join(SCHEDULE_SPECS)}")
    return SCHEDULE_SPECS[class_name]


def float_params(data: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Names of the float parameters of a validated schedule that are set (not None): the
    ones whose hyper-gradient may be followed as `lr_schedule.<name>`. `t_mul` = 1 is left out:
    there Keras switches CosineDecayRestarts to its equal-periods formula, so the learning rate
    has no derivative in `t_mul` (`schedules.differentiable`)."""
    if not data:
        return ()
    config = data["config"]
    return tuple(p.name for p in params(data["class_name"])
                 if p.kind == "float" and config.get(p.name) is not None
                 and not (p.name == "t_mul" and float(config[p.name]) == 1.0))


def _number(field: str, value: Any, spec: ScheduleParam, integer: bool) -> float | int:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer() if math.isfinite(float(value)) else False
    if ok:
        number = float(value)
        low_ok = number > spec.low if spec.low_open else number >= spec.low
        ok = math.isfinite(number) and low_ok and number <= spec.high
    if not ok:
        raise ScheduleError(field, value, spec.allowed().removesuffix(" or null")
                            if spec.kind in ("float", "int") else spec.allowed())
    return int(value) if integer else float(value)


def _param(field: str, spec: ScheduleParam, value: Any) -> Any:
    if value is None and spec.optional:
        return None
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ScheduleError(field, value, spec.allowed())
        return value
    if spec.kind in ("float", "int"):
        return _number(field, value, spec, spec.kind == "int")
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_PIECES + 1:
        raise ScheduleError(field, value, spec.allowed())
    return [_number(f"{field}[{i}]", v, spec, spec.kind == "ints") for i, v in enumerate(value)]


def validate_schedule(field: str, data: Any, allow_now: bool = False) -> dict[str, Any] | None:
    """A schedule config checked against `SCHEDULE_SPECS`, with every parameter filled in.

    Args:
        field: the name used in messages (`lr_schedule`).
        data: None (constant learning rate) or `{"class_name": str, "config": {...}}`; Keras's
            extra keys `module` and `registered_name` are accepted and dropped; an optional
            `start_step` (int in [0, MAX_STEPS], or "now" when `allow_now`).
        allow_now: accept `start_step: "now"` (a command, resolved by the run process).

    Returns:
        None, or `{"class_name": ..., "config": {...}}` with plain JSON values only, plus
        `start_step` when it is not 0.

    Raises:
        ScheduleError: not such a dict, an unknown class or key, a value of the wrong type or out
            of range, lists of mismatched length or boundaries not strictly increasing. Nothing
            in `data` is imported, evaluated or called.
    """
    if data is None:
        return None
    if not isinstance(data, Mapping) or "class_name" not in data or set(data) - {
            "class_name", "config", "module", "registered_name", "start_step"}:
        raise ScheduleError(field, data, "null or {\"class_name\": ..., \"config\": {...}} "
                                         f"with class_name one of {', '.join(SCHEDULE_SPECS)}")
    class_name = data["class_name"]
    if not isinstance(class_name, str) or class_name not in SCHEDULE_SPECS:
        raise ScheduleError(f"{field}.class_name", class_name,
                            f"one of {', '.join(SCHEDULE_SPECS)}")
    config = data.get("config", {})
    if not isinstance(config, Mapping):
        raise ScheduleError(f"{field}.config", config, "a JSON object")
    table = {p.name: p for p in SCHEDULE_SPECS[class_name]}
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{field}.config.{key}"
        if key == "name":  # Keras's op name: a plain identifier or null
            if value is not None and not (isinstance(value, str) and NAME_PATTERN.fullmatch(value)):
                raise ScheduleError(path, value, "null or a plain name (letters, digits, _)")
            continue  # not kept: it changes no number
        if key not in table:
            raise ScheduleError(path, value, f"absent: {class_name} takes {', '.join(table)}")
        out[key] = _param(path, table[key], value)
    out = {spec.name: out[spec.name] if spec.name in out else (
        list(spec.default) if isinstance(spec.default, list) else spec.default)
        for spec in table.values()}  # declaration order, defaults filled in
    if class_name == "PiecewiseConstantDecay":
        bounds, values = out["boundaries"], out["values"]
        if len(values) != len(bounds) + 1:
            raise ScheduleError(f"{field}.config.values", values,
                                f"a list of len(boundaries) + 1 = {len(bounds) + 1} numbers")
        if any(b >= a for b, a in zip(bounds, bounds[1:])) or len(bounds) > MAX_PIECES:
            raise ScheduleError(f"{field}.config.boundaries", bounds,
                                f"strictly increasing, at most {MAX_PIECES} steps")
    start = _start_step(f"{field}.start_step", data.get("start_step", 0), allow_now)
    return {"class_name": class_name, "config": out, **({"start_step": start} if start else {})}


def _start_step(field: str, value: Any, allow_now: bool) -> Any:
    if allow_now and value == "now":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not float(value).is_integer() or not 0 <= value <= MAX_STEPS:
        raise ScheduleError(field, value, f"an integer in [0, {MAX_STEPS}]"
                            + (' or "now"' if allow_now else ""))
    return int(value)


def start_step(data: Mapping[str, Any] | None) -> int:
    """The iteration at which a validated schedule started (0: at the run's start)."""
    return int((data or {}).get("start_step", 0))


def structure(data: Mapping[str, Any] | None) -> tuple:
    """What a live change cannot assign to variables: the class, its bools, which parameters
    are None and the lengths of its lists (each selects a code path of the traced step). Two
    validated schedules with equal structures differ in numbers only (no retrace)."""
    if not data:
        return ("constant",)
    config = data.get("config", {})
    # an offset is a wrapper object around the schedule: adding or removing one is a rebuild
    return (data["class_name"], bool(data.get("start_step")), tuple(
        (p.name, config.get(p.name) if p.kind == "bool" else config.get(p.name) is None,
         len(config.get(p.name) or ()) if p.kind in ("floats", "ints") else 0)
        for p in params(data["class_name"])))


# ----- text form (share links) ----------------------------------------------------------------
def param_text(value: Any) -> str:
    """A parameter value as link text: `true`/`false`, `repr` of a float, comma-joined lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(param_text(v) for v in value)
    return repr(float(value)) if isinstance(value, float) else str(value)


_NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_param_text(field: str, class_name: str, name: str, text: str) -> Any:
    """The typed value of parameter `name` of `class_name` from link text (checked later by
    `validate_schedule`); plain ASCII decimals only, nothing evaluated.

    Raises:
        ScheduleError: an unknown class or parameter, or text that is not of the kind.
    """
    table = {p.name: p for p in params(class_name)}
    if name not in table:
        raise ScheduleError(field, text, f"absent: {class_name} takes {', '.join(table)}")
    spec = table[name]
    if spec.kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ScheduleError(field, text, "true or false")
        return text.lower() == "true"
    if spec.optional and text.lower() in ("", "null", "none"):
        return None
    pieces = text.split(",") if spec.kind in ("floats", "ints") else [text]
    if not all(_NUMBER_TEXT.fullmatch(p) for p in pieces):
        raise ScheduleError(field, text, spec.allowed())
    numbers_ = [float(p) for p in pieces]
    if spec.kind in ("int", "ints"):
        numbers_ = [int(v) if v.is_integer() else v for v in numbers_]
    return numbers_ if spec.kind in ("floats", "ints") else numbers_[0]


__all__ = ["EFFECTIVE_LR", "KERAS_DOC", "SCHEDULE_SPECS", "ScheduleError", "ScheduleParam",
           "float_params", "param_text", "params", "parse_param_text", "structure",
           "validate_schedule"]
