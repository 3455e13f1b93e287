"""Learning-rate schedules as pure, differentiable functions of their float parameters.

A `tf_keras.optimizers.schedules.LearningRateSchedule` stores its parameters as Python numbers
and casts them to constants when called, so no tangent or gradient can flow from them. The
hyper-gradient engine needs d(learning rate at step s)/d(schedule parameter): this module
re-states each allow-listed schedule (`optimizers.keras_schedules.ALLOWED_SCHEDULES`) as
`learning_rate(class_name, params, step)` where every FLOAT parameter may be a tensor carrying a
tangent (or watched by a tape), while integer / bool / boundary parameters (`decay_steps`,
`warmup_steps`, `first_decay_steps`, `staircase`, `cycle`, `boundaries`) are constants: they
pick a branch or a piece, and the schedule is piecewise constant in them.

Formulas: the `schedules` package docstring (written once for this module and `preview`).

The restart index and staircase floors are piecewise constant: their derivative is 0 (the
`tf.stop_gradient` below says so explicitly rather than relying on Floor's missing gradient).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

import tensorflow as tf

from optimizers.keras_schedules import ALLOWED_SCHEDULES

# class_name -> the float parameters that may carry tangents (a list parameter, i.e.
# PiecewiseConstantDecay's `values`, is expanded to `values.0`, `values.1`, ...).
FLOAT_PARAMETERS: dict[str, tuple[str, ...]] = {
    "ExponentialDecay": ("initial_learning_rate", "decay_rate"),
    "InverseTimeDecay": ("initial_learning_rate", "decay_rate"),
    "PiecewiseConstantDecay": ("values",),
    "PolynomialDecay": ("initial_learning_rate", "end_learning_rate", "power"),
    "CosineDecay": ("initial_learning_rate", "alpha", "warmup_target"),
    "CosineDecayRestarts": ("initial_learning_rate", "t_mul", "m_mul", "alpha"),
}
assert set(FLOAT_PARAMETERS) == set(ALLOWED_SCHEDULES)


def float_parameter_names(class_name: str, config: Mapping[str, Any]) -> list[str]:
    """The differentiable parameters of this schedule, e.g. ["initial_learning_rate",
    "decay_rate"]; `values.<i>` for each piece of a PiecewiseConstantDecay; `warmup_target`
    only when it is set (None = no warm-up, nothing to differentiate); `t_mul` only when it is
    not 1 (Keras switches to another formula at exactly 1: a branch point, no derivative).

    Raises:
        KeyError: `class_name` is not allow-listed.
    """
    names = []
    for name in _float_parameters(class_name):
        if name == "values":
            names += [f"values.{i}" for i in range(len(config["values"]))]
        elif config.get(name) is not None and not (name == "t_mul" and config[name] == 1.0):
            names.append(name)
    return names


def _float_parameters(class_name: str) -> tuple[str, ...]:
    if class_name not in FLOAT_PARAMETERS:
        raise KeyError(f"class_name={class_name!r} refused: one of {', '.join(FLOAT_PARAMETERS)}")
    return FLOAT_PARAMETERS[class_name]


def parameter_value(config: Mapping[str, Any], name: str) -> Any:
    """The value of parameter `name` (`values.<i>` indexes the list) in `config`."""
    if name.startswith("values."):
        return config["values"][int(name.split(".", 1)[1])]
    return config[name]


def with_parameters(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with the named float parameters replaced (e.g. by tensors carrying tangents).

    Raises:
        KeyError: a name that is not a parameter of `config`.
    """
    out = dict(config)
    if "values" in out:
        out["values"] = list(out["values"])
    for name, value in overrides.items():
        if name.startswith("values.") and "values" in out:
            index = int(name.split(".", 1)[1])
            if not 0 <= index < len(out["values"]):
                raise KeyError(f"{name!r} refused: values has {len(out['values'])} pieces")
            out["values"][index] = value
        elif name in out:
            out[name] = value
        else:
            raise KeyError(f"{name!r} refused: the schedule has {', '.join(sorted(config))}")
    return out


def learning_rate(class_name: str, params: Mapping[str, Any], step: tf.Tensor) -> tf.Tensor:
    """The learning rate of schedule `class_name` at 0-based step `step` (Keras's `iterations`).

    Args:
        class_name: one of `FLOAT_PARAMETERS` (the allow-listed tf_keras schedules).
        params: the schedule's full config (its Keras `get_config()`); float parameters may be Python
            floats or scalar tensors (they are cast to `step.dtype`), integer / bool / list
            parameters are Python values.
        step: scalar float tensor (float32 or float64): the number of updates already applied.

    Returns:
        Scalar tensor of `step.dtype`, differentiable with respect to every float parameter
        given as a tensor (formulas: the `schedules` package docstring).

    Raises:
        KeyError: an unknown class name or a missing parameter.
    """
    _float_parameters(class_name)
    step = tf.convert_to_tensor(step)
    dtype = step.dtype

    def f(name: str) -> tf.Tensor:
        return _as(params[name], dtype)

    if class_name in ("ExponentialDecay", "InverseTimeDecay"):
        p = step / f("decay_steps")
        if params.get("staircase", False):
            p = tf.stop_gradient(tf.floor(p))
        if class_name == "ExponentialDecay":
            return f("initial_learning_rate") * tf.pow(f("decay_rate"), p)
        return f("initial_learning_rate") / (1.0 + f("decay_rate") * p)
    if class_name == "PiecewiseConstantDecay":
        return _piecewise(params["boundaries"], params["values"], step)
    if class_name == "PolynomialDecay":
        return _polynomial(params, step, f)
    if class_name == "CosineDecay":
        return _cosine(params, step, f)
    return _cosine_restarts(step, f)


def _as(value: Any, dtype: tf.DType) -> tf.Tensor:
    """`value` as a tensor of `dtype`: a Python number converted directly (tf.cast of a Python
    float would round it through float32 first), a tensor cast."""
    return tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(value, dtype)


def _piecewise(boundaries, values, step: tf.Tensor) -> tf.Tensor:
    # The selected piece is sum_i v_i * [s in piece i]: the indicators are constants, so the
    # derivative flows to the one value in effect and to no other. Boundaries may be numbers
    # or tensors (a run's schedule holds them in variables).
    dtype = step.dtype
    edges = [_as(b, dtype) for b in boundaries]
    one, zero = tf.ones((), dtype), tf.zeros((), dtype)
    total = zero
    for i, value in enumerate(values):
        inside = tf.constant(True)
        if i > 0:
            inside = tf.logical_and(inside, step > edges[i - 1])
        if i < len(edges):
            inside = tf.logical_and(inside, step <= edges[i])
        total += tf.where(inside, one, zero) * _as(value, dtype)
    return total


def _polynomial(params, step, f) -> tf.Tensor:
    decay_steps = f("decay_steps")
    if params.get("cycle", False):
        multiplier = tf.where(tf.equal(step, 0), tf.ones_like(step), tf.math.ceil(step / decay_steps))
        p = step / (decay_steps * tf.stop_gradient(multiplier))
    else:
        p = tf.minimum(step, decay_steps) / decay_steps
    # tf.pow's exponent gradient is log(base) masked to 0 at base 0 (p = 1): finite.
    end = f("end_learning_rate")
    return (f("initial_learning_rate") - end) * tf.pow(1.0 - p, f("power")) + end


def _cosine_factor(fraction: tf.Tensor, alpha: tf.Tensor) -> tf.Tensor:
    return (1.0 - alpha) * 0.5 * (1.0 + tf.cos(math.pi * fraction)) + alpha


def _cosine(params, step, f) -> tf.Tensor:
    decay_steps, alpha = f("decay_steps"), f("alpha")
    if params.get("warmup_target") is None:
        s = tf.minimum(step, decay_steps)
        return f("initial_learning_rate") * _cosine_factor(s / decay_steps, alpha)
    warmup_steps, target, lr0 = f("warmup_steps"), f("warmup_target"), f("initial_learning_rate")
    s = tf.minimum(step, decay_steps + warmup_steps)
    # Both branches are computed (tf.where, not tf.cond) so forward mode works in XLA; the
    # warm-up branch divides by max(warmup_steps, 1) to stay finite when warmup_steps = 0
    # (then it is never selected).
    ramp = lr0 + (target - lr0) * s / tf.maximum(warmup_steps, 1.0)
    decayed = target * _cosine_factor((s - warmup_steps) / decay_steps, alpha)
    return tf.where(s < warmup_steps, ramp, decayed)


def _cosine_restarts(step, f) -> tf.Tensor:
    t_mul, m_mul, alpha = f("t_mul"), f("m_mul"), f("alpha")
    fraction = step / f("first_decay_steps")
    # Geometric restarts (t_mul != 1); the safe t_mul keeps the unused branch finite at 1.
    geometric = tf.not_equal(t_mul, 1.0)
    safe_t = tf.where(geometric, t_mul, tf.constant(2.0, step.dtype))
    i_geometric = tf.stop_gradient(
        tf.floor(tf.math.log(1.0 - fraction * (1.0 - safe_t)) / tf.math.log(safe_t)))
    sum_r = (1.0 - safe_t ** i_geometric) / (1.0 - safe_t)
    f_geometric = (fraction - sum_r) / safe_t ** i_geometric
    i_linear = tf.stop_gradient(tf.floor(fraction))
    restart = tf.where(geometric, i_geometric, i_linear)
    within = tf.where(geometric, f_geometric, fraction - i_linear)
    cosine = 0.5 * m_mul ** restart * (1.0 + tf.cos(math.pi * within))
    return f("initial_learning_rate") * ((1.0 - alpha) * cosine + alpha)


def legacy_decay_factor(decay: Any, step: tf.Tensor) -> tf.Tensor:
    """1 / (1 + decay * step): OptimizerV2's legacy time-based decay (`_decayed_lr`), at
    0-based step `step` (scalar float tensor); `decay` a float >= 0 or a scalar tensor."""
    step = tf.convert_to_tensor(step)
    return 1.0 / (1.0 + _as(decay, step.dtype) * step)


__all__ = ["FLOAT_PARAMETERS", "float_parameter_names", "learning_rate",
           "legacy_decay_factor", "parameter_value", "with_parameters"]
