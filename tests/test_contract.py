"""The contract check and plugin discovery, on the shipped examples and a broken fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer_plugins import contract, plugin_discovery as plugins
from optimizers import registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins_broken"
BUILTIN = ["adam", "sgd", "adamw", "rmsprop", "adagrad", "diffgrad", "accumulation", "lion",
           "adadelta", "adamax", "ftrl", "nadam"]
# Not "lamb" nor "adafactor": the contract's problem starts at var = 0, and both step in
# proportion to the weights' scale (LAMB: lr * ||var||, ratio 1 on the first step only;
# Adafactor: max(epsilon_2, RMS(var)) * lr), so with the default lr 1e-3 the weights grow about
# as 1.001**t: f 9 -> 8.976 (Lamb), 8.995 (Adafactor) after 300 steps. The contract's
# `differentiable` item also builds every slot shaped like the variable, which Adafactor's
# factored r, c are not. tests/test_keras3_algorithms.py checks both against Keras 3 instead.

GOOD_EXPECTED = {item: True for item in contract.ITEMS}
BAD_EXPECTED = {
    "underscore_methods": False,      # public create_slots / resource_apply_sparse
    "set_hyper": False,               # momentum is a plain attribute
    "slots_in_create_slots": False,   # velocity made lazily in _resource_apply_dense
    "config_roundtrip": False,        # get_config's "mom" is not a constructor argument
    "live_change_no_retrace": False,  # compiled step keeps momentum = 0.9
    "sparse_matches_dense": False,    # _resource_apply_sparse never implemented
    "loss_decreases": True,           # the dense maths is right
    "dense_path": True,               # not a RuleOptimizer: its own _resource_apply_dense
    "differentiable": False,          # plain OptimizerV2, no pure rule
}


@pytest.fixture
def clean_registry():
    saved = registry.snapshot()
    yield
    registry.restore(saved)


@pytest.fixture(scope="module")
def shipped():
    saved = registry.snapshot()
    reports = {Path(r.path).name: r for r in plugins.discover(ROOT / "plugins")}
    added = {k: registry.OPTIMIZERS[k] for k in registry.OPTIMIZERS if k not in saved[0]}
    registry.restore(saved)
    return reports, added


def results(report) -> dict[str, bool]:
    (entry,) = report.classes
    return {c.item: c.passed for c in entry.checks}


def test_discovery_finds_the_examples_and_the_template(shipped):
    reports, added = shipped
    assert sorted(reports) == ["bad_optimizer.py", "good_optimizer.py", "template_optimizer.py"]
    assert all(r.error is None for r in reports.values())
    assert [c.name for c in reports["good_optimizer.py"].classes] == ["AdaBelief"]
    assert [c.name for c in reports["bad_optimizer.py"].classes] == ["BadMomentum"]
    assert [c.name for c in reports["template_optimizer.py"].classes] == ["AccumulatedSGD"]
    assert sorted(added) == ["accumulated_sgd", "adabelief"]
    assert added["adabelief"].__name__ == "AdaBelief"


@pytest.mark.parametrize("item", list(contract.ITEMS))
def test_each_item_on_the_good_plugin(shipped, item):
    assert results(shipped[0]["good_optimizer.py"])[item] is GOOD_EXPECTED[item]


@pytest.mark.parametrize("item", list(contract.ITEMS))
def test_each_item_on_the_bad_plugin(shipped, item):
    assert results(shipped[0]["bad_optimizer.py"])[item] is BAD_EXPECTED[item]


def test_bad_plugin_details_name_the_mistakes(shipped):
    (entry,) = shipped[0]["bad_optimizer.py"].classes
    detail = {c.item: c.detail for c in entry.checks}
    assert "resource_apply_sparse, create_slots" in detail["underscore_methods"]
    assert "momentum (float attribute)" in detail["set_hyper"]
    assert "['velocity'] appeared only during a step" in detail["slots_in_create_slots"]
    assert "Unexpected keyword argument passed to optimizer: mom" in detail["config_roundtrip"]
    assert "traces 1 -> 1" in detail["live_change_no_retrace"]
    assert "still uses the old momentum" in detail["live_change_no_retrace"]
    assert "NotImplementedError" in detail["sparse_matches_dense"]
    assert not entry.registered and entry.note.startswith("not registered: failed underscore_methods")


# Checks a built-in fails at Keras's own defaults: Adadelta's learning_rate=0.001 (Keras 2's
# default; the paper's is 1.0) moves f from 9 to 8.991 in 300 steps, short of the 1% asked.
FAILS_AT_KERAS_DEFAULTS = {"adadelta": {"loss_decreases"}}


@pytest.mark.parametrize("name", BUILTIN)
def test_every_registry_optimizer_passes_the_contract(name):
    failed = [c for c in contract.check_optimizer(registry.get(name)) if not c.passed]
    assert {c.item for c in failed} == FAILS_AT_KERAS_DEFAULTS.get(name, set()), failed


def test_keras_adam_fails_set_hyper_and_differentiability():
    import tf_keras

    checks = {c.item: c for c in contract.check_optimizer(tf_keras.optimizers.legacy.Adam)}
    assert checks["underscore_methods"].passed and checks["sparse_matches_dense"].passed
    assert not checks["set_hyper"].passed and "epsilon (float attribute)" in checks["set_hyper"].detail
    assert not checks["live_change_no_retrace"].passed  # epsilon change ignored once compiled
    assert "old epsilon" in checks["live_change_no_retrace"].detail
    assert not checks["differentiable"].passed


def test_raising_plugin_is_reported_and_the_rest_loads(clean_registry):
    reports = {Path(r.path).name: r for r in plugins.discover(FIXTURES)}
    assert sorted(reports) == ["raises_on_import.py", "sign_sgd.py"]
    broken = reports["raises_on_import.py"]
    assert broken.classes == [] and "RuntimeError: this plugin is broken on purpose" in broken.error
    (entry,) = reports["sign_sgd.py"].classes
    assert entry.passed and entry.registered
    assert registry.get("signsgd_fixture").__name__ == "SignSGD"
    assert registry.create("signsgd_fixture").hyper_values() == {"learning_rate": 0.001}
    again = plugins.discover(FIXTURES)  # imported once per process; registration idempotent
    assert again[1].classes[0].note == "already registered"


def test_plugins_dir_from_flag_env_or_default(tmp_path):
    assert plugins.plugins_dir(["--plugins", str(tmp_path)], {}) == tmp_path.resolve()
    assert plugins.plugins_dir([], {plugins.ENV_VAR: str(tmp_path)}) == tmp_path.resolve()
    assert plugins.plugins_dir(["--plugins", str(tmp_path)], {plugins.ENV_VAR: "/elsewhere"}) == tmp_path.resolve()
    assert plugins.plugins_dir([], {}) == ROOT / "plugins"
    assert plugins.discover(tmp_path / "missing") == []


def test_ensure_registered_discovers_on_demand(clean_registry, monkeypatch):
    monkeypatch.setenv(plugins.ENV_VAR, str(FIXTURES))
    if "signsgd_fixture" in registry.OPTIMIZERS:
        registry.unregister("signsgd_fixture")
    plugins.ensure_registered("signsgd_fixture")
    assert registry.get("signsgd_fixture").__name__ == "SignSGD"
    with pytest.raises(KeyError):
        plugins.ensure_registered("raises_on_import")


def test_the_dense_path_item_says_which_code_ran():
    """A subclass of SGD that changes `update` runs its own rule (the inherited fused momentum
    kernel computes SGD's rule, not this one), and the report says so; SGD itself runs the
    kernel; a subclass that vouches for its kernel (defines `fused_kernel`) runs it."""
    from optimizers.sgd import SGD

    class SignSGD(SGD):
        def update(self, grad, var, slots, coeffs):
            return var - coeffs["lr"] * tf_sign(grad), slots

    def tf_sign(x):
        import tensorflow as tf
        return tf.sign(x)

    passed, detail = contract.check_dense_path(SignSGD)
    assert passed and detail.startswith("dense updates run the class's own rule")
    assert "its rule differs from the kernel's" in detail
    passed, detail = contract.check_dense_path(SGD)
    assert passed and "fused kernel ResourceApplyGradientDescent" in detail, detail
    assert "SGD.update" in detail
