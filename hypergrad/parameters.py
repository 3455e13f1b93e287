"""The differentiable parameters of a run and the hyperparameters of each step made from them.

The hyper-gradient engine differentiates E_val with respect to PARAMETERS: every hyperparameter
the optimizer registers with `_set_hyper` (`learning_rate`, `beta_1`, ...) and, when the
learning rate is a `tf_keras.optimizers.schedules.LearningRateSchedule`, every float parameter of
that schedule, named `lr_schedule.<param>` (e.g. `lr_schedule.decay_rate`,
`lr_schedule.warmup_target`, `lr_schedule.values.1`). `ParameterPlan.hypers_at(values, t)`
turns parameter values into the hyperparameters the rule's `coefficients(hypers, t)` reads at
1-based step t, exactly as `OptimizerV2._decayed_lr` does at `iterations = t - 1`:

    learning_rate_t = schedule(params, t - 1) / (1 + decay * (t - 1))

with `optimizers.schedule_math.learning_rate` in place of the schedule object, so tangents and
gradients flow from the schedule's parameters (the stock schedule casts them to constants) and
from the learning rate through the legacy `decay` factor. Integer / bool / boundary parameters
and `decay` itself are constants.

While a schedule is in effect `learning_rate` is the schedule object, not a number: it is not a
parameter (follow `lr_schedule.initial_learning_rate` instead).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
import tf_keras

from schedules import differentiable as schedule_math
from optimizers.base import RuleOptimizer
from optimizers.hyperparams import HyperSpec
from schedules.table import params as schedule_params
from optimizers.keras_schedules import ALLOWED_SCHEDULES

SCHEDULE_PREFIX = "lr_schedule."
def is_schedule_parameter(name: str) -> bool:
    """True for a `lr_schedule.<param>` name."""
    return name.startswith(SCHEDULE_PREFIX)


def schedule_of(opt: RuleOptimizer) -> tuple[str, dict[str, Any]] | None:
    """(class_name, full config without `name`) of the optimizer's learning-rate schedule, or
    None for a number / tensor / callable learning rate.

    Raises:
        ValueError: a schedule class outside `optimizers.schedules.ALLOWED_SCHEDULES`.
    """
    value = getattr(opt, "_hyper", {}).get("learning_rate")
    if not isinstance(value, tf_keras.optimizers.schedules.LearningRateSchedule):
        return None
    schedule_class = type(value)  # a name: `type(value) is ...` would narrow `value` to object
    class_name = schedule_class.__name__
    if ALLOWED_SCHEDULES.get(class_name) is not schedule_class:
        raise ValueError(f"learning_rate={class_name} refused: hyper-gradients need one of "
                         f"{', '.join(ALLOWED_SCHEDULES)}")
    config = dict(value.get_config())
    config.pop("name", None)
    return class_name, config


class ParameterPlan:
    """The parameters of `opt` and the per-step hyperparameters made from them.

    Args:
        opt: a `RuleOptimizer` (its learning rate may be an allow-listed schedule; its legacy
            `decay` may be > 0).
        dtype: the float dtype of the model (tensors returned are of this dtype).

    Attributes:
        schedule: (class_name, config) or None (`schedule_of`).
        decay: the legacy decay (float >= 0, a constant).
        names: every parameter name: the optimizer's hyperparameters (without `learning_rate`
            while a schedule is in effect), then `lr_schedule.<param>` names.
        schedule_variables: `lr_schedule.<param>` -> the scalar `tf.Variable` holding its
            current value: the schedule's own (float32, a run's `LiveSchedule`) or one of
            `dtype` created here (`owned`); assigned by `set_value`, read inside compiled steps
            without retracing.
        owned: the names whose variable was created here (the schedule holds a Python number).

    Raises:
        ValueError: a schedule outside the allow-list, or on an optimizer without
            `learning_rate`.
    """

    def __init__(self, opt: RuleOptimizer, dtype: tf.DType):
        self.opt, self.dtype = opt, tf.as_dtype(dtype)
        self.schedule = schedule_of(opt)
        # float32-rounded as `_decayed_lr` has it (`tf.cast` of a Python float goes through
        # float32), so a float64 run trains exactly as `apply_gradients` does.
        self.decay = float(np.float32(getattr(opt, "_initial_decay", 0.0) or 0.0))
        specs = [s.name for s in opt.hyperparameter_specs()]
        self.has_learning_rate = "learning_rate" in specs
        if self.schedule and not self.has_learning_rate:
            raise ValueError("lr_schedule refused: the optimizer has no learning_rate")
        self.hyper_names = [n for n in specs if not (self.schedule and n == "learning_rate")]
        # Each schedule parameter's value lives in a variable: the schedule's own one when the
        # run built it with variables (`optimizers.schedules.LiveSchedule`: a user's change is
        # an assign, seen here without retrace), else one created here (`owned`).
        self.schedule_variables: dict[str, tf.Variable] = {}
        self.owned: set[str] = set()
        if self.schedule:
            class_name, config = self.schedule
            for param in schedule_math.float_parameter_names(class_name, config):
                name = SCHEDULE_PREFIX + param
                held = _attribute(self.schedule_object, param)
                if not isinstance(held, tf.Variable):
                    held = tf.Variable(float(schedule_math.parameter_value(config, param)),
                                       dtype=self.dtype, trainable=False)
                    self.owned.add(name)
                self.schedule_variables[name] = held
        self.names = self.hyper_names + list(self.schedule_variables)

    @property
    def schedule_object(self) -> Any:
        """The optimizer's `LearningRateSchedule` (None for a constant learning rate)."""
        return self.opt._hyper.get("learning_rate") if self.schedule else None

    # ----- names and specs -------------------------------------------------------------------
    def check(self, name: str) -> None:
        """Raise KeyError (listing the parameters) unless `name` is one of `names`."""
        if name in self.names:
            return
        if name == "learning_rate" and self.schedule:
            raise KeyError(f"{name!r} refused: the learning rate is a {self.schedule[0]} "
                           f"schedule; follow its parameters ({', '.join(self.schedule_variables)})")
        if is_schedule_parameter(name):
            where = (f"the {self.schedule[0]} schedule has {', '.join(self.schedule_variables)}"
                     if self.schedule else "the learning rate is not a schedule")
            raise KeyError(f"{name!r} refused: {where}")
        self.opt.spec(name)  # the optimizer's own message, listing its hyperparameters
        raise KeyError(f"{name!r} refused: one of {', '.join(self.names)}")

    def spec(self, name: str) -> HyperSpec:
        """The `HyperSpec` of parameter `name` (for RTHO's projection and response slices); a
        schedule parameter's spec has its current value as default.

        Raises:
            KeyError: not a parameter (`check`).
        """
        self.check(name)
        if not is_schedule_parameter(name):
            return self.opt.spec(name)
        param = name[len(SCHEDULE_PREFIX):]
        assert self.schedule is not None  # `check` passed a schedule parameter
        # the range of the one table of schedule parameters (the lab's UI range)
        row = {p.name: p for p in schedule_params(self.schedule[0])}[param.split(".")[0]]
        return HyperSpec(name, self.current_values()[name], row.low, row.high,
                         f"{param} of the {self.schedule[0]} learning-rate schedule: {row.help}",
                         low_inclusive=not row.low_open, log_scale=row.log)

    def label(self, name: str) -> str:
        """`name` with the schedule it belongs to, e.g. `lr_schedule.decay_rate
        (ExponentialDecay)`; ordinary names unchanged."""
        # a schedule parameter of a plan without a schedule fails as it always has (TypeError)
        return (f"{name} ({self.schedule[0]})"  # type: ignore[index]
                if is_schedule_parameter(name) else name)

    # ----- values ---------------------------------------------------------------------------
    def live_values(self) -> dict[str, tf.Tensor]:
        """Every parameter's current value as a scalar tensor of `dtype`, read now (inside a
        `tf.function`: read at every call, so `_set_hyper` / `set_value` need no retrace).
        Hyperparameters are `_get_hyper(name, dtype)`, NOT decayed (see `hypers_at`)."""
        out = {n: tf.convert_to_tensor(self.opt._get_hyper(n, self.dtype))
               for n in self.hyper_names}
        out.update({n: tf.cast(v, self.dtype) for n, v in self.schedule_variables.items()})
        return out

    def constant_values(self) -> dict[str, tf.Tensor]:
        """`live_values` as constants (the very values training uses, e.g. a float32
        hyperparameter variable cast to float64)."""
        return {n: tf.constant(v.numpy(), self.dtype) for n, v in self.live_values().items()}

    def current_values(self) -> dict[str, float]:
        """Every parameter's current value as a Python float."""
        return {n: float(v.numpy()) for n, v in self.live_values().items()}

    def set_value(self, name: str, value: float) -> None:
        """Set parameter `name`: a hyperparameter through `_set_hyper`; a schedule parameter by
        assigning its variable (a variable of the optimizer's own schedule: its `get_config`
        reads it back; a variable of this plan: the optimizer gets a rebuilt schedule so its
        config says what training uses).

        Raises:
            KeyError: not a parameter.
        """
        self.check(name)
        if not is_schedule_parameter(name):
            self.opt._set_hyper(name, value)
            return
        self.schedule_variables[name].assign(value)
        assert self.schedule is not None  # `check` passed a schedule parameter
        class_name, config = self.schedule
        config = schedule_math.with_parameters(config, {name[len(SCHEDULE_PREFIX):]: float(value)})
        self.schedule = class_name, config
        if name in self.owned:
            self.opt._set_hyper("learning_rate", ALLOWED_SCHEDULES[class_name](**config))

    # ----- per-step hyperparameters -------------------------------------------------------------
    def hypers_at(self, values: Mapping[str, tf.Tensor], t: tf.Tensor) -> dict[str, tf.Tensor]:
        """The hyperparameters of the update at 1-based step `t` (scalar tensor of `dtype`):
        every hyperparameter from `values`, and `learning_rate` = schedule(values, t - 1) /
        (1 + decay (t - 1)) (Keras `_decayed_lr` at `iterations = t - 1`); differentiable with
        respect to every entry of `values`.

        Args:
            values: parameter name -> scalar tensor (all of `names`).
        """
        hypers = {n: values[n] for n in self.hyper_names}
        if not self.has_learning_rate:
            return hypers
        iterations = t - 1.0
        if self.schedule:
            class_name, config = self.schedule
            params = schedule_math.with_parameters(self._held_config(), {
                n[len(SCHEDULE_PREFIX):]: values[n] for n in self.schedule_variables})
            rate = schedule_math.learning_rate(class_name, params, iterations)
        else:
            rate = values["learning_rate"]
        if self.decay > 0:
            rate = rate * schedule_math.legacy_decay_factor(self.decay, iterations)
        hypers["learning_rate"] = rate
        return hypers

    def _held_config(self) -> dict[str, Any]:
        """The schedule's config with every number the schedule holds in a variable (e.g.
        `decay_steps`, `boundaries` of a `LiveSchedule`) read now, as a tensor of `dtype`:
        a live change of them is seen without retrace. Bools and None stay Python values."""
        assert self.schedule is not None  # called by `hypers_at` under a schedule only
        out = dict(self.schedule[1])
        for key in out:
            held = _attribute(self.schedule_object, key)
            if isinstance(held, tf.Variable):
                out[key] = tf.cast(held, self.dtype)
            elif isinstance(held, (list, tuple)) and held and all(
                    isinstance(v, tf.Variable) for v in held):
                out[key] = [tf.cast(v, self.dtype) for v in held]
        return out

    def learning_rates(self, steps: int, start: int = 0) -> list[float]:
        """The learning rate of updates start+1 .. start+steps (floats), for plots and checks."""
        values = self.constant_values()
        return [float(self.hypers_at(values, tf.constant(start + i + 1.0, self.dtype))
                      ["learning_rate"].numpy()) for i in range(steps)]


def _attribute(schedule: Any, param: str) -> Any:
    """The object a schedule holds for config key `param` (`values.<i>` indexes the list);
    None when it holds none under that name."""
    if schedule is None:
        return None
    if param.startswith("values."):
        held = getattr(schedule, "values", None)
        index = int(param.split(".", 1)[1])
        return held[index] if isinstance(held, (list, tuple)) and index < len(held) else None
    return getattr(schedule, param, None)


def describe_schedule(schedule: tuple[str, Mapping[str, Any]] | None, decay: float = 0.0) -> str:
    """One line saying how the learning rate is made, e.g. `ExponentialDecay(initial_learning_rate
    =0.05, decay_steps=10, decay_rate=0.9, staircase=False) / (1 + 0.01 t)`."""
    text = "constant learning rate"
    if schedule:
        class_name, config = schedule
        text = f"{class_name}({', '.join(f'{k}={v}' for k, v in config.items())})"
    if decay and math.isfinite(decay):
        text += f" / (1 + {decay:g} t)"
    return text
