"""Learning-rate schedules in configs: Keras's serialized form, rebuilt from an allow-list only.

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
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Mapping

import numpy as np
import tensorflow as tf
import tf_keras

from optimizers.hyperparams import InvalidHyperparameter
from optimizers.schedule_specs import SCHEDULE_SPECS, structure

_SCHEDULES = tf_keras.optimizers.schedules
LearningRateSchedule = _SCHEDULES.LearningRateSchedule

# class_name -> class: the only schedule classes a config may name.
ALLOWED_SCHEDULES: dict[str, type] = {
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
        A new instance of one of `ALLOWED_SCHEDULES`.

    Raises:
        InvalidHyperparameter: `data` is not such a dict, the class is not allow-listed, a config
            key is unknown, a value is not plain JSON, the constructor refuses the values, or the
            schedule errs or is not finite at steps 0, 1, 1000.
    """
    allowed = f"a schedule dict with class_name in {', '.join(ALLOWED_SCHEDULES)}"
    if not isinstance(data, Mapping) or set(data) - _SCHEDULE_KEYS or "class_name" not in data:
        raise InvalidHyperparameter(field, data, allowed)
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


# ----- a run's schedule, with its numbers in variables ------------------------------------------
class LiveSchedule:
    """A run's learning-rate schedule whose numbers live in `tf.Variable`s.

    `schedule` is an instance of the allow-listed Keras class (pass it as `learning_rate=`);
    its float/int parameters (and list elements) are float32 variables, so `assign(new)` of a
    config with the same structure (`same_structure`) takes effect at the next step with no
    retrace, the lesson of `_set_hyper` (a variable) vs a plain attribute (a traced constant).
    Keras casts each parameter to the step's dtype in `__call__`, so a float32 `decay_steps` or
    `boundaries` variable computes what the int did (exact up to 2**24 = 16.7M steps).
    `schedule.get_config()` reads the variables back, so `schedule_to_config` and the
    optimizer's `get_config` stay Keras's plain serialized form.

    Args:
        data: a serialized schedule; validated by `schedule_from_config` first.
        field: the name used in error messages.

    Raises:
        InvalidHyperparameter: as `schedule_from_config`.
    """

    def __init__(self, data: Mapping[str, Any], field: str = "lr_schedule"):
        self.schedule = schedule_from_config(field, data)
        self.class_name = data["class_name"]
        self.config = dict(schedule_to_config(self.schedule)["config"])
        self.structure = structure({"class_name": self.class_name, "config": self.config})
        self.variables: dict[str, Any] = {}
        for spec in SCHEDULE_SPECS[self.class_name]:
            value = self.config.get(spec.name)
            if not spec.is_variable() or value is None:
                continue
            if spec.kind in ("floats", "ints"):
                var = [tf.Variable(float(v), dtype=tf.float32, trainable=False,
                                   name=f"lr_schedule_{spec.name}_{i}")
                       for i, v in enumerate(value)]
            else:
                var = tf.Variable(float(value), dtype=tf.float32, trainable=False,
                                  name=f"lr_schedule_{spec.name}")
            self.variables[spec.name] = var
            setattr(self.schedule, spec.name, var)
            if self.class_name == "CosineDecayRestarts" and spec.name in ("t_mul", "m_mul"):
                # Keras's `__call__` reads these two from `_t_mul` / `_m_mul`
                setattr(self.schedule, "_" + spec.name, var)
        self.schedule.get_config = self._plain_config  # Keras's serializer calls it

    def _plain_config(self) -> dict[str, Any]:
        out = dict(self.config)
        for spec in SCHEDULE_SPECS[self.class_name]:
            var = self.variables.get(spec.name)
            if var is None:
                continue
            whole = spec.kind in ("int", "ints")
            # float32 -> the shortest decimal of it (0.1, not 0.10000000149011612)
            read = (lambda v: int(round(float(v.numpy())))) if whole else (
                lambda v: float(str(np.float32(v.numpy()))))
            out[spec.name] = [read(v) for v in var] if isinstance(var, list) else read(var)
        return out

    def values(self) -> dict[str, Any]:
        """The current parameters (plain JSON values)."""
        return self._plain_config()

    def same_structure(self, data: Mapping[str, Any]) -> bool:
        """True when `data` (a validated schedule with every parameter) differs from this one in
        numbers only, so `assign` can apply it without a retrace."""
        return structure(data) == self.structure

    def assign(self, data: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Assign the numbers of `data` (same structure) to the variables.

        Returns:
            parameter -> (old, new) for each changed parameter.

        Raises:
            ValueError: `data` has another structure (a rebuild and a retrace are needed).
            InvalidHyperparameter: as `schedule_from_config` (checked before any assign).
        """
        if not self.same_structure(data):
            raise ValueError(f"lr_schedule: {data['class_name']} with another structure than "
                             f"the running {self.class_name}: not an assignment")
        schedule_from_config("lr_schedule", data)  # refused before anything is assigned
        old = self.values()
        changed = {}
        for name, var in self.variables.items():
            new = data["config"][name]
            if new == old[name]:
                continue
            if isinstance(var, list):
                for v, x in zip(var, new):
                    v.assign(float(x))
            else:
                var.assign(float(new))
            changed[name] = (old[name], new)
        return changed


__all__ = ["ALLOWED_SCHEDULES", "LiveSchedule", "schedule_from_config", "schedule_to_config"]
