"""Mixed precision lens and distribution experiment: the LossScaleOptimizer's documented
dynamic loss-scale rules, dtypes, mixed-vs-float32 agreement, what the wrapper forwards; the
2-replica run against a single-device run; the toy optimizer without an aggregation; the page."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from components.precision_figures import (live_hyper_figure, loss_scale_figure,
                                          policy_difference_figure, replica_gradients_figure)
from optimizers import registry
from teaching import mixed_precision as mp
from teaching.live_mixed_precision import LiveMixedRun
from tests.numpy_reference import REFERENCES

ROOT = Path(__file__).resolve().parents[1]
LSO = tf_keras.mixed_precision.LossScaleOptimizer


def _snapshot(model, inner):
    out = {}
    for var in model.trainable_variables:
        out[var.name] = var.numpy().copy()
        for slot in inner.get_slot_names():
            out[f"{var.name}/{slot}"] = inner.get_slot(var, slot).numpy().copy()
    return out


def test_skipped_step_leaves_weights_and_slots_unchanged_and_halves_the_scale():
    weights, batches = mp.data(3)
    with mp.policy("mixed_float16"):
        model = mp.build_model(weights)
        inner = registry.create("adam")
        opt = LSO(inner)

        def step(x, y, multiplier):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y)) * multiplier
                scaled = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return grads

        step(*batches[0], 1.0)
        assert float(opt.loss_scale) == 2.0 ** 15
        before, iterations = _snapshot(model, inner), int(inner.iterations)
        grads = step(*batches[1], mp.OVERFLOW_MULTIPLIER)
        assert not all(np.isfinite(g.numpy()).all() for g in grads)
        after = _snapshot(model, inner)
    assert float(opt.loss_scale) == 2.0 ** 14  # halved
    assert int(inner.iterations) == iterations + 1  # still counted (do_not_apply_fn)
    assert set(before) == set(after) and len(before) == 12  # 4 weights + 8 Adam slots
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def test_documented_dynamic_loss_scale_rules():
    var = tf.Variable([1.0])
    opt = LSO(registry.create("sgd"))
    assert (opt.initial_scale, opt.dynamic_growth_steps) == (2.0 ** 15, 2000)

    @tf.function
    def apply(n, grad):
        for _ in tf.range(n):
            opt.apply_gradients([(grad, var)])

    finite, infinite = tf.constant([1e-6]), tf.constant([np.inf], tf.float32)
    apply(tf.constant(1999), finite)
    assert float(opt.loss_scale) == 2.0 ** 15 and int(opt.dynamic_counter) == 1999
    apply(tf.constant(1), finite)
    assert float(opt.loss_scale) == 2.0 ** 16 and int(opt.dynamic_counter) == 0  # doubled
    apply(tf.constant(1), infinite)
    assert float(opt.loss_scale) == 2.0 ** 15  # halved
    floor = LSO(registry.create("sgd"), initial_scale=1.0)
    floor.apply_gradients([(infinite, tf.Variable([1.0]))])
    assert float(floor.loss_scale) == 1.0  # never below 1


def test_train_marks_the_forced_overflow_and_routes_the_lr_change():
    run = mp.train("mixed_float16", steps=12, overflow_at=(6,), lr_change=(9, 0.0005))
    table = run.steps.set_index("step")
    assert table.loc[6, "skipped"] and not table.loc[5, "skipped"]
    assert table.loc[6, "max_weight_change"] == 0.0 and table.loc[5, "max_weight_change"] > 0
    assert table.loc[6, "loss_scale_after"] == table.loc[6, "loss_scale_before"] / 2
    assert list(table["iterations"]) == list(range(1, 13))
    assert table.loc[8, "learning_rate"] == pytest.approx(0.001)
    assert table.loc[9, "learning_rate"] == pytest.approx(0.0005)
    assert tf_keras.mixed_precision.global_policy().name == "float32"


def test_growth_steps_double_the_scale():
    run = mp.train("mixed_float16", steps=6, growth_steps=3)
    assert list(run.steps["loss_scale_after"])[:3] == [2.0 ** 15, 2.0 ** 15, 2.0 ** 16]


@pytest.mark.parametrize("policy,compute", [("mixed_float16", "float16"),
                                            ("mixed_bfloat16", "bfloat16")])
def test_slots_are_float32_while_the_layers_compute_in_half_precision(policy, compute):
    table = mp.train(policy, steps=2).variables
    weights, slots = table[table["kind"] == "layer weight"], table[table["kind"] == "slot"]
    assert len(weights) == 4 and len(slots) == 8
    assert set(weights["dtype"]) == {"float32"} and set(slots["dtype"]) == {"float32"}
    assert set(weights["layer compute dtype"]) == {compute}
    assert set(weights["class"]) == {"AutoCastVariable"}
    assert table[table["kind"] == "activation"]["dtype"].item() == compute


def test_mixed_final_loss_is_within_tolerance_of_float32():
    table = mp.compare(steps=40).set_index("policy")
    assert table.loc["float32", "max_state_difference"] == 0.0
    for policy, tolerance in mp.FINAL_LOSS_TOLERANCE.items():
        row = table.loc[policy]
        assert row["relative_difference"] <= tolerance, (policy, row)
        assert row["max_state_difference"] > 0  # it really computed in half precision
        assert row["skipped_steps"] == 0


def test_policy_is_restored_after_an_error():
    with pytest.raises(RuntimeError):
        with mp.policy("mixed_bfloat16"):
            assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
            raise RuntimeError("boom")
    assert tf_keras.mixed_precision.global_policy().name == "float32"
    with pytest.raises(ValueError, match="policy="):
        mp.train("float16")


def test_what_the_loss_scale_optimizer_forwards():
    rows = mp.forwarding().set_index("expression")
    assert rows.loc["lso.learning_rate is inner._hyper['learning_rate']", "outcome"] == "True"
    assert rows.loc["lso.learning_rate = 0.005", "inner after"].startswith("learning_rate=0.005")
    assert "beta_1=0.8" in rows.loc["lso.beta_1 = 0.8", "inner after"]
    refused = rows.loc["lso.beta_1 = float('nan')"]
    assert refused["outcome"].startswith("InvalidHyperparameter") and "beta_1=0.8" in \
        refused["inner after"]
    assert rows.loc["lso._set_hyper('beta_2', 0.5)", "outcome"].startswith("AttributeError")
    assert "beta_2=0.999" in rows.loc["lso._set_hyper('beta_2', 0.5)", "inner after"]
    assert "beta_2=0.5" in rows.loc["lso.inner_optimizer._set_hyper('beta_2', 0.5)",
                                    "inner after"]
    assert rows.loc["lso.hyper_values()", "outcome"].startswith("AttributeError")
    assert rows.loc["lso.initial_scale, lso.dynamic_growth_steps", "outcome"] == "(32768.0, 2000)"


LIVE_CASES = [  # (optimizer, constructor hypers, changes, way)
    ("adam", {}, {"learning_rate": 0.02}, "lso.<name> = value"),
    ("adam", {}, {"learning_rate": 0.02, "beta_1": 0.5},
     "lso.inner_optimizer._set_hyper(name, value)"),
    ("adam", {}, {"beta_1": 0.6}, "lso.<name> = value"),
    ("sgd", {"momentum": 0.9}, {"learning_rate": 0.05}, "lso.<name> = value"),
]


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("optimizer,hypers,changes,way", LIVE_CASES,
                         ids=[f"{c[0]}-{'+'.join(c[2])}-{c[3][:9]}" for c in LIVE_CASES])
def test_live_change_through_the_wrapper_takes_effect_next_step_without_retrace(
        policy, optimizer, hypers, changes, way):
    run = LiveMixedRun(policy, optimizer, hypers, max_steps=6)
    old = run.advance(3).iloc[-1]
    for name, value in changes.items():
        run.set_hyper(name, value, way)
    before, used_hypers = run.state(), run.inner.hyper_values()
    assert {n: used_hypers[n] for n in changes} == pytest.approx(changes)
    row = run.advance(1).iloc[0]
    after = run.state()
    assert not row["skipped"] and row["iterations"] == 4
    assert run.tracing_count == 1  # assignments to hyperparameter variables: no retrace
    for name, value in changes.items():
        if f"{name} used" in row:
            assert row[f"{name} used"] == pytest.approx(value, rel=1e-7)
            assert old[f"{name} used"] != pytest.approx(value)  # the old value before it
    # NumPy reference of the step on the float32 master weights, with the new values
    reference = REFERENCES[optimizer]
    labels = [v.name.split(":")[0] for v in run.variables]
    slot_names = run.inner.get_slot_names()
    for label, grad in zip(labels, run.last_gradients):
        assert grad.dtype == np.float32
        slots = {s: before[f"{label}/{s}"] for s in slot_names}
        new_var, new_slots = reference(grad, before[label], slots, used_hypers, 4, {})
        np.testing.assert_allclose(after[label], new_var, rtol=1e-6, atol=1e-6, err_msg=label)
        assert not np.allclose(after[label], before[label])  # it moved
        for s in slot_names:
            np.testing.assert_allclose(after[f"{label}/{s}"], new_slots[s], rtol=1e-6,
                                       atol=1e-6, err_msg=f"{label}/{s}")


def test_live_run_refuses_bad_changes_and_keeps_the_old_value():
    run = LiveMixedRun("mixed_float16", "adam", max_steps=3)
    run.advance(1)
    with pytest.raises(ValueError, match="way="):
        run.set_hyper("learning_rate", 0.1, way="lso._set_hyper")
    with pytest.raises(AttributeError, match="name='rho' refused"):
        run.set_hyper("rho", 0.5)
    with pytest.raises(registry.InvalidHyperparameter, match="beta_1"):
        run.set_hyper("beta_1", float("nan"))
    assert run.advance(1).iloc[0]["beta_1 used"] == pytest.approx(0.9)
    assert run.tracing_count == 1 and run.changes == []
    with pytest.raises(ValueError, match="policy="):
        LiveMixedRun("float16")


def test_figures():
    run = mp.train("mixed_float16", steps=8, overflow_at=(4,))
    fig = loss_scale_figure(run.steps, "a <b>")
    skipped = [t for t in fig.data if t.name.startswith("skipped")][0]
    assert list(skipped.x) == [4] and list(skipped.y) == [2.0 ** 14]
    assert "&lt;b&gt;" in fig.layout.title.text
    assert len(policy_difference_figure({"float32": run.steps}).data) == 1
    import pandas as pd
    bars = replica_gradients_figure(pd.DataFrame(
        {"step": [1, 1, 1], "replica": ["replica 0", "replica 1", "all-reduced (SUM)"],
         "grad_norm": [1.0, 2.0, 2.5]}))
    assert [t.name for t in bars.data] == ["replica 0", "replica 1", "all-reduced (SUM)"]


def test_live_hyper_figure_draws_the_used_values_and_marks_the_change():
    import pandas as pd

    trace = pd.DataFrame({"step": [1, 2, 3], "loss": [0.5, 0.4, 0.3],
                          "learning_rate used": [0.001, 0.001, 0.004],
                          "beta_1 used": [0.9, 0.9, 0.9]})
    fig = live_hyper_figure(trace, pd.DataFrame({"before step": [3]}), "x <i>")
    lines = {t.name: list(t.y) for t in fig.data}
    assert lines["learning_rate used"] == [0.001, 0.001, 0.004] and lines["loss"] == [0.5, 0.4, 0.3]
    assert {shape.x0 for shape in fig.layout.shapes} == {2.5}  # between steps 2 and 3, both panels
    assert fig.layout.yaxis.type == "log" and "&lt;i&gt;" in fig.layout.title.text
    zero = live_hyper_figure(trace.assign(**{"beta_1 used": 0.0}))
    assert zero.layout.yaxis.type != "log"  # a zero would vanish on a log axis


# ----- distribution (a child process with two logical CPUs) ---------------------------------
@pytest.fixture(scope="module")
def distributed():
    from teaching import distribution

    return distribution.run_subprocess()


@pytest.mark.slow
def test_two_replicas_equal_one_device(distributed):
    assert distributed["num_replicas"] == 2
    assert distributed["max_state_difference"] <= 1e-6
    assert distributed["max_gradient_difference"] <= 1e-6
    names = {row["name"] for row in distributed["equivalence"]}
    assert names == {"kernel", "bias", "kernel/m", "kernel/v", "bias/m", "bias/v"}
    reduced = [r for r in distributed["replicas"] if r["replica"] == "all-reduced (SUM)"]
    np.testing.assert_allclose([r["loss"] for r in reduced], distributed["single_losses"],
                               rtol=1e-6)
    local = [r for r in distributed["replicas"] if r["replica"] == "replica 0"]
    assert all(r["grad_norm"] != a["grad_norm"] for r, a in zip(local, reduced))


@pytest.mark.slow
def test_hyperparameters_are_only_first_replica_and_slots_mirrored(distributed):
    rows = {r["variable"]: r for r in distributed["variables"]}
    hypers = [r for name, r in rows.items() if name.startswith("_hyper")]
    assert len(hypers) == 4
    for row in hypers + [rows["iterations"]]:
        assert (row["type"], row["aggregation"]) == ("MirroredVariable", "ONLY_FIRST_REPLICA")
    slots = [r for name, r in rows.items() if name.startswith("slot")]
    assert len(slots) == 4
    assert all(r["type"] == "MirroredVariable" and r["devices"].count("CPU") == 2
               for r in slots)


@pytest.mark.slow
def test_hyperparameter_without_aggregation(distributed):
    toy = {(r["strategy"], r["variable created with"]): r for r in distributed["toy"]}
    bare = toy[("CentralStorageStrategy", "tf.Variable")]
    assert bare["outcome"] == "ValueError"
    assert "You must specify an aggregation method to update a AggregatingVariable in " \
           "Replica Context" in bare["error"]
    fixed = toy[("CentralStorageStrategy", "add_weight")]
    assert fixed["outcome"] == "ok" and fixed["aggregation"] == "ONLY_FIRST_REPLICA"
    assert fixed["lr per copy"] == [pytest.approx(0.09)]
    mirrored = toy[("MirroredStrategy", "tf.Variable")]
    assert mirrored["outcome"] == "ok" and mirrored["aggregation"] == "NONE"
    assert mirrored["lr per copy"] == [pytest.approx(0.081)] * 2  # once per device of w


# ----- the page ---------------------------------------------------------------------------
def _page():
    from tests._pages import page_test

    at = page_test("precision_distribution", default_timeout=600)
    at.run()
    assert not at.exception, at.exception
    return at


def test_page_opens_and_shows_the_mixed_precision_numbers():
    at = _page()
    assert at.title[0].value == "Mixed precision & distribution"
    at.button(key="pd_run_mixed").click().run()
    assert not at.exception, at.exception
    assert int(at.metric[0].value) >= 1  # the forced overflow at least
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert any(t.get("name", "").startswith("skipped") for t in fig["data"])
    steps = at.dataframe[0].value
    assert bool(steps.set_index("step").loc[15, "skipped"])
    at.button(key="pd_run_forwarding").click().run()
    at.button(key="pd_run_compare").click().run()
    assert not at.exception, at.exception
    compare = at.dataframe[-1].value
    assert list(compare["policy"]) == list(mp.POLICIES)


@pytest.mark.slow
def test_page_shows_the_distribution_numbers():
    at = _page()
    at.button(key="pd_run_distribution").click().run()
    assert not at.exception, at.exception
    assert not at.error or "AggregatingVariable" in at.error[0].value
    labels = [m.label for m in at.metric]
    assert "max |2 replicas - 1 device| (weights, slots)" in labels
    value = float(at.metric[labels.index("max |2 replicas - 1 device| (weights, slots)")].value)
    assert value <= 1e-6
    assert any("must specify an aggregation method" in e.value for e in at.error)


def test_page_changes_the_learning_rate_live_without_retrace():
    at = _page()
    at.button(key="pd_live_train").click().run()
    at.number_input(key="pd_live_value_learning_rate").set_value(0.004).run()
    at.radio(key="pd_live_way").set_value("lso.inner_optimizer._set_hyper(name, value)").run()
    at.button(key="pd_live_apply").click().run()
    at.button(key="pd_live_train").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["steps taken"] == "10" and metrics["step function traced"] == "1 time(s)"
    trace = next(d.value for d in at.dataframe if "learning_rate used" in d.value.columns)
    used = trace.set_index("step")["learning_rate used"]
    assert used.loc[5] == pytest.approx(0.001) and used.loc[6] == pytest.approx(0.004)
    assert set(trace["tracing_count"]) == {1}
    at.selectbox(key="pd_live_name").select("beta_1").run()
    at.number_input(key="pd_live_value_beta_1").set_value(1.0).run()
    at.button(key="pd_live_apply").click().run()
    assert any("refused, old value kept" in e.value for e in at.error)
