"""`schedules.differentiable`: the pure schedules equal tf_keras's classes at many steps, and
their derivatives with respect to every float parameter equal central finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from schedules import differentiable as schedule_math
from optimizers.hyperparams import InvalidHyperparameter
from optimizers.keras_schedules import schedule_from_config

SCHEDULES = tf_keras.optimizers.schedules


def complete_config(field, data):
    """(class_name, full config with Keras's defaults, `name` dropped) of a schedule dict, as
    `schedule_from_config` rebuilds it (raises InvalidHyperparameter naming `field`)."""
    config = dict(schedule_from_config(field, data).get_config())
    config.pop("name", None)
    return data["class_name"], config


# (class_name, config): every allow-listed class, branches included (staircase, cycle,
# warm-up, geometric and constant-length restarts).
CASES = {
    "exponential": ("ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 7,
                                         "decay_rate": 0.8}),
    "exponential-staircase": ("ExponentialDecay", {"initial_learning_rate": 0.1,
                                                   "decay_steps": 7, "decay_rate": 0.8,
                                                   "staircase": True}),
    "inverse-time": ("InverseTimeDecay", {"initial_learning_rate": 0.05, "decay_steps": 5,
                                          "decay_rate": 0.3}),
    "inverse-time-staircase": ("InverseTimeDecay", {"initial_learning_rate": 0.05,
                                                    "decay_steps": 5, "decay_rate": 0.3,
                                                    "staircase": True}),
    "piecewise": ("PiecewiseConstantDecay", {"boundaries": [10, 25, 40],
                                             "values": [0.1, 0.05, 0.02, 0.005]}),
    "polynomial": ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 30,
                                       "end_learning_rate": 0.01, "power": 2.0}),
    "polynomial-cycle": ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 13,
                                             "end_learning_rate": 0.01, "power": 0.5,
                                             "cycle": True}),
    "cosine": ("CosineDecay", {"initial_learning_rate": 0.1, "decay_steps": 40, "alpha": 0.1}),
    "cosine-warmup": ("CosineDecay", {"initial_learning_rate": 0.01, "decay_steps": 40,
                                      "alpha": 0.05, "warmup_target": 0.2, "warmup_steps": 12}),
    "restarts-geometric": ("CosineDecayRestarts", {"initial_learning_rate": 0.1,
                                                   "first_decay_steps": 9, "t_mul": 1.5,
                                                   "m_mul": 0.8, "alpha": 0.1}),
    "restarts-constant": ("CosineDecayRestarts", {"initial_learning_rate": 0.1,
                                                  "first_decay_steps": 9, "t_mul": 1.0,
                                                  "m_mul": 0.7, "alpha": 0.0}),
}
# Steps 0..80 plus values between integers; boundaries and restarts fall on integers.
STEPS = [float(s) for s in range(81)] + [0.5, 6.5, 12.25, 39.75, 99.0, 250.0]


def keras_schedule(class_name, config, dtype):
    """The tf_keras class with every float parameter as a NumPy scalar of `dtype`: Keras casts
    Python floats with `tf.cast`, which rounds them through float32 first."""
    cast = np.dtype(dtype).type

    def convert(value):
        if isinstance(value, list):
            return [cast(v) for v in value]
        return cast(value) if isinstance(value, float) else value

    return getattr(SCHEDULES, class_name)(**{k: convert(v) for k, v in config.items()})


@pytest.mark.parametrize("dtype,tolerance", [("float32", 1e-6), ("float64", 1e-12)])
@pytest.mark.parametrize("case", list(CASES))
def test_equals_the_keras_schedule_at_many_steps(case, dtype, tolerance):
    class_name, config = CASES[case]
    _, full = complete_config("lr_schedule", {"class_name": class_name,
                                                            "config": config})
    reference = keras_schedule(class_name, config, dtype)
    for step in STEPS:
        s = tf.constant(step, dtype)
        ours = schedule_math.learning_rate(class_name, full, s)
        assert ours.dtype == tf.as_dtype(dtype)
        expected = float(reference(s))
        np.testing.assert_allclose(float(ours), expected, rtol=tolerance, atol=tolerance * 1e-3,
                                   err_msg=f"{case} at step {step}")


@pytest.mark.parametrize("case", list(CASES))
def test_derivatives_equal_central_differences(case):
    """d lr(s) / d parameter by a tape == (lr(p + h) - lr(p - h)) / 2h, float64, every float
    parameter, at steps inside pieces (not on a kink where the derivative jumps)."""
    class_name, config = CASES[case]
    _, full = complete_config("lr_schedule", {"class_name": class_name,
                                                            "config": config})
    names = schedule_math.float_parameter_names(class_name, full)
    assert names
    for step in (0.0, 3.5, 11.5, 17.25, 33.5, 60.5):
        s = tf.constant(step, tf.float64)
        values = {n: tf.constant(float(schedule_math.parameter_value(full, n)), tf.float64)
                  for n in names}
        with tf.GradientTape() as tape:
            tape.watch(list(values.values()))
            lr = schedule_math.learning_rate(class_name,
                                             schedule_math.with_parameters(full, values), s)
        grads = tape.gradient(lr, list(values.values()),
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        for name, grad in zip(names, grads):
            value = float(values[name])
            h = 1e-6 * max(abs(value), 1e-3)
            ends = []
            for sign in (1.0, -1.0):
                moved = schedule_math.with_parameters(full, {name: value + sign * h})
                ends.append(float(schedule_math.learning_rate(class_name, moved, s)))
            finite = (ends[0] - ends[1]) / (2 * h)
            assert np.isfinite(float(grad)), (case, name, step)
            np.testing.assert_allclose(float(grad), finite, rtol=1e-6, atol=1e-10,
                                       err_msg=f"{case} d/d{name} at step {step}")


def test_known_values_by_hand():
    """A few values worked out by hand from the documented formulas."""
    s = tf.constant(14.0, tf.float64)
    exp = {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.8, "staircase": False}
    assert float(schedule_math.learning_rate("ExponentialDecay", exp, s)) == pytest.approx(
        0.1 * 0.8 ** 2, rel=1e-15)
    warm = {"initial_learning_rate": 0.01, "decay_steps": 40, "alpha": 0.05,
            "warmup_target": 0.2, "warmup_steps": 12}
    # half-way up the ramp, then the cosine at its middle (fraction 1/2: factor 0.5(1-a) + a)
    assert float(schedule_math.learning_rate("CosineDecay", warm, tf.constant(6.0, tf.float64))
                 ) == pytest.approx(0.105, rel=1e-15)
    assert float(schedule_math.learning_rate("CosineDecay", warm, tf.constant(32.0, tf.float64))
                 ) == pytest.approx(0.2 * (0.95 * 0.5 + 0.05), rel=1e-14)
    # warm-up: d lr / d warmup_target = s / warmup_steps on the ramp
    target = tf.constant(0.2, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(target)
        lr = schedule_math.learning_rate("CosineDecay", {**warm, "warmup_target": target},
                                         tf.constant(3.0, tf.float64))
    assert float(tape.gradient(lr, target)) == pytest.approx(0.25, rel=1e-15)


def test_piecewise_derivative_goes_to_the_piece_in_effect_only():
    config = {"boundaries": [10, 25], "values": [0.1, 0.05, 0.01]}
    values = [tf.constant(v, tf.float64) for v in config["values"]]
    for step, piece in ((10.0, 0), (10.5, 1), (25.0, 1), (26.0, 2)):
        with tf.GradientTape() as tape:
            tape.watch(values)
            lr = schedule_math.learning_rate("PiecewiseConstantDecay",
                                             {**config, "values": values},
                                             tf.constant(step, tf.float64))
        grads = tape.gradient(lr, values, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        assert [float(g) for g in grads] == [1.0 if i == piece else 0.0 for i in range(3)]


def test_forward_mode_tangent_of_polynomial_power_is_finite_after_decay_steps():
    """At p = 1 (step >= decay_steps) (1 - p)^power is 0 and d/dpower = 0 * log 0: must be 0."""
    config = {"initial_learning_rate": 0.1, "decay_steps": 10, "end_learning_rate": 0.01,
              "power": 2.0, "cycle": False}
    power = tf.constant(2.0, tf.float64)
    with tf.autodiff.ForwardAccumulator(power, tf.constant(1.0, tf.float64)) as acc:
        lr = schedule_math.learning_rate("PolynomialDecay", {**config, "power": power},
                                         tf.constant(20.0, tf.float64))
    assert float(lr) == pytest.approx(0.01, rel=1e-15)
    assert float(acc.jvp(lr)) == 0.0


def test_legacy_decay_factor():
    factor = schedule_math.legacy_decay_factor(0.01, tf.constant(50.0, tf.float64))
    assert float(factor) == pytest.approx(1 / 1.5, rel=1e-15)


def test_parameter_names_and_refusals():
    assert schedule_math.float_parameter_names(
        "PiecewiseConstantDecay", {"boundaries": [1, 2], "values": [0.3, 0.2, 0.1]}
    ) == ["values.0", "values.1", "values.2"]
    _, cosine = complete_config(
        "lr_schedule", {"class_name": "CosineDecay",
                        "config": {"initial_learning_rate": 0.1, "decay_steps": 5}})
    assert schedule_math.float_parameter_names("CosineDecay", cosine) == [
        "initial_learning_rate", "alpha"]  # no warm-up: warmup_target is None
    with pytest.raises(KeyError, match="class_name='Nope'"):
        schedule_math.learning_rate("Nope", {}, tf.constant(0.0))
    with pytest.raises(KeyError, match="'beta'"):
        schedule_math.with_parameters(cosine, {"beta": 1.0})
    with pytest.raises(InvalidHyperparameter, match="lr_schedule.config.decay_stepz"):
        complete_config("lr_schedule", {"class_name": "ExponentialDecay",
                                                      "config": {"decay_stepz": 3}})
