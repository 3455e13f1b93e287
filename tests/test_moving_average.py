"""MovingAverage against a NumPy reference (TensorFlow Addons semantics), swap, config, registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from optimizers import registry
from optimizers.hyperparams import InvalidHyperparameter
from optimizers.moving_average import MovingAverage
from optimizers.sgd import SGD


def reference(init, grads, lr, average_decay, start_step=0, dynamic_decay=False,
              num_updates=None):
    """Plain SGD, then average <- d * average + (1 - d) * var with TFA's decay at n updates."""
    var, average, out = init.copy(), init.copy(), []
    for n, grad in enumerate(grads):
        var = var - lr * grad
        decay = average_decay
        if dynamic_decay:
            s = n - start_step
            decay = min(decay, (1.0 + s) / (10.0 + s))
        if num_updates is not None:
            decay = min(decay, (1.0 + num_updates) / (10.0 + num_updates))
        if n < start_step:
            decay = 0.0
        average = decay * average + (1 - decay) * var
        out.append((var.copy(), average.copy()))
    return out


CASES = [
    ("plain", {"average_decay": 0.75}),
    ("start-step", {"average_decay": 0.75, "start_step": 3}),
    ("dynamic", {"average_decay": 0.875, "dynamic_decay": True}),
    ("dynamic-start", {"average_decay": 0.875, "dynamic_decay": True, "start_step": 2}),
    ("num-updates", {"average_decay": 0.99, "num_updates": 4}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case,kwargs", CASES, ids=[c[0] for c in CASES])
def test_average_matches_numpy_every_step(case, kwargs, dtype):
    rng = np.random.default_rng(5)
    init = rng.normal(size=(3, 2)).astype(dtype)
    grads = [rng.normal(size=(3, 2)).astype(dtype) for _ in range(8)]
    opt = MovingAverage(SGD(learning_rate=0.125), **kwargs)
    var = tf.Variable(init)
    step = tf.function(lambda g: opt.apply_gradients([(g, var)]))
    tol = 1e-6 if dtype == "float32" else 1e-12
    for (ref_var, ref_avg), grad in zip(reference(init, grads, 0.125, **kwargs), grads):
        step(tf.constant(grad))
        np.testing.assert_allclose(var.numpy(), ref_var, rtol=tol, atol=tol)
        np.testing.assert_allclose(opt.get_slot(var, "average").numpy(), ref_avg, rtol=tol,
                                   atol=tol)
    assert not np.allclose(var.numpy(), opt.get_slot(var, "average").numpy())


def test_swap_assign_and_averaged_context():
    opt = MovingAverage(SGD(learning_rate=0.5), average_decay=0.5)
    var = tf.Variable([1.0, 2.0])
    for _ in range(3):
        opt.apply_gradients([(tf.constant([1.0, -1.0]), var)])
    trained = var.numpy().copy()
    average = opt.get_slot(var, "average").numpy().copy()
    with opt.averaged([var]):
        np.testing.assert_allclose(var.numpy(), average)
    np.testing.assert_allclose(var.numpy(), trained)
    np.testing.assert_allclose(opt.get_slot(var, "average").numpy(), average)
    opt.assign_average_vars([var])
    np.testing.assert_allclose(var.numpy(), average)
    # reference: var 1 -> 0.5 -> 0 -> -0.5; avg = 0.5 avg + 0.5 var: 0.75, 0.375, -0.0625
    np.testing.assert_allclose(average[0], -0.0625)


def test_registry_config_round_trip_and_refusals():
    opt = registry.create("moving_average", {"average_decay": 0.9, "learning_rate": 0.25},
                          {"inner": "sgd", "start_step": 2, "dynamic_decay": True})
    assert opt.inner.hyper_values()["learning_rate"] == 0.25
    config = json.loads(json.dumps(opt.get_config()))
    clone = MovingAverage.from_config(config)
    assert json.loads(json.dumps(clone.get_config())) == config
    assert clone.slot_names_for_rule() == ("average", "momentum")
    with pytest.raises(InvalidHyperparameter, match="^average_decay="):
        MovingAverage(SGD(), average_decay=1.5)
    with pytest.raises(InvalidHyperparameter, match="^start_step="):
        MovingAverage(SGD(), start_step=-1)
    with pytest.raises(ValueError, match="cannot wrap itself"):
        MovingAverage(MovingAverage(SGD()))
    with pytest.raises(InvalidHyperparameter, match="average_decay=2"):
        registry.create("moving_average", {"average_decay": 2.0})
    with pytest.raises(TypeError, match="only the registry resolves names"):
        MovingAverage("sgd")


@pytest.mark.parametrize("inner,options", [
    ("sgd", {"nesterov": True}), ("adam", {"amsgrad": True}), ("rmsprop", {"centered": True}),
    ("adagrad", {"initial_accumulator_value": 0.5}),
])
def test_accumulation_passes_the_inner_options_through(inner, options):
    """GradientAccumulation(k=1) with the inner rule's options equals the inner rule itself."""
    hypers = {"learning_rate": 0.05} if inner != "sgd" else {"learning_rate": 0.05,
                                                             "momentum": 0.5}
    wrapped = registry.create("accumulation", hypers,
                              {"inner": inner, "accumulation_steps": 1, **options})
    for key, value in options.items():
        assert getattr(wrapped.inner, key) == value
        assert wrapped.get_config()[key] == value
    clone = registry.from_config("accumulation", json.loads(json.dumps(wrapped.get_config())))
    assert clone.get_config() == wrapped.get_config()
    plain = registry.create(inner, hypers, options)
    results = []
    for opt in (wrapped, plain):
        var = tf.Variable([1.0, -0.5, 2.0])
        for t in range(4):
            opt.apply_gradients([(tf.constant([0.5, -1.0, 0.25]) * (t + 1), var)])
        results.append(var.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_accumulation_takes_a_schedule_from_its_inner_rule():
    from optimizers.accumulation import GradientAccumulation
    from tf_keras.optimizers.schedules import ExponentialDecay

    opt = GradientAccumulation(SGD(learning_rate=ExponentialDecay(0.5, 1, 0.5)),
                               accumulation_steps=1)
    var = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([1.0]), var)])  # lr 0.5 at iteration 0
    opt.apply_gradients([(tf.constant([1.0]), var)])  # lr 0.25 at iteration 1
    np.testing.assert_allclose(var.numpy(), [0.25])
