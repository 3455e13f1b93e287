"""Plugin migration report: which Keras 2 pieces of a plugin map where in Keras 3, with a
status per row, and the generated Keras 3 twin's parity for a pure-rule plugin (AdaBelief)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizer_plugins import plugin_discovery as plugins
from teaching import plugin_migration as pm

ROOT = Path(__file__).resolve().parents[1]


def bundled(class_name: str) -> type:
    return next(c.cls for c in pm.plugin_choices(ROOT / "plugins") if c.cls.__name__ == class_name)


class HandMomentum(tf_keras.optimizers.legacy.Optimizer):
    """Heavy-ball momentum written by hand (not a RuleOptimizer): v = m v - lr g; w += v."""

    def __init__(self, learning_rate=0.01, momentum=0.9, name="HandMomentum", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", learning_rate)
        self._set_hyper("momentum", momentum)

    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, "velocity")

    def _resource_apply_dense(self, grad, var, apply_state=None):
        v = self.get_slot(var, "velocity")
        v.assign(self._get_hyper("momentum", var.dtype) * v
                 - self._get_hyper("learning_rate", var.dtype) * grad)
        return var.assign_add(v)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        return self._resource_apply_dense(
            tf.convert_to_tensor(tf.IndexedSlices(grad, indices, tf.shape(var))), var)

    def get_config(self):
        config = super().get_config()
        config.update(learning_rate=self._serialize_hyperparameter("learning_rate"),
                      momentum=self._serialize_hyperparameter("momentum"))
        return config


class FusedSGD(tf_keras.optimizers.legacy.Optimizer):
    """Plain SGD through the fused in-place kernel (as stock Keras 2 SGD does)."""

    def __init__(self, learning_rate=0.01, name="FusedSGD", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", learning_rate)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        return tf.raw_ops.ResourceApplyGradientDescent(
            var=var.handle, alpha=self._get_hyper("learning_rate", var.dtype), delta=grad)


def by_piece(table):
    return {row["Keras 2 piece"]: row for row in table.to_dict("records")}


def test_adabelief_report_is_automatic_and_its_twin_agrees_in_float32_and_float64():
    adabelief = bundled("AdaBelief")
    rows = by_piece(pm.report(adabelief))
    for piece in ("_set_hyper('learning_rate')", "_set_hyper('beta_1')", "_set_hyper('beta_2')",
                  "_set_hyper('epsilon')", "_create_slots", "_prepare_local",
                  "_resource_apply_dense", "_resource_apply_sparse", "get_config",
                  "coefficients + update (pure rule)"):
        assert rows[piece]["status"] == pm.AUTOMATIC, piece
    assert rows["_set_hyper('epsilon')"]["Keras 3 piece"].startswith("plain attribute self.epsilon")
    assert rows["apply_gradients"]["status"] == pm.NOT_NEEDED
    assert "build(variables)" in rows["_create_slots"]["Keras 3 piece"]

    table = pm.twin_parity(adabelief, {"learning_rate": 0.01})
    assert set(table["dtype"]) == {"float32", "float64"}
    assert set(table["gradient"]) == {"dense", "sparse (IndexedSlices)"}
    # 3 weights + the m and s slots of each, per dtype
    assert len(table) == 2 * 9
    assert (table["quantity"] == "m of embedding").sum() == 2
    assert (table["quantity"] == "s of embedding").sum() == 2
    for dtype, tolerance in (("float32", 1e-6), ("float64", 1e-12)):
        part = table[table["dtype"] == dtype]
        assert part["max_abs_difference"].max() < tolerance
    assert table["agrees"].all()
    assert table[table["quantity"] == "kernel"]["max_abs_value"].min() > 0.0
    summary = pm.parity_summary(table)
    assert len(summary) == 4 and summary["agrees"].all()


def test_adabelief_first_step_moves_each_coordinate_by_lr_over_beta_1():
    # Step 1: m = (1 - b1) g, so m_hat = g and s_hat = b1**2 g**2 + eps / (1 - b2): a coordinate
    # with |g| >> sqrt(eps / (1 - b2)) ~ 3.2e-3 moves by lr / b1 against its gradient, whatever
    # its scale (here 0.02 / 0.5 = 0.04: 0.039991 for |g| = 0.3, 0.0399998 for 2, 0.04 for 50);
    # a zero gradient moves nothing.
    optimizer = bundled("AdaBelief")(learning_rate=0.02, beta_1=0.5, beta_2=0.999, epsilon=1e-8)
    start = np.array([1.0, -2.0, 0.5, 3.0])
    grad = np.array([0.3, -50.0, 2.0, 0.0])
    var = tf.Variable(start)
    optimizer.apply_gradients([(tf.constant(grad), var)])
    # _set_hyper keeps float32 variables: the float64 step computes with their values
    lr, b1, b2, eps = (float(np.float32(x)) for x in (0.02, 0.5, 0.999, 1e-8))
    m, s = (1 - b1) * grad, (1 - b2) * (b1 * grad)**2 + eps
    expected = start - lr * (m / (1 - b1)) / (np.sqrt(s / (1 - b2)) + eps)
    np.testing.assert_allclose(var.numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(start - var.numpy(), [0.04, -0.04, 0.04, 0.0], rtol=0, atol=1e-5)
    assert start[3] == var.numpy()[3]
    np.testing.assert_allclose(optimizer.get_slot(var, "m").numpy(), m, rtol=1e-12)
    np.testing.assert_allclose(optimizer.get_slot(var, "s").numpy(), s, rtol=1e-12)


def test_hand_written_optimizer_needs_manual_work_and_gets_no_twin():
    rows = by_piece(pm.report(HandMomentum))
    for piece in ("_set_hyper('learning_rate')", "_set_hyper('momentum')", "_create_slots",
                  "_resource_apply_dense", "_resource_apply_sparse", "get_config"):
        assert rows[piece]["status"] == pm.MANUAL, piece
        assert rows[piece]["defined in"] == "HandMomentum"
    assert rows["_prepare_local"]["status"] == pm.NOT_NEEDED
    assert "IndexedSlices" in rows["_resource_apply_sparse"]["Keras 3 piece"]
    assert "_serialize_hyperparameter" in rows["get_config"]["why"]
    assert "self.momentum" in rows["_set_hyper('momentum')"]["Keras 3 piece"]
    assert "coefficients + update (pure rule)" not in rows
    assert pm.twin_parity(HandMomentum) is None


def test_fused_kernel_is_flagged_not_differentiable():
    row = by_piece(pm.report(FusedSGD))["_resource_apply_dense"]
    assert row["status"] == pm.MANUAL and "not differentiable" in row["why"]


def test_bad_plugin_report_names_the_never_called_public_hooks():
    rows = by_piece(pm.report(bundled("BadMomentum")))
    assert rows["create_slots"]["status"] == pm.MANUAL
    assert "never calls create_slots" in rows["create_slots"]["why"]
    assert rows["self.momentum (plain attribute)"]["status"] == pm.NOT_NEEDED
    assert rows["_create_slots"]["status"] == pm.NOT_NEEDED  # never written: the mistake


@pytest.mark.parametrize("bad", [int, object, "AdaBelief", None, keras.optimizers.Adam],
                         ids=["int", "object", "str", "None", "keras3-Adam"])
def test_non_optimizer_is_refused_with_a_clear_error(bad):
    with pytest.raises(TypeError, match="tf_keras.optimizers.legacy.Optimizer"):
        pm.report(bad)
    with pytest.raises(TypeError, match="refused"):
        pm.twin_parity(bad)


def test_bad_steps_and_dtype_are_refused():
    with pytest.raises(ValueError, match="steps=0 refused"):
        pm.twin_parity(bundled("AdaBelief"), steps=0)
    with pytest.raises(ValueError, match="dtype='float16' refused"):
        pm.twin_parity(bundled("AdaBelief"), dtypes=("float16",))


def test_constructor_failure_is_reported_not_raised():
    class NeedsArgument(HandMomentum):
        def __init__(self, required, **kwargs):
            super().__init__(**kwargs)

    row = pm.report(NeedsArgument).iloc[0]
    assert row["status"] == pm.MANUAL and "constructor without arguments failed" in row["why"]


def test_choices_list_bundled_files_and_registered_plugins():
    labels = [c.label for c in pm.plugin_choices(ROOT / "plugins")]
    assert "good_optimizer.py: AdaBelief" in labels and "bad_optimizer.py: BadMomentum" in labels
    assert all(c.cls.__module__.startswith(plugins.MODULE_PREFIX)
               for c in pm.plugin_choices(ROOT / "plugins"))
    assert np.isnan(pm.worst(None))


def test_keras3_page_shows_the_plugin_report_and_parity(tmp_path, monkeypatch):
    from tests._pages import page_test

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("keras3", default_timeout=240).run()
    assert not at.exception, at.exception
    at.selectbox(key="k3_plugin").select("good_optimizer.py: AdaBelief").run()
    assert not at.exception, at.exception
    verdicts = [s.value for s in at.success if "generated Keras 3 twin" in s.value]
    assert verdicts and "largest difference 0" in verdicts[0]
    at.selectbox(key="k3_plugin").select("bad_optimizer.py: BadMomentum").run()
    assert not at.exception, at.exception
    assert any("not a RuleOptimizer" in i.value for i in at.info)
    report = [d.value for d in at.dataframe if "status" in d.value.columns][-1]
    assert "manual" in set(report["status"])
