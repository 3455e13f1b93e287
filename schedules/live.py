"""A run's learning-rate schedule as a Keras object whose numbers live in `tf.Variable`s, so a
live change of them is an assignment (no retrace)."""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from optimizers.keras_schedules import ScheduleFromStep, schedule_from_config, schedule_to_config
from schedules.table import SCHEDULE_SPECS, start_step, structure


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

    A schedule with `start_step` k > 0 (started mid-run, `schedules.table`) is wrapped in
    `ScheduleFromStep` whose offset is a float32 variable too; `schedule` is then the wrapper
    and `inner` the Keras class.

    Args:
        data: a serialized schedule; validated by `schedule_from_config` first.
        field: the name used in error messages.

    Raises:
        InvalidHyperparameter: as `schedule_from_config`.
    """

    def __init__(self, data: Mapping[str, Any], field: str = "lr_schedule"):
        plain = {k: v for k, v in data.items() if k != "start_step"}
        self.inner = schedule_from_config(field, plain)
        schedule_from_config(field, data)  # the offset refused before anything is built
        self.class_name = data["class_name"]
        self.config = dict(schedule_to_config(self.inner)["config"])
        self.start = start_step(data)
        self.structure = structure({"class_name": self.class_name, "config": self.config,
                                    "start_step": self.start})
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
            setattr(self.inner, spec.name, var)
            if self.class_name == "CosineDecayRestarts" and spec.name in ("t_mul", "m_mul"):
                # Keras's `__call__` reads these two from `_t_mul` / `_m_mul`
                setattr(self.inner, "_" + spec.name, var)
        self.inner.get_config = self._plain_config  # Keras's serializer calls it
        self.offset = tf.Variable(float(self.start), dtype=tf.float32, trainable=False,
                                  name="lr_schedule_start_step") if self.start else None
        self.schedule = ScheduleFromStep(self.inner, self.offset) if self.start else self.inner

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

    def serialized(self) -> dict[str, Any]:
        """The schedule in the lab's serialized form (`schedules.table`): class, current
        parameters and, when started mid-run, `start_step`."""
        out: dict[str, Any] = {"class_name": self.class_name, "config": self.values()}
        if self.offset is not None:
            out["start_step"] = int(round(float(self.offset.numpy())))
        return out

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
        if self.offset is not None and start_step(data) != self.serialized()["start_step"]:
            changed["start_step"] = (self.serialized()["start_step"], start_step(data))
            self.offset.assign(float(start_step(data)))
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


__all__ = ["LiveSchedule"]
