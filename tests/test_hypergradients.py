"""Hyper-gradients: forward mode = reverse mode = finite differences, for every optimizer.

Franceschi et al. 2017 (arXiv:1703.01785): forward and reverse mode compute the same quantity
(sec. 3), so on a full trajectory they must agree to round-off in float64. Finite differences
check both against the definition; they need a smooth model (tanh) to be meaningful.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers import registry
from hypergrad.forward import ForwardModeTrainer
from hypergrad.reverse import (
    central_difference,
    read_state,
    relative_error,
    reverse_hypergradient,
)

STEPS = 20
# Hyperparameters chosen inside their ranges and away from branch points (rmsprop's
# momentum > 0 switch, sgd's momentum = 0) so that finite differences are smooth.
CASES = {
    "adam": ({"learning_rate": 0.05}, {}),
    "amsgrad": ({"learning_rate": 0.05}, {"amsgrad": True}),
    "sgd": ({"learning_rate": 0.2, "momentum": 0.5}, {}),
    "sgd-nesterov": ({"learning_rate": 0.2, "momentum": 0.5}, {"nesterov": True}),
    "adamw": ({"learning_rate": 0.05, "weight_decay": 0.1}, {}),
    "rmsprop": ({"learning_rate": 0.01, "momentum": 0.5}, {}),
    "rmsprop-centered": ({"learning_rate": 0.01, "momentum": 0.5}, {"centered": True}),
    "adagrad": ({"learning_rate": 0.1}, {}),
    "diffgrad": ({"learning_rate": 0.05}, {}),
    "adadelta": ({"learning_rate": 1.0, "epsilon": 1e-4}, {}),
    "adamax": ({"learning_rate": 0.05}, {}),
    "ftrl": ({"learning_rate": 0.2, "l1_regularization_strength": 0.001,
              "l2_regularization_strength": 0.01, "l2_shrinkage_regularization_strength": 0.01,
              "beta": 0.5}, {}),
    "nadam": ({"learning_rate": 0.05}, {}),
    "nadam-schedule-decay": ({"learning_rate": 0.05, "beta_1": 0.8}, {"schedule_decay": 0.05}),
    "ftrl-power": ({"learning_rate": 0.2, "beta": 0.25},
                   {"learning_rate_power": -0.75, "initial_accumulator_value": 0.0}),
    "accumulation": ({"learning_rate": 0.05}, {"inner": "adam", "accumulation_steps": 2}),
    "lion": ({"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    "lamb": ({"learning_rate": 0.05, "weight_decay": 0.1}, {}),
    "adafactor": ({"learning_rate": 0.05, "epsilon_2": 0.8, "clip_threshold": 0.5}, {}),
    "muon": ({"learning_rate": 0.02, "weight_decay": 0.1, "adam_weight_decay": 0.05,
              "epsilon": 1e-3}, {"ns_steps": 2}),
    "schedule_free_adamw": ({"learning_rate": 0.05, "weight_decay": 0.1, "epsilon": 1e-3},
                            {"warmup_steps": 5}),
}


def registry_name(case):
    return case.split("-")[0] if case != "amsgrad" else "adam"


def test_every_registered_optimizer_has_a_case():
    # Hyper-gradients need a pure rule; RunConfig refuses the others (test_lookahead.py).
    assert {registry_name(c) for c in CASES} == {n for n in registry.names() if registry.is_rule(n)}


def make_problem(case, dtype="float64", activation="tanh", seed=0):
    tf_keras.backend.set_floatx(dtype)
    try:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(160, 5))
        y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 0.8)
        tensors = [tf.constant(a) for a in (x[:120].astype(dtype), y[:120], x[120:].astype(dtype), y[120:])]
        tf_keras.utils.set_random_seed(seed)
        model = tf_keras.Sequential(
            [tf_keras.layers.Dense(6, activation=activation, input_shape=(5,)), tf_keras.layers.Dense(3)]
        )
        hypers, options = CASES[case]
        opt = registry.create(registry_name(case), hypers, options)
        opt._create_all_weights(model.trainable_variables)
    finally:
        tf_keras.backend.set_floatx("float32")
    batches = [rng.choice(120, 24, replace=False).astype("int32") for _ in range(STEPS)]
    return model, opt, tensors, batches


def run_forward(model, opt, tensors, batches):
    followed = [s.name for s in opt.hyperparameter_specs()]
    trainer = ForwardModeTrainer(model, opt, followed, *tensors)
    start = read_state(model, opt)
    for index in batches:
        trainer.step(index)
    return trainer, start


# Checked with tighter tolerances in tests/test_keras3_algorithms.py (not twice: each costs
# minutes of forward-mode compilation on a loaded machine).
KERAS3_CHECKED = {"muon", "schedule_free_adamw"}


@pytest.mark.parametrize("case", [c for c in CASES if c not in KERAS3_CHECKED])
def test_forward_equals_reverse_and_finite_differences(case):
    model, opt, (xt, yt, xv, yv), batches = make_problem(case)
    trainer, start = run_forward(model, opt, (xt, yt, xv, yv), batches)
    _, forward, _ = trainer.hypergradients()
    window = [(tf.gather(xt, i), tf.gather(yt, i)) for i in batches]
    reverse = reverse_hypergradient(model, opt, start, window, trainer.followed, xv, yv)
    finite = central_difference(model, opt, start, window, trainer.followed, xv, yv, relative_step=1e-7)
    assert trainer.traces == 1
    for name in trainer.followed:
        assert np.isfinite(forward[name])
        assert relative_error(forward[name], reverse[name]) < 1e-8, (name, forward, reverse)
        assert relative_error(forward[name], finite[name]) < 1e-4, (name, forward, finite)


def test_forward_state_equals_apply_gradients():
    """The hyper-gradient step trains exactly like `apply_gradients` (same rule, dense)."""
    model, opt, (xt, yt, xv, yv), batches = make_problem("adam")
    twin, twin_opt, _, _ = make_problem("adam")
    run_forward(model, opt, (xt, yt, xv, yv), batches)
    for index in batches:
        x, y = tf.gather(xt, index), tf.gather(yt, index)
        with tf.GradientTape() as tape:
            logits = twin(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        twin_opt.apply_gradients(zip(tape.gradient(loss, twin.trainable_variables), twin.trainable_variables))
    for a, b in zip(model.trainable_variables, twin.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        opt.get_slot(model.trainable_variables[0], "v").numpy(),
        twin_opt.get_slot(twin.trainable_variables[0], "v").numpy(), rtol=1e-12, atol=1e-15,
    )
    assert int(opt.iterations.numpy()) == STEPS


@pytest.mark.parametrize("case", ["adam", "sgd", "rmsprop"])
def test_one_step_equals_exact_after_first_update_only(case):
    model, opt, (xt, yt, xv, yv), batches = make_problem(case)
    followed = [s.name for s in opt.hyperparameter_specs()]
    trainer = ForwardModeTrainer(model, opt, followed, xt, yt, xv, yv)
    trainer.step(batches[0])
    _, exact, one_step = trainer.hypergradients()
    for name in followed:
        assert one_step[name] == pytest.approx(exact[name], rel=1e-12, abs=1e-15)
    for index in batches[1:6]:
        trainer.step(index)
    _, exact, one_step = trainer.hypergradients()
    assert relative_error(exact["learning_rate"], one_step["learning_rate"]) > 1e-3


def test_no_nan_tangents_on_digits_with_blank_pixels():
    """Digits has pixels that are 0 in every image: their weights get gradient exactly 0 and a
    plain tf.sqrt would turn the tangents of v into NaN within a few steps."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")  # unstandardised: blank pixels stay exactly 0
    assert (x.max(axis=0) == 0).sum() >= 3
    y = digits.target.astype("int32")
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential(
        [tf_keras.layers.Dense(32, activation="relu", input_shape=(64,)), tf_keras.layers.Dense(10)]
    )
    opt = registry.create("adam", {"learning_rate": 0.01})
    trainer = ForwardModeTrainer(
        model, opt, ["learning_rate", "beta_1", "beta_2", "epsilon"],
        tf.constant(x[:1400]), tf.constant(y[:1400]), tf.constant(x[1400:]), tf.constant(y[1400:]),
    )
    rng = np.random.default_rng(0)
    for _ in range(15):
        trainer.step(rng.choice(1400, 64, replace=False).astype("int32"))
    tangents = [z.numpy() for z in trainer.z_weights] + [
        z.numpy() for d in trainer.z_slots for z in d.values()
    ]
    assert all(np.isfinite(t).all() for t in tangents)
    _, exact, _ = trainer.hypergradients()
    assert all(np.isfinite(v) for v in exact.values())
    assert exact["learning_rate"] != 0.0


def test_unknown_followed_name_is_refused():
    model, opt, tensors, _ = make_problem("sgd")
    with pytest.raises(KeyError, match="beta_1"):
        ForwardModeTrainer(model, opt, ["beta_1"], *tensors)
