"""Numerics of every optimizer rule: NumPy references, Keras built-ins, sparse, accumulation."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers import registry
from tests.numpy_reference import REFERENCES, initial_slots

FTRL_OPTIONS = {"learning_rate_power": -0.75, "initial_accumulator_value": 0.5}
FTRL_HYPERS = {"learning_rate": 0.2, "l1_regularization_strength": 0.001,
               "l2_regularization_strength": 0.001, "l2_shrinkage_regularization_strength": 0.001,
               "beta": 0.5}
# (id, registry name, options, hypers): every registered optimizer plus its option variants.
VARIANTS = [
    ("adam", "adam", {}, {"learning_rate": 0.01}),
    ("adam-amsgrad", "adam", {"amsgrad": True}, {"learning_rate": 0.01}),
    ("sgd", "sgd", {}, {"learning_rate": 0.1}),
    ("sgd-momentum", "sgd", {}, {"learning_rate": 0.1, "momentum": 0.9}),
    ("sgd-nesterov", "sgd", {"nesterov": True}, {"learning_rate": 0.1, "momentum": 0.9}),
    ("adamw", "adamw", {}, {"learning_rate": 0.01, "weight_decay": 0.25}),
    ("adamw-amsgrad", "adamw", {"amsgrad": True}, {"learning_rate": 0.01, "weight_decay": 0.25}),
    ("rmsprop", "rmsprop", {}, {"learning_rate": 0.01}),
    ("rmsprop-centered", "rmsprop", {"centered": True}, {"learning_rate": 0.01}),
    ("rmsprop-momentum", "rmsprop", {}, {"learning_rate": 0.01, "momentum": 0.875}),
    ("rmsprop-centered-momentum", "rmsprop", {"centered": True},
     {"learning_rate": 0.01, "momentum": 0.5}),
    ("adagrad", "adagrad", {}, {"learning_rate": 0.1}),
    ("adagrad-init1", "adagrad", {"initial_accumulator_value": 1.0}, {"learning_rate": 0.1}),
    ("diffgrad", "diffgrad", {}, {"learning_rate": 0.01}),
    ("adadelta", "adadelta", {}, {"learning_rate": 1.0}),
    ("adadelta-rho", "adadelta", {}, {"learning_rate": 0.5, "rho": 0.9, "epsilon": 1e-6}),
    ("adamax", "adamax", {}, {"learning_rate": 0.01}),
    ("adamax-beta-2", "adamax", {}, {"learning_rate": 0.02, "beta_2": 0.75, "epsilon": 1e-3}),
    ("ftrl", "ftrl", {}, {"learning_rate": 0.1}),
    ("ftrl-regularized", "ftrl", FTRL_OPTIONS, FTRL_HYPERS),
    ("nadam", "nadam", {}, {"learning_rate": 0.01}),
    ("nadam-schedule-decay", "nadam", {"schedule_decay": 0.1},
     {"learning_rate": 0.02, "beta_2": 0.9}),
    ("accum-sgd-k2", "accumulation", {"inner": "sgd", "accumulation_steps": 2},
     {"learning_rate": 0.1, "momentum": 0.9}),
    ("accum-sgd-k3", "accumulation", {"inner": "sgd", "accumulation_steps": 3},
     {"learning_rate": 0.1}),
    ("accum-adam-k2", "accumulation", {"inner": "adam", "accumulation_steps": 2},
     {"learning_rate": 0.01}),
    ("accum-adam-k3", "accumulation", {"inner": "adam", "accumulation_steps": 3},
     {"learning_rate": 0.01}),
    ("lion", "lion", {}, {"learning_rate": 0.01}),
    ("lion-decay", "lion", {}, {"learning_rate": 0.01, "weight_decay": 0.25}),
    ("lamb", "lamb", {}, {"learning_rate": 0.01}),
    ("adafactor", "adafactor", {}, {"learning_rate": 0.01}),
    ("adafactor-absolute", "adafactor", {"relative_step": False},
     {"learning_rate": 0.5, "clip_threshold": 0.5}),
    ("muon", "muon", {}, {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("muon-plain-momentum", "muon", {"nesterov": False, "ns_steps": 3},
     {"learning_rate": 0.02, "momentum": 0.5, "rms_rate": 0.5}),
    ("schedule-free", "schedule_free_adamw", {}, {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("schedule-free-warmup", "schedule_free_adamw", {"warmup_steps": 4},
     {"learning_rate": 0.05, "beta_2": 0.99}),
    ("schedule-free-keras3", "schedule_free_adamw", {"keras3_tf_compat": True},
     {"learning_rate": 0.01, "weight_decay": 0.1}),
]
VARIANT_PARAMS = [pytest.param(n, o, h, id=i) for i, n, o, h in VARIANTS]
SHAPE = (3, 4)


def test_variants_cover_every_registered_optimizer():
    # Pure rules only: lookahead and moving_average have no coefficients/update (their step
    # overrides apply_gradients); each has its own NumPy reference (tests/test_lookahead.py,
    # tests/test_moving_average.py).
    rules = {n for n in registry.OPTIMIZERS if registry.is_rule(n)}
    assert {v[1] for v in VARIANTS} == rules
    assert set(registry.OPTIMIZERS) - rules == {"lookahead", "moving_average"}


def float32_hypers(opt) -> dict[str, float]:
    """The optimizer's hyperparameters as the float32 values its variables actually hold."""
    return {k: float(np.float32(v)) for k, v in opt.hyper_values().items()}


def reference_steps(name, options, hypers, var, grads, first_step=1):
    """Yield (var, slots) after each NumPy reference step."""
    slots = initial_slots(name, var, options)
    for t, grad in enumerate(grads, start=first_step):
        var, slots = REFERENCES[name](grad, var, slots, hypers, t, options)
        yield var, slots


def assert_state(opt, var, ref_var, ref_slots, rtol, atol, where=""):
    np.testing.assert_allclose(var.numpy(), ref_var, rtol=rtol, atol=atol, err_msg=f"var {where}")
    assert set(opt.get_slot_names()) == set(ref_slots)
    for name, value in ref_slots.items():
        np.testing.assert_allclose(
            opt.get_slot(var, name).numpy(), value, rtol=rtol, atol=atol,
            err_msg=f"slot {name} {where}",
        )


@pytest.mark.parametrize("dtype,rtol,atol", [
    pytest.param(np.float32, 1e-5, 1e-6, id="float32"),
    pytest.param(np.float64, 1e-10, 1e-12, id="float64"),
])
@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_rule_matches_numpy_reference(name, options, hypers, dtype, rtol, atol):
    rng = np.random.default_rng(0)
    init = rng.normal(size=SHAPE).astype(dtype)
    grads = [rng.normal(size=SHAPE).astype(dtype) for _ in range(6)]
    opt = registry.create(name, hypers, options)
    var = tf.Variable(init)

    @tf.function
    def step(grad):
        opt.apply_gradients([(grad, var)])

    reference = reference_steps(name, options, float32_hypers(opt), init, grads)
    for t, (grad, (ref_var, ref_slots)) in enumerate(zip(grads, reference), start=1):
        step(tf.constant(grad))
        assert_state(opt, var, ref_var, ref_slots, rtol, atol, where=f"after step {t}")
    assert int(opt.iterations) == len(grads)
    assert not np.allclose(var.numpy(), init)


LEGACY = tf_keras.optimizers.legacy
KERAS_CASES = [
    pytest.param("sgd", {}, {"learning_rate": 0.1}, lambda: LEGACY.SGD(0.1), id="sgd"),
    pytest.param("sgd", {}, {"learning_rate": 0.1, "momentum": 0.9},
                 lambda: LEGACY.SGD(0.1, momentum=0.9), id="sgd-momentum"),
    pytest.param("sgd", {"nesterov": True}, {"learning_rate": 0.1, "momentum": 0.9},
                 lambda: LEGACY.SGD(0.1, momentum=0.9, nesterov=True), id="sgd-nesterov"),
    pytest.param("adam", {}, {"learning_rate": 0.01}, lambda: LEGACY.Adam(0.01), id="adam"),
    pytest.param("adam", {"amsgrad": True}, {"learning_rate": 0.01},
                 lambda: LEGACY.Adam(0.01, amsgrad=True), id="adam-amsgrad"),
    pytest.param("rmsprop", {}, {"learning_rate": 0.01}, lambda: LEGACY.RMSprop(0.01),
                 id="rmsprop"),
    pytest.param("rmsprop", {"centered": True}, {"learning_rate": 0.01},
                 lambda: LEGACY.RMSprop(0.01, centered=True), id="rmsprop-centered"),
    pytest.param("rmsprop", {}, {"learning_rate": 0.01, "momentum": 0.9},
                 lambda: LEGACY.RMSprop(0.01, momentum=0.9), id="rmsprop-momentum"),
    pytest.param("rmsprop", {"centered": True}, {"learning_rate": 0.01, "momentum": 0.9},
                 lambda: LEGACY.RMSprop(0.01, momentum=0.9, centered=True),
                 id="rmsprop-centered-momentum"),
    pytest.param("adagrad", {}, {"learning_rate": 0.1}, lambda: LEGACY.Adagrad(0.1),
                 id="adagrad"),
    pytest.param("adadelta", {}, {"learning_rate": 1.0}, lambda: LEGACY.Adadelta(1.0),
                 id="adadelta"),
    pytest.param("adadelta", {}, {"learning_rate": 0.5, "rho": 0.8, "epsilon": 1e-4},
                 lambda: LEGACY.Adadelta(0.5, rho=0.8, epsilon=1e-4), id="adadelta-rho"),
    pytest.param("adamax", {}, {"learning_rate": 0.01}, lambda: LEGACY.Adamax(0.01),
                 id="adamax"),
    pytest.param("adamax", {}, {"learning_rate": 0.02, "beta_1": 0.5, "beta_2": 0.75},
                 lambda: LEGACY.Adamax(0.02, beta_1=0.5, beta_2=0.75), id="adamax-betas"),
    pytest.param("ftrl", {}, {"learning_rate": 0.1}, lambda: LEGACY.Ftrl(0.1), id="ftrl"),
    pytest.param("ftrl", FTRL_OPTIONS, FTRL_HYPERS,
                 lambda: LEGACY.Ftrl(**FTRL_OPTIONS, **FTRL_HYPERS), id="ftrl-regularized"),
    pytest.param("nadam", {}, {"learning_rate": 0.01}, lambda: LEGACY.Nadam(0.01), id="nadam"),
    pytest.param("nadam", {"schedule_decay": 0.1}, {"learning_rate": 0.02, "beta_2": 0.9},
                 lambda: LEGACY.Nadam(0.02, beta_2=0.9, schedule_decay=0.1),
                 id="nadam-schedule-decay"),
]


@pytest.mark.parametrize("name,options,hypers,make_keras", KERAS_CASES)
def test_rule_matches_tf_keras_legacy_builtin(name, options, hypers, make_keras):
    rng = np.random.default_rng(1)
    init = rng.normal(size=(8, 5)).astype(np.float32)
    grads = [rng.normal(size=(8, 5)).astype(np.float32) for _ in range(12)]
    ours, keras = registry.create(name, hypers, options), make_keras()
    var_ours, var_keras = tf.Variable(init), tf.Variable(init)

    @tf.function
    def step(grad):
        ours.apply_gradients([(grad, var_ours)])
        keras.apply_gradients([(grad, var_keras)])

    for t, grad in enumerate(grads, start=1):
        step(tf.constant(grad))
        np.testing.assert_allclose(var_ours.numpy(), var_keras.numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=f"var after step {t}")
        for slot in keras.get_slot_names():
            np.testing.assert_allclose(
                ours.get_slot(var_ours, slot).numpy(), keras.get_slot(var_keras, slot).numpy(),
                rtol=1e-6, atol=1e-6, err_msg=f"slot {slot} after step {t}",
            )
    assert np.abs(var_ours.numpy() - init).max() > 1e-2


# ----- sparse gradients -------------------------------------------------------------------------
@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_sparse_with_every_row_equals_dense(name, options, hypers):
    rng = np.random.default_rng(2)
    init = rng.normal(size=(6, 3)).astype(np.float64)
    dense_opt, sparse_opt = (registry.create(name, hypers, options) for _ in range(2))
    dense_var, sparse_var = tf.Variable(init), tf.Variable(init)
    indices = tf.constant([3, 0, 5, 1, 4, 2])

    @tf.function
    def step(grad):
        dense_opt.apply_gradients([(grad, dense_var)])
        rows = tf.IndexedSlices(tf.gather(grad, indices), indices, tf.constant([6, 3]))
        sparse_opt.apply_gradients([(rows, sparse_var)])

    for _ in range(4):
        step(tf.constant(rng.normal(size=(6, 3))))
        np.testing.assert_allclose(sparse_var.numpy(), dense_var.numpy(), rtol=1e-12, atol=1e-14)
        for slot in dense_opt.get_slot_names():
            np.testing.assert_allclose(
                sparse_opt.get_slot(sparse_var, slot).numpy(),
                dense_opt.get_slot(dense_var, slot).numpy(), rtol=1e-12, atol=1e-14,
            )


def embedding_case(name, options, hypers):
    """An Embedding(8, 3) in float64 with a fixed linear loss read through `ids`."""
    tf_keras.utils.set_random_seed(3)
    layer = tf_keras.layers.Embedding(8, 3, dtype="float64")
    layer.build((None, 2))
    opt = registry.create(name, hypers, options)
    weights = tf.constant(np.random.default_rng(3).normal(size=(2, 3)))

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids) * weights)
        grad = tape.gradient(loss, layer.embeddings)
        assert isinstance(grad, tf.IndexedSlices)
        opt.apply_gradients([(grad, layer.embeddings)])

    return layer.embeddings, opt, weights.numpy(), step


# Three steps touching different row subsets; ids repeat within a batch (duplicates summed).
ID_BATCHES = [[[1, 3], [3, 6]], [[0, 1], [1, 1]], [[6, 2], [2, 6]]]
# accumulation and adafactor densify an IndexedSlices gradient (their docstrings say why);
# Nadam decays every row's moments, as Keras 2's (tests/test_keras_drop_in.py)
LAZY_PARAMS = [p for p in VARIANT_PARAMS
               if p.values[0] not in ("accumulation", "adafactor", "nadam", "muon",
                                      "schedule_free_adamw")]


@pytest.mark.parametrize("name,options,hypers", LAZY_PARAMS)
def test_sparse_embedding_touches_only_its_rows(name, options, hypers):
    table, opt, weights, step = embedding_case(name, options, hypers)
    ref_var = table.numpy().copy()
    ref_slots = initial_slots(name, ref_var, options)
    untouched = set(range(8))
    for t, ids in enumerate(ID_BATCHES, start=1):
        before = {"var": table.numpy().copy(), **initial_slots(name, ref_var, options)}
        before.update({s: opt.get_slot(table, s).numpy().copy() for s in opt.get_slot_names()})
        step(tf.constant(ids))
        rows = sorted({i for row in ids for i in row})
        grad = np.zeros_like(ref_var)
        for row in ids:
            for position, i in enumerate(row):
                grad[i] += weights[position]
        new_rows, new_slot_rows = REFERENCES[name](
            grad[rows], ref_var[rows], {k: v[rows] for k, v in ref_slots.items()},
            float32_hypers(opt), t, options,
        )
        ref_var[rows] = new_rows
        for k in ref_slots:
            ref_slots[k][rows] = new_slot_rows[k]
        others = [i for i in range(8) if i not in rows]
        np.testing.assert_array_equal(table.numpy()[others], before["var"][others])
        for s in opt.get_slot_names():
            np.testing.assert_array_equal(opt.get_slot(table, s).numpy()[others], before[s][others])
        assert np.all(np.abs(table.numpy()[rows] - before["var"][rows]) > 0)
        assert_state(opt, table, ref_var, ref_slots, 1e-10, 1e-12, where=f"after step {t}")
        untouched -= set(rows)
    assert untouched == {4, 5, 7}


@pytest.mark.parametrize("inner", ["sgd", "adam"])
def test_accumulation_densifies_sparse_gradients(inner):
    options = {"inner": inner, "accumulation_steps": 3}
    table, opt, weights, step = embedding_case("accumulation", options, {"learning_rate": 0.1})
    init = table.numpy().copy()
    dense = tf.Variable(init)
    dense_opt = registry.create("accumulation", {"learning_rate": 0.1}, options)
    for ids in ID_BATCHES:
        step(tf.constant(ids))
        grad = np.zeros_like(init)
        for row in ids:
            for position, i in enumerate(row):
                grad[i] += weights[position]
        dense_opt.apply_gradients([(tf.constant(grad), dense)])
    np.testing.assert_allclose(table.numpy(), dense.numpy(), rtol=1e-12, atol=1e-14)
    changed = np.flatnonzero(np.abs(table.numpy() - init).max(axis=1) > 0)
    # Row 3 only appears in the first micro-batch, rows 2 and 6 only in the last one.
    assert changed.tolist() == [0, 1, 2, 3, 6]


# ----- gradient accumulation ------------------------------------------------------------------
def dense_model(seed):
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3, dtype="float64")])
    model.build((None, 5))
    return model


@pytest.mark.parametrize("inner,hypers", [
    pytest.param("sgd", {"learning_rate": 0.1, "momentum": 0.5}, id="sgd"),
    pytest.param("adam", {"learning_rate": 0.01}, id="adam"),
])
def test_accumulated_half_batches_equal_one_full_batch(inner, hypers):
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(100, 5)), rng.normal(size=(100, 3))
    big, small = dense_model(5), dense_model(5)
    big_opt = registry.create(inner, hypers)
    small_opt = registry.create("accumulation", hypers, {"inner": inner, "accumulation_steps": 2})

    def train_step(model, opt, xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))

    big_step, small_step = tf.function(train_step), tf.function(train_step)
    for _ in range(3):
        big_step(big, big_opt, x, y)
        small_step(small, small_opt, x[:50], y[:50])
        small_step(small, small_opt, x[50:], y[50:])
        for a, b in zip(big.trainable_variables, small.trainable_variables):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12, atol=1e-14)
            for slot in big_opt.get_slot_names():
                np.testing.assert_allclose(small_opt.get_slot(b, slot).numpy(),
                                           big_opt.get_slot(a, slot).numpy(),
                                           rtol=1e-12, atol=1e-14)
            np.testing.assert_array_equal(small_opt.get_slot(b, "grad_accum").numpy(), 0.0)
    assert int(big_opt.iterations) == 3
    assert int(small_opt.iterations) == 6  # iterations counts micro-batches
