"""Keras 2 vs Keras 3: the same pure rule behind `RuleOptimizer` and `RuleTwin` gives the same
weights and slots after 20 steps on the same batches (float32 to 1e-6, float64 to 1e-12), for
dense gradients and for the lazy sparse path of an embedding table; and where Keras 3 has a
built-in of the same algorithm, the twin matches it too."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import registry
from optimizers.keras3_twin import RuleTwin

STEPS = 20
TOLERANCE = {tf.float32: 1e-6, tf.float64: 1e-12}
CASES = [  # (registry name, hyperparameters, options)
    ("sgd", {"learning_rate": 0.05}, {}),
    ("sgd", {"learning_rate": 0.05, "momentum": 0.9}, {"nesterov": True}),
    ("adam", {"learning_rate": 0.01}, {}),
    ("adam", {"learning_rate": 0.01}, {"amsgrad": True}),
    ("adamw", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("rmsprop", {"learning_rate": 0.01, "momentum": 0.5}, {"centered": True}),
    ("adagrad", {"learning_rate": 0.1}, {}),
    ("diffgrad", {"learning_rate": 0.01}, {}),
    ("accumulation", {"learning_rate": 0.01}, {"inner": "adam"}),
    ("lion", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("lamb", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("adafactor", {"learning_rate": 0.01}, {}),  # factored slots: shaped by slot_shape
    ("adadelta", {"learning_rate": 1.0}, {}),
    ("adamax", {"learning_rate": 0.01}, {}),
    ("ftrl", {"learning_rate": 0.1, "l1_regularization_strength": 0.01}, {}),
    ("muon", {"learning_rate": 0.01}, {}),  # routed per variable; scalar placeholder slots
    ("schedule_free_adamw", {"learning_rate": 0.01}, {}),  # z starts at the weights
]
# Not Nadam: its Keras 2 sparse update is a hybrid (every row's moments decay, only the batch's
# rows move) that the twin's two sparse policies, lazy rows or densify, do not reproduce;
# tests/test_keras_drop_in.py holds it to Keras 2.
RNG = np.random.default_rng(0)
W0, B0, E0 = RNG.normal(size=(6, 4)), RNG.normal(size=4), RNG.normal(size=(10, 3))
BATCHES = [(RNG.normal(size=(5, 6)), RNG.normal(size=(5, 4)),
            RNG.integers(0, 10, size=(5, 2)), RNG.normal(size=(5, 3))) for _ in range(STEPS)]


def loss_of(w, b, e, batch, dtype):
    x, y, ids, target = batch
    dense = tf.reduce_mean(tf.square(tf.tanh(tf.cast(x, dtype) @ w + b) - tf.cast(y, dtype)))
    rows = tf.reduce_sum(tf.gather(e, ids), axis=1)  # gradient: tf.IndexedSlices
    return dense + tf.reduce_mean(tf.square(rows - tf.cast(target, dtype)))


def train(name, hypers, options, dtype, keras3: bool):
    rule = registry.create(name, hypers, options)
    rule.fused = False  # the twin runs the pure rule: compare it with the same rule
    if keras3:
        opt = RuleTwin(registry.create(name, hypers, options))
        variables = [keras.Variable(v, dtype=dtype.name) for v in (W0, B0, E0)]
        tensors = [v.value for v in variables]  # the tf.Variables a tape can watch
    else:
        opt = rule
        variables = [tf.Variable(v, dtype=dtype) for v in (W0, B0, E0)]
        tensors = variables
    for batch in BATCHES:
        with tf.GradientTape() as tape:
            loss = loss_of(*tensors, batch, dtype)
        grads = tape.gradient(loss, tensors)
        assert isinstance(grads[2], tf.IndexedSlices)
        opt.apply_gradients(zip(grads, variables))
    weights = [np.asarray(tf.convert_to_tensor(v)) for v in variables]
    if keras3:
        slots = {(s, i): np.asarray(tf.convert_to_tensor(opt.slots[s][i]))
                 for s in opt.slot_names for i in range(3)}
    else:
        slots = {(s, i): opt.get_slot(variables[i], s).numpy()
                 for s in opt.slot_names_for_rule() for i in range(3)}
    return weights, slots


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,hypers,options", CASES,
                         ids=[f"{c[0]}{'-' + '-'.join(c[2]) if c[2] else ''}" for c in CASES])
def test_keras2_and_keras3_agree(name, hypers, options, dtype):
    weights2, slots2 = train(name, hypers, options, dtype, keras3=False)
    weights3, slots3 = train(name, hypers, options, dtype, keras3=True)
    assert slots2.keys() == slots3.keys() and slots2
    for a, b in zip(weights2, weights3):
        np.testing.assert_allclose(b, a, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    for key in slots2:
        np.testing.assert_allclose(slots3[key], slots2[key], rtol=TOLERANCE[dtype],
                                   atol=TOLERANCE[dtype], err_msg=str(key))
    assert not np.allclose(weights2[0], W0)  # it trained


@pytest.mark.parametrize("name,builtin", [
    ("sgd", lambda: keras.optimizers.SGD(0.05, momentum=0.9)),
    ("adam", lambda: keras.optimizers.Adam(0.01)),
    ("rmsprop", lambda: keras.optimizers.RMSprop(0.01, momentum=0.5)),
])
def test_twin_matches_the_keras3_builtin_on_dense_gradients(name, builtin):
    hypers = {"sgd": {"learning_rate": 0.05, "momentum": 0.9}, "adam": {"learning_rate": 0.01},
              "rmsprop": {"learning_rate": 0.01, "momentum": 0.5}}[name]
    twin, stock = dense_run(RuleTwin(registry.create(name, hypers))), dense_run(builtin())
    np.testing.assert_allclose(twin, stock, rtol=2e-5, atol=2e-6)


def test_rmsprop_epsilon_convention_differs_from_keras3_without_momentum():
    """Keras 2 (and the lab) put epsilon outside the square root when momentum = 0; Keras 3's
    RMSprop always puts it inside: with epsilon = 0.1 the runs visibly part."""
    hypers = {"learning_rate": 0.01, "epsilon": 0.1}
    twin = dense_run(RuleTwin(registry.create("rmsprop", hypers)))
    stock = dense_run(keras.optimizers.RMSprop(0.01, epsilon=0.1))
    assert np.abs(twin - stock).max() > 1e-3


def dense_run(opt) -> np.ndarray:
    """The weights after `STEPS` dense steps of `opt` on the tanh regression (float32)."""
    w = keras.Variable(W0, dtype="float32")
    for x, y, _, _ in BATCHES:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.tanh(tf.cast(x, tf.float32) @ w.value)
                                            - tf.cast(y, tf.float32)))
        opt.apply_gradients([(tape.gradient(loss, w.value), w)])
    return np.asarray(tf.convert_to_tensor(w))


def test_keras3_hyperparameters_are_plain_attributes_and_config_names_the_rule():
    opt = RuleTwin(registry.create("adam", {"beta_1": 0.8}, {"amsgrad": True}))
    assert opt.beta_1 == pytest.approx(0.8) and isinstance(opt.beta_1, float)
    config = opt.get_config()
    assert config["rule"] == "Adam" and config["amsgrad"] is True
    assert config["beta_1"] == pytest.approx(0.8)
    with pytest.raises(TypeError, match="needs a RuleOptimizer"):
        RuleTwin(registry.create("lookahead"))


def test_keras3_page_shows_parity_and_both_call_orders(tmp_path, monkeypatch):
    from tests._pages import page_test

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("keras3", default_timeout=180).run()
    assert not at.exception, at.exception
    assert "largest difference over the weights and every slot: 0" in at.success[0].value
    from teaching import migration

    mapping = at.table[0].value  # wrapped whole, not cut at the column's width
    assert mapping["what changed"].tolist() == migration.mapping_table()["what changed"].tolist()
    at.selectbox(key="k3_optimizer").select("rmsprop").run()
    at.radio(key="k3_dtype").set_value("float64").run()
    assert not at.exception, at.exception
    assert "tolerance 1e-12 in float64" in at.success[0].value
    methods = at.dataframe[1].value["method"].tolist() + at.dataframe[2].value["method"].tolist()
    assert "_prepare_local" in methods and "update_step" in methods
