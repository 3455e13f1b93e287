"""Keras's learning-rate schedule objects in configs: serialized as Keras does, rebuilt from an
allow-list only.

`schedule_to_config` writes a `tf_keras.optimizers.schedules.LearningRateSchedule` exactly as
Keras does (`tf_keras.optimizers.schedules.serialize`: `{"class_name": ..., "config": {...}}`,
plus Keras's `module` / `registered_name` keys). `schedule_from_config` reads such a dict back
WITHOUT `tf_keras.optimizers.schedules.deserialize`: the class comes from `ALLOWED_SCHEDULES`
(a fixed table of tf_keras classes), the config's keys must be that class's constructor
arguments and its values plain JSON numbers, lists of numbers, bools, strings or null; nothing
named in the input is imported, evaluated or called. The rebuilt schedule is then evaluated at
steps 0, 1 and 1000: an error or a non-finite learning rate (e.g. `decay_steps=0`) is refused.

Errors name the field (`learning_rate`, or `learning_rate.config.decay_steps`) as every other
refusal of the lab does.

This module stays in `optimizers/` (the rest of the schedules are the `schedules` package, above
it) because `RuleOptimizer.from_config` reads a `learning_rate` given as a schedule dict with
`schedule_from_config`: it is part of an optimizer's own config contract.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.hyperparams import InvalidHyperparameter

from tf_keras.optimizers.schedules import LearningRateSchedule

_SCHEDULES = tf_keras.optimizers.schedules

# class_name -> class: the only schedule classes a config may name.
ALLOWED_SCHEDULES: dict[str, type[LearningRateSchedule]] = {
    cls.__name__: cls
    for cls in (
        _SCHEDULES.ExponentialDecay,
        _SCHEDULES.InverseTimeDecay,
        _SCHEDULES.PiecewiseConstantDecay,
        _SCHEDULES.PolynomialDecay,
        _SCHEDULES.CosineDecay,
        _SCHEDULES.CosineDecayRestarts,
    )
}
_SCHEDULE_KEYS = {"class_name", "config", "module", "registered_name"}
CHECK_STEPS = (0, 1, 1000)
MAX_START_STEP = 1_000_000


@tf_keras.saving.register_keras_serializable(package="optimizer_lab")
class ScheduleFromStep(LearningRateSchedule):
    """A schedule started at iteration `start_step`: `schedule(max(step - start_step, 0))`.

    How Keras expresses an offset: a schedule is a function of the optimizer's global
    `iterations`, so a schedule switched on mid-run would otherwise begin at its value for the
    current step (ExponentialDecay switched on at step 5,238 starts near its end). Wrapping it
    restarts its clock. Serialized as Keras serializes any registered schedule:
    `{"class_name": "ScheduleFromStep", "config": {"schedule": <the inner schedule's dict>,
    "start_step": k}}`.

    Args:
        schedule: one of `ALLOWED_SCHEDULES` (or a dict of one, as `from_config` passes it).
        start_step: the iteration at which the schedule reads 0, an int >= 0 or a float32
            `tf.Variable` holding one.
    """

    def __init__(self, schedule: LearningRateSchedule | Mapping[str, Any], start_step: Any = 0):
        super().__init__()
        self.schedule = (schedule_from_config("learning_rate.config.schedule", schedule)
                         if isinstance(schedule, Mapping) else schedule)
        self.start_step = start_step

    def __call__(self, step: Any) -> tf.Tensor:
        step = tf.convert_to_tensor(step)
        offset = tf.cast(self.start_step, step.dtype)
        return self.schedule(tf.maximum(step - offset, tf.zeros_like(step)))

    def get_config(self) -> dict[str, Any]:
        start = self.start_step
        start = int(round(float(start.numpy()))) if hasattr(start, "numpy") else int(start)
        return {"schedule": schedule_to_config(self.schedule), "start_step": start}


def schedule_to_config(schedule: LearningRateSchedule) -> dict[str, Any]:
    """`schedule` in Keras's serialized form (`tf_keras.optimizers.schedules.serialize`)."""
    return _SCHEDULES.serialize(schedule)


def _plain(field: str, value: Any) -> bool:
    """True for a JSON scalar (number, bool, string, null) or a flat list of numbers."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, numbers.Real):
        return math.isfinite(float(value))
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                   and math.isfinite(float(v)) for v in value)
    del field
    return False


def schedule_from_config(field: str, data: Mapping[str, Any]) -> LearningRateSchedule:
    """Rebuild an allow-listed schedule from its serialized dict (see the module docstring).

    Args:
        field: the name used in error messages, e.g. "learning_rate".
        data: `{"class_name": name, "config": {...}}` (extra Keras keys `module`,
            `registered_name` are ignored).

    Returns:
        A new instance of one of `ALLOWED_SCHEDULES`, wrapped in `ScheduleFromStep` when the
        dict is a started schedule (Keras's wrapper form, or the lab's `start_step` key > 0).

    Raises:
        InvalidHyperparameter: `data` is not such a dict, the class is not allow-listed, a config
            key is unknown, a value is not plain JSON, the constructor refuses the values, or the
            schedule errs or is not finite at steps 0, 1, 1000.
    """
    allowed = f"a schedule dict with class_name in {', '.join(ALLOWED_SCHEDULES)}"
    if not isinstance(data, Mapping) or set(data) - _SCHEDULE_KEYS - {"start_step"} \
            or "class_name" not in data:
        raise InvalidHyperparameter(field, data, allowed)
    if data["class_name"] == ScheduleFromStep.__name__:  # Keras's form of a started schedule
        config = data.get("config")
        if not isinstance(config, Mapping) or set(config) != {"schedule", "start_step"}:
            raise InvalidHyperparameter(f"{field}.config", config,
                                        "{\"schedule\": {...}, \"start_step\": int}")
        data = {**config["schedule"], "start_step": config["start_step"]}
    if "start_step" in data:  # the lab's form: an offset beside Keras's keys
        start: Any = data["start_step"]
        if isinstance(start, bool) or not isinstance(start, (int, float)) \
                or not float(start).is_integer() or not 0 <= start <= MAX_START_STEP:
            raise InvalidHyperparameter(f"{field}.start_step", start,
                                        f"an integer in [0, {MAX_START_STEP}]")
        inner = schedule_from_config(field, {k: v for k, v in data.items() if k != "start_step"})
        return ScheduleFromStep(inner, int(start)) if start else inner
    class_name = data["class_name"]
    if not isinstance(class_name, str) or class_name not in ALLOWED_SCHEDULES:
        raise InvalidHyperparameter(f"{field}.class_name", class_name,
                                    f"one of {', '.join(ALLOWED_SCHEDULES)}")
    cls = ALLOWED_SCHEDULES[class_name]
    config = data.get("config", {})
    if not isinstance(config, Mapping):
        raise InvalidHyperparameter(f"{field}.config", config, "a JSON object")
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    for key, value in config.items():
        if key not in params:
            raise InvalidHyperparameter(f"{field}.config.{key}", value,
                                        f"absent: {class_name} takes {', '.join(sorted(params))}")
        if not _plain(key, value):
            raise InvalidHyperparameter(f"{field}.config.{key}", value,
                                        "a finite number, a list of numbers, a bool or a string")
    try:
        schedule = cls(**config)
        values = [float(schedule(tf.constant(step, tf.float32))) for step in CHECK_STEPS]
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as error:
        raise InvalidHyperparameter(f"{field}.config", dict(config),
                                    f"valid {class_name} parameters ({error})") from None
    if not all(math.isfinite(v) for v in values):
        raise InvalidHyperparameter(f"{field}.config", dict(config),
                                    f"{class_name} parameters giving a finite learning rate "
                                    f"(steps {CHECK_STEPS} gave {values})")
    return schedule


__all__ = ["ALLOWED_SCHEDULES", "LearningRateSchedule", "ScheduleFromStep", "schedule_from_config", "schedule_to_config"]
