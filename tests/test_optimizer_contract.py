"""The contract every registered optimizer keeps: config, live hypers, validation, convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers.hyperparams import InvalidHyperparameter
from tests.numpy_reference import REFERENCES, initial_slots
from optimizers.base import trace_signature
from tests.test_optimizer_rules import VARIANT_PARAMS, VARIANTS, float32_hypers

# A second hyperparameter changed live (besides learning_rate), chosen per optimizer so that the
# change matters: SGD/RMSprop switch momentum on from 0 (a change of regime: on the fused path a
# Python choice, so the traced step is retraced once, as the lab's run loop does).
LIVE_CHANGE = {
    "adam": ("beta_1", 0.5),
    "sgd": ("momentum", 0.5),
    "adamw": ("weight_decay", 0.125),
    "rmsprop": ("momentum", 0.5),
    "adagrad": ("epsilon", 0.0078125),
    "diffgrad": ("beta_2", 0.875),
    "lion": ("beta_1", 0.5),
    "lamb": ("beta_2", 0.875),
    "adafactor": ("clip_threshold", 0.25),
    "adadelta": ("rho", 0.5),
    "adamax": ("beta_2", 0.5),
    "ftrl": ("l2_regularization_strength", 0.125),
    "nadam": ("beta_1", 0.5),
    "muon": ("momentum", 0.5),
    "schedule_free_adamw": ("beta_2", 0.875),  # beta_1 cancels out in the Keras 3 TF form
}


def live_change(name, options):
    return LIVE_CHANGE[options["inner"] if name == "accumulation" else name]


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_from_config_round_trips(name, options, hypers):
    opt = registry.create(name, hypers, options)
    config = opt.get_config()
    for key, value in {**hypers, **options}.items():
        assert config[key] == value
    clone = registry.from_config(name, dict(config))
    assert type(clone) is type(opt)
    assert clone.get_config() == config


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_keras_serialize_deserialize_round_trips(name, options, hypers):
    opt = registry.create(name, hypers, options)
    serialized = tf_keras.optimizers.serialize(opt)
    assert serialized["registered_name"] == f"OptimizerLab>{type(opt).__name__}"
    by_name = {"class_name": serialized["registered_name"], "config": serialized["config"]}
    for payload in (serialized, by_name):
        clone = tf_keras.optimizers.deserialize(payload, custom_objects=registry.custom_objects())
        assert type(clone) is type(opt)
        assert clone.get_config() == opt.get_config()


def traced_stepper(opt, var):
    traces = []

    @tf.function
    def step(grad):
        traces.append(1)  # Python side effect: runs only while tracing
        opt.apply_gradients([(grad, var)])

    return step, traces


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_live_hyper_change_takes_effect_without_retracing(name, options, hypers):
    rng = np.random.default_rng(10)
    init = rng.normal(size=(2, 3))
    grads = [rng.normal(size=(2, 3)) for _ in range(4)]
    opt = registry.create(name, hypers, options)
    var = tf.Variable(init)
    step, traces = traced_stepper(opt, var)
    ref_var, ref_slots = init, initial_slots(name, init, options)
    key, value = live_change(name, options)
    retraced = False
    for t, grad in enumerate(grads, start=1):
        if t == 3:
            signature = trace_signature(opt)
            opt.learning_rate = 0.0625
            opt._set_hyper(key, value)
            assert opt.hyper_values()["learning_rate"] == 0.0625
            assert opt.hyper_values()[key] == value
            if trace_signature(opt) != signature:  # momentum 0 -> on: a new regime, a retrace
                retraced = True
                step, new_traces = traced_stepper(opt, var)
        ref_var, ref_slots = REFERENCES[name](
            grad, ref_var, ref_slots, float32_hypers(opt), t, options)
        step(tf.constant(grad))
        if t == 1:
            # The first call traces twice (once more after it created the optimizer's variables).
            traces_after_first_step = len(traces)
        np.testing.assert_allclose(var.numpy(), ref_var, rtol=1e-10, atol=1e-12)
        for slot, expected in ref_slots.items():
            np.testing.assert_allclose(opt.get_slot(var, slot).numpy(), expected,
                                       rtol=1e-10, atol=1e-12)
    assert traces_after_first_step <= 2
    assert len(traces) == traces_after_first_step  # the old step never retraced
    if retraced:  # only a momentum regime change (SGD/RMSprop, momentum 0 -> 0.5) needs one
        assert name in ("sgd", "rmsprop") and not hypers.get("momentum"), name
        assert len(new_traces) == 1


BAD_VALUES = [
    pytest.param(-0.1, id="negative"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param("abc", id="string"),
    pytest.param(True, id="bool"),
    pytest.param(0.0, id="zero"),
]


@pytest.mark.parametrize("bad", BAD_VALUES)
@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_invalid_learning_rate_is_refused_and_old_value_kept(name, options, hypers, bad):
    """The registry (UI, CLI, config import) refuses outside the UI range (0, 10]; the library's
    live `_set_hyper` refuses what Keras's rules refuse (negative, NaN/inf, not a number) and
    accepts 0.0, which Keras accepts (checked in tests/test_keras_contract.py)."""
    with pytest.raises(InvalidHyperparameter, match=r"learning_rate.*\(0, 10\]"):
        registry.create(name, {**hypers, "learning_rate": bad}, options)
    if bad == 0.0:
        return
    allowed = "a finite number in [0, inf]"
    rng = np.random.default_rng(11)
    init, grads = rng.normal(size=3), [rng.normal(size=3) for _ in range(2)]
    opt = registry.create(name, hypers, options)
    old = opt.hyper_values()
    var = tf.Variable(init)
    step, _ = traced_stepper(opt, var)
    ref_var, ref_slots = init, initial_slots(name, init, options)
    for t, grad in enumerate(grads, start=1):
        for setter in (lambda: opt._set_hyper("learning_rate", bad),
                       lambda: setattr(opt, "learning_rate", bad)):
            with pytest.raises(InvalidHyperparameter) as info:
                setter()
            assert "learning_rate" in str(info.value) and allowed in str(info.value)
        assert opt.hyper_values() == old
        ref_var, ref_slots = REFERENCES[name](grad, ref_var, ref_slots, float32_hypers(opt), t,
                                              options)
        step(tf.constant(grad))
        np.testing.assert_allclose(var.numpy(), ref_var, rtol=1e-10, atol=1e-12)


BETA_PARAMS = [p for p in VARIANT_PARAMS if "beta_1" in {s.name for s in registry.specs(
    p.values[0], p.values[1])}]


@pytest.mark.parametrize("name,options,hypers", BETA_PARAMS)
def test_beta_1_equal_to_one_is_refused(name, options, hypers):
    """The UI range [0, 1) is the registry's; the library accepts beta_1 = 1.0 as Keras does,
    and refuses a NaN naming the field (the old value stays)."""
    # [0, 1), or (0, 1) where beta_1 = 0 has no meaning (schedule-free divides by it)
    with pytest.raises(InvalidHyperparameter, match=r"beta_1=1\.0 refused.*[\[(]0, 1\)"):
        registry.create(name, {**hypers, "beta_1": 1.0}, options)
    opt = registry.create(name, hypers, options)
    with pytest.raises(InvalidHyperparameter, match=r"beta_1=nan refused"):
        opt.beta_1 = math.nan
    assert opt.hyper_values()["beta_1"] == 0.9
    opt.beta_1 = 1.0
    assert opt.hyper_values()["beta_1"] == 1.0


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_unknown_hyperparameter_name_is_refused(name, options, hypers):
    with pytest.raises(KeyError, match="beta_7"):
        registry.validate_hypers(name, {**hypers, "beta_7": 0.5}, options)
    with pytest.raises(KeyError, match="beta_7"):
        registry.create(name, {"beta_7": 0.5}, options)


# Least squares min_x mean((A x - b)^2): the minimum is known in closed form.
CONVERGE_LR = {"adam": 0.05, "adamw": 0.05, "sgd": 0.05, "rmsprop": 0.002, "adagrad": 0.5,
               "diffgrad": 0.05, "accumulation": 0.05, "lion": 0.002,
               "lamb": 0.05, "adafactor": 0.05, "adadelta": 1.0,
               "adamax": 0.05, "ftrl": 0.5, "nadam": 0.01, "muon": 0.05,
               "schedule_free_adamw": 0.05}


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_every_optimizer_solves_least_squares(name, options, hypers):
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(40, 5)), rng.normal(size=40)
    x_star = np.linalg.lstsq(a, b, rcond=None)[0]
    loss_min = np.mean((a @ x_star - b) ** 2)
    opt = registry.create(name, {**hypers, "learning_rate": CONVERGE_LR[name]}, options)
    x = tf.Variable(tf.zeros(5, tf.float64))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(a, x) - b))
        opt.apply_gradients([(tape.gradient(loss, x), x)])
        return loss

    loss_0 = float(step())
    for _ in range(399):
        step()
    # the point the optimizer answers with: schedule-free's average x, else the variable
    answer = (opt.eval_weights([x])[0].numpy() if hasattr(opt, "eval_weights") else x.numpy())
    loss_final = np.mean((a @ answer - b) ** 2)
    assert loss_0 - loss_min > 0.15
    assert loss_final - loss_min < 1e-3 * (loss_0 - loss_min)
    assert np.linalg.norm(answer - x_star) < 0.02


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_eager_and_tf_function_agree(name, options, hypers):
    rng = np.random.default_rng(12)
    init, grads = rng.normal(size=(2, 2)), [rng.normal(size=(2, 2)) for _ in range(4)]
    eager_opt, graph_opt = (registry.create(name, hypers, options) for _ in range(2))
    eager_var, graph_var = tf.Variable(init), tf.Variable(init)

    @tf.function
    def graph_step(grad):
        graph_opt.apply_gradients([(grad, graph_var)])

    for grad in grads:
        eager_opt.apply_gradients([(tf.constant(grad), eager_var)])
        graph_step(tf.constant(grad))
    np.testing.assert_allclose(eager_var.numpy(), graph_var.numpy(), rtol=1e-13, atol=1e-15)
    assert not np.allclose(eager_var.numpy(), init)
    for slot in eager_opt.get_slot_names():
        np.testing.assert_allclose(eager_opt.get_slot(eager_var, slot).numpy(),
                                   graph_opt.get_slot(graph_var, slot).numpy(),
                                   rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_slot_names_appear_at_the_first_step(name, options, hypers):
    opt = registry.create(name, hypers, options)
    var = tf.Variable(np.ones(3))
    assert opt.get_slot_names() == []
    opt.apply_gradients([(tf.constant(np.ones(3)), var)])
    assert opt.get_slot_names() == list(opt.slot_names_for_rule())
    assert set(opt.get_slot_names()) == set(initial_slots(name, np.ones(3), options))


@pytest.mark.parametrize("name,options,hypers", VARIANT_PARAMS)
def test_forward_tangents_stay_finite_with_zero_gradient(name, options, hypers):
    """d(state)/d(learning_rate) through 5 steps where two weights' gradient is always exactly 0.

    The gradient is `mask * var`, so it depends on the state (hence on the learning rate) as in
    real training: its tangent is 0 on the masked weights and a plain `tf.sqrt(0)` there would
    turn `0 * inf` into NaN.
    """
    opt = registry.create(name, hypers, options)
    values = opt.hyper_values()
    lr = tf.constant(values["learning_rate"])
    mask = tf.constant([0.0, 0.0, 1.0, 1.0])
    with tf.autodiff.ForwardAccumulator(lr, tf.ones_like(lr)) as acc:
        hypers_t = {k: (lr if k == "learning_rate" else tf.constant(v)) for k, v in values.items()}
        start = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
        var = tf.constant(start)
        # from the start values: schedule-free's z starts at the weights
        slots = {k: tf.constant(v, tf.float32)
                 for k, v in initial_slots(name, start, options).items()}
        for t in range(1, 6):
            coeffs = opt.coefficients(hypers_t, tf.constant(float(t)))
            var, slots = opt.update(mask * var, var, slots, coeffs)
    zero = tf.UnconnectedGradients.ZERO
    tangents = {"var": acc.jvp(var, unconnected_gradients=zero).numpy()}
    tangents.update({k: acc.jvp(v, unconnected_gradients=zero).numpy() for k, v in slots.items()})
    for key, tangent in tangents.items():
        assert np.all(np.isfinite(tangent)), f"{key}: {tangent}"
    assert np.all(tangents["var"][2:] != 0)  # the moving weights do depend on the learning rate
    if name == "ftrl":  # the closed form puts a weight whose |z| <= l1 (here z = 0) at 0
        if not hypers.get("l2_shrinkage_regularization_strength"):  # shrinkage moves z
            np.testing.assert_array_equal(tangents["var"][:2], 0.0)
            np.testing.assert_array_equal(var.numpy()[:2], 0.0)
    elif not values.get("weight_decay"):  # only a decay moves a zero-gradient weight
        np.testing.assert_array_equal(tangents["var"][:2], 0.0)
        np.testing.assert_array_equal(var.numpy()[:2], [0.5, -1.0])


def test_variant_table_is_shared():
    assert len(VARIANTS) == len(VARIANT_PARAMS) >= 18


@pytest.mark.parametrize("name", ["adam", "sgd", "adamw", "rmsprop", "adagrad", "diffgrad"])
def test_docstrings_give_the_ranges_their_specs_hold(name):
    """The shared paragraph and every hyperparameter's ranges are substituted from `HyperSpec`
    (`hyperparams.fill_docstring`), never copied by hand."""
    from optimizers.hyperparams import ALLOWED_VALUES

    doc = " ".join(registry.get(name).__doc__.split())
    assert "{{" not in doc
    assert ALLOWED_VALUES in doc
    for spec in registry.specs(name):
        assert spec.doc_line() in doc, spec.name
