"""Lookahead: NumPy reference step by step, slots visible, config and checkpoint round trips."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers.hyperparams import InvalidHyperparameter
from optimizers.lookahead import Lookahead
from tests.numpy_reference import REFERENCES, initial_slots


def lookahead_reference(inner, var, grads, hypers, k, alpha, options=None):
    """Zhang et al. 2019, Algorithm 1, with the inner rule's NumPy reference; yields every step's
    (var, slow, inner slots)."""
    options = options or {}
    slots = initial_slots(inner, var, options)
    slow = var.copy()
    for t, grad in enumerate(grads, start=1):
        var, slots = REFERENCES[inner](grad, var, slots, hypers, t, options)
        if t % k == 0:
            slow = slow + np.float32(alpha) * (var - slow)
            var = slow.copy()
        yield var, slow, slots


@pytest.mark.parametrize("inner,hypers", [("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
                                          ("adam", {"learning_rate": 0.05})])
def test_matches_numpy_reference_every_step(inner, hypers):
    rng = np.random.default_rng(1)
    init = rng.normal(size=(3, 2)).astype(np.float32)
    grads = [rng.normal(size=(3, 2)).astype(np.float32) for _ in range(7)]
    opt = Lookahead(registry.create(inner, hypers), sync_period=3, slow_step_size=0.5)
    var = tf.Variable(init)

    @tf.function
    def step(grad):
        opt.apply_gradients([(grad, var)])

    traced = None
    full = {k: float(np.float32(v)) for k, v in opt.inner.hyper_values().items()}
    for t, (ref_var, ref_slow, ref_slots) in enumerate(
            lookahead_reference(inner, init, grads, full, 3, 0.5), start=1):
        step(tf.constant(grads[t - 1]))
        traced = traced or step.experimental_get_tracing_count()  # variables made on 1st call
        np.testing.assert_allclose(var.numpy(), ref_var, rtol=1e-5, atol=1e-6, err_msg=f"t={t}")
        np.testing.assert_allclose(opt.get_slot(var, "slow").numpy(), ref_slow, rtol=1e-5, atol=1e-6)
        for name, value in ref_slots.items():
            np.testing.assert_allclose(opt.inner.get_slot(var, name).numpy(), value, rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == int(opt.inner.iterations.numpy()) == 7
    assert step.experimental_get_tracing_count() == traced  # no retrace after the first call


def test_sync_at_k_equals_slow_weights_and_live_alpha():
    opt = Lookahead(registry.create("sgd"), sync_period=2, slow_step_size=0.5)
    var = tf.Variable([1.0, 2.0])
    grad = tf.constant([1.0, 1.0])
    opt.apply_gradients([(grad, var)])
    np.testing.assert_allclose(var.numpy(), [0.99, 1.99])  # fast step only
    opt.apply_gradients([(grad, var)])
    np.testing.assert_allclose(var.numpy(), [0.99, 1.99])  # slow = 1 + 0.5 * (0.98 - 1)
    np.testing.assert_allclose(opt.get_slot(var, "slow").numpy(), [0.99, 1.99])
    opt.slow_step_size = 1.0  # routed to _set_hyper
    opt.apply_gradients([(grad, var)])
    opt.apply_gradients([(grad, var)])
    np.testing.assert_allclose(var.numpy(), [0.97, 1.97], rtol=1e-6)  # alpha = 1: plain inner
    with pytest.raises(InvalidHyperparameter):
        opt._set_hyper("slow_step_size", 0.0)


def test_own_slot_via_get_slot_inner_slots_via_get_slot_too():
    opt = Lookahead(registry.create("adam"))
    var = tf.Variable([1.0])
    assert opt.get_slot_names() == [] and opt.inner.get_slot_names() == []
    opt.apply_gradients([(tf.constant([0.5]), var)])
    assert opt.get_slot_names() == ["slow"]
    np.testing.assert_array_equal(opt.get_slot(var, "slow").numpy(), [1.0])  # synced at k only
    assert opt.slot_names_for_rule() == ("slow", "m", "v")
    assert opt.get_slot(var, "m") is opt.inner.get_slot(var, "m")


def test_config_round_trip():
    opt = Lookahead(registry.create("rmsprop", {"learning_rate": 0.02}), sync_period=4,
                    slow_step_size=0.3)
    config = opt.get_config()
    clone = Lookahead.from_config(config)
    again = clone.get_config()
    # the inner entry's class_name spelling varies with Keras' serializer; compare the content
    assert {k: v for k, v in again.items() if k != "inner"} == {k: v for k, v in config.items() if k != "inner"}
    assert again["inner"]["config"] == config["inner"]["config"]
    assert type(clone.inner) is registry.get("rmsprop")
    assert clone.inner.hyper_values()["learning_rate"] == pytest.approx(0.02)
    assert config["sync_period"] == 4.0 and config["slow_step_size"] == 0.3


def model_and_optimizer(seed):
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3, input_shape=(4,))])
    return model, Lookahead(registry.create("adam", {"learning_rate": 0.05}), sync_period=3)


def train(model, opt, x, y, steps):
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))


def test_checkpoint_round_trip_restores_both_optimizers(tmp_path):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(8, 4)), tf.float32)
    y = tf.constant(rng.normal(size=(8, 3)), tf.float32)
    model, opt = model_and_optimizer(0)
    train(model, opt, x, y, 4)  # one sync at step 3, step 4 after it: slow != var
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    saved = {(v.name, n): opt.get_slot(v, n).numpy().copy()
             for v in model.trainable_variables for n in opt.slot_names_for_rule()}

    restored_model, restored = model_and_optimizer(1)  # different initial weights
    tf.train.Checkpoint(model=restored_model, optimizer=restored).restore(path).assert_existing_objects_matched()
    restored._create_all_weights(restored_model.trainable_variables)  # deferred slot restores
    restored.inner._create_all_weights(restored_model.trainable_variables)
    assert int(restored.iterations.numpy()) == 4 and int(restored.inner.iterations.numpy()) == 4
    assert restored.get_slot_names() + restored.inner.get_slot_names() == ["slow", "m", "v"]
    index = {v.name: i for i, v in enumerate(model.trainable_variables)}
    for (name, slot), value in saved.items():
        var = restored_model.trainable_variables[index[name]]
        np.testing.assert_array_equal(restored.get_slot(var, slot).numpy(), value,
                                      err_msg=f"{name}/{slot}")
    train(model, opt, x, y, 3)
    train(restored_model, restored, x, y, 3)  # the next sync (step 6) uses the restored slow
    for a, b in zip(model.trainable_variables, restored_model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


# ----- in the registry: what the engine, the recorder and the run process use ----------------
def test_registry_creates_it_with_inner_hypers_and_options():
    opt = registry.create("lookahead", {"learning_rate": 0.05, "sync_period": 3},
                          {"inner": "sgd"})
    assert isinstance(opt, Lookahead) and type(opt.inner) is registry.get("sgd")
    assert [s.name for s in opt.hyperparameter_specs()] == [
        "sync_period", "slow_step_size", "learning_rate", "momentum"]
    assert opt.hyper_values() == {"sync_period": 3.0, "slow_step_size": 0.5,
                                  "learning_rate": 0.05, "momentum": 0.0}
    assert opt.spec("momentum") is opt.inner.spec("momentum")
    assert registry.option_defaults("lookahead") == {"inner": "adam"}
    assert not registry.is_rule("lookahead")


@pytest.mark.parametrize("inner", ["lookahead", "accumulation", "nope"])
def test_inner_must_be_a_plain_registered_rule(inner):
    with pytest.raises((ValueError, KeyError)):
        registry.validate_options("lookahead", {"inner": inner})
    with pytest.raises((ValueError, KeyError)):
        Lookahead(registry.create(inner))
    with pytest.raises(TypeError, match="only the registry resolves names"):
        Lookahead(inner)  # a wrapper takes an object; names are the registry's job


@pytest.mark.parametrize("wrapper", ["lookahead", "accumulation"])
def test_one_inner_check_for_names_and_objects(wrapper):
    """The registry (by name) and the constructors (by object) refuse with the same words."""
    cls = registry.get(wrapper)
    for inner in registry.WRAPPERS:
        with pytest.raises(ValueError) as by_name:
            registry.validate_options(wrapper, {"inner": inner})
        with pytest.raises(ValueError) as by_object:
            cls(inner=registry.create(inner))
        words = "cannot wrap itself" if inner == wrapper else f"{wrapper} wraps a plain rule"
        assert words in str(by_name.value) and words in str(by_object.value)


def test_from_config_resolves_the_inner_only_through_the_registry():
    config = registry.create("lookahead", {}, {"inner": "sgd"}).get_config()
    hostile = dict(config, inner={**config["inner"], "registered_name": None,
                                  "class_name": "os.system", "module": "os"})
    with pytest.raises(KeyError, match="not a registered optimizer class"):
        Lookahead.from_config(hostile)
    wrapped = dict(config, inner=tf_keras.optimizers.serialize(registry.create("lookahead")))
    with pytest.raises(ValueError, match="cannot wrap itself"):
        Lookahead.from_config(wrapped)
    accumulation = registry.create("accumulation", {}, {"inner": "sgd"}).get_config()
    with pytest.raises(KeyError):
        registry.from_config("accumulation", dict(accumulation, inner="os.system"))
    with pytest.raises(KeyError, match="not a registered optimizer class"):
        registry.get("accumulation").from_config(accumulation)  # "sgd": a registry name
    assert type(registry.from_config("accumulation", accumulation).inner) is registry.get("sgd")


def test_accumulation_refuses_lookahead_as_inner():
    with pytest.raises(ValueError, match="plain rule"):
        registry.validate_options("accumulation", {"inner": "lookahead"})


def test_live_hypers_validated_own_and_inner():
    opt = registry.create("lookahead", {}, {"inner": "adam"})
    var = tf.Variable([1.0, 2.0])
    opt.apply_gradients([(tf.constant([0.5, 0.5]), var)])
    opt._set_hyper("learning_rate", 0.125)  # inner's, assigned to its existing variable
    opt._set_hyper("slow_step_size", 0.25)
    assert opt.hyper_values()["learning_rate"] == 0.125 == opt.inner.hyper_values()["learning_rate"]
    assert opt.hyper_values()["slow_step_size"] == 0.25
    with pytest.raises(InvalidHyperparameter):
        opt._set_hyper("learning_rate", -1.0)
    with pytest.raises(InvalidHyperparameter):
        opt._set_hyper("sync_period", 0.0)
    with pytest.raises(KeyError):
        opt._set_hyper("momentum", 0.5)
    assert opt.hyper_values()["learning_rate"] == 0.125  # refused values change nothing


def test_slots_for_the_recorder_without_listing_inner_slots():
    opt = registry.create("lookahead", {}, {"inner": "adam"})
    var = tf.Variable([1.0, 2.0])
    opt._create_all_weights([var])  # what the engine does before tracing: inner slots too
    assert opt.slot_names_for_rule() == ("slow", "m", "v")
    assert opt.get_slot(var, "m") is opt.inner.get_slot(var, "m")
    assert opt.get_slot_names() == ["slow"]  # checkpoint-safe: inner slots not claimed twice


def test_run_config_refuses_hypergradients_for_lookahead():
    from settings.run_config import RunConfig

    RunConfig(optimizer="lookahead", options={"inner": "sgd"}, hyperparameters={"sync_period": 4})
    with pytest.raises(ValueError, match="not a pure update rule"):
        RunConfig(optimizer="lookahead", hypergradients=["learning_rate"])
