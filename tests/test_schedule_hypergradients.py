"""Hyper-gradients with respect to learning-rate SCHEDULE parameters (`lr_schedule.<param>`).

The learning rate of step t is schedule(params, t - 1) / (1 + decay (t - 1)) (OptimizerV2
`_decayed_lr`); forward mode (tangents through `schedules.differentiable`), reverse mode over the
whole trajectory and central finite differences of the validation loss must agree (Franceschi
et al. 2017, sec. 3), on a float64 tanh MLP as in tests/test_hypergradients.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from hypergrad.forward import ForwardModeTrainer
from hypergrad.parameters import ParameterPlan
from hypergrad.reverse import central_difference, read_state, relative_error, reverse_hypergradient
from optimizers import registry
from optimizers.keras_schedules import schedule_from_config
from schedules.live import LiveSchedule

STEPS = 20
EXPONENTIAL = {"class_name": "ExponentialDecay",
               "config": {"initial_learning_rate": 0.05, "decay_steps": 6, "decay_rate": 0.7}}
COSINE_WARMUP = {"class_name": "CosineDecay",
                 "config": {"initial_learning_rate": 0.01, "decay_steps": 15, "alpha": 0.1,
                            "warmup_target": 0.08, "warmup_steps": 6}}
POLYNOMIAL = {"class_name": "PolynomialDecay",  # reaches end_learning_rate at step 12 < 20
              "config": {"initial_learning_rate": 0.08, "decay_steps": 12,
                         "end_learning_rate": 0.01, "power": 2.0}}
# case -> (optimizer, hypers, schedule, legacy decay, followed)
CASES = {
    "adam-exponential": ("adam", {}, EXPONENTIAL, 0.02,
                         ["lr_schedule.initial_learning_rate", "lr_schedule.decay_rate",
                          "beta_1"]),
    "sgd-exponential": ("sgd", {"momentum": 0.5}, EXPONENTIAL, 0.0,
                        ["lr_schedule.initial_learning_rate", "lr_schedule.decay_rate"]),
    "adam-cosine-warmup": ("adam", {}, COSINE_WARMUP, 0.0,
                           ["lr_schedule.warmup_target", "lr_schedule.alpha",
                            "lr_schedule.initial_learning_rate"]),
    "sgd-cosine-warmup": ("sgd", {"momentum": 0.5}, COSINE_WARMUP, 0.01,
                          ["lr_schedule.warmup_target", "lr_schedule.alpha"]),
    "adam-polynomial": ("adam", {}, POLYNOMIAL, 0.0,
                        ["lr_schedule.end_learning_rate", "lr_schedule.power"]),
    "sgd-polynomial": ("sgd", {"momentum": 0.5}, POLYNOMIAL, 0.0,
                       ["lr_schedule.end_learning_rate", "lr_schedule.power",
                        "lr_schedule.initial_learning_rate"]),
    "adam-piecewise": ("adam", {}, {"class_name": "PiecewiseConstantDecay",
                                    "config": {"boundaries": [5, 12],
                                               "values": [0.05, 0.02, 0.01]}}, 0.0,
                       ["lr_schedule.values.0", "lr_schedule.values.1", "lr_schedule.values.2"]),
    "adam-inverse-time": ("adam", {}, {"class_name": "InverseTimeDecay",
                                       "config": {"initial_learning_rate": 0.05,
                                                  "decay_steps": 4, "decay_rate": 0.5}}, 0.0,
                          ["lr_schedule.decay_rate"]),
    "sgd-restarts": ("sgd", {"momentum": 0.5}, {"class_name": "CosineDecayRestarts",
                                               "config": {"initial_learning_rate": 0.2,
                                                          "first_decay_steps": 5, "t_mul": 1.5,
                                                          "m_mul": 0.8, "alpha": 0.05}}, 0.0,
                     ["lr_schedule.t_mul", "lr_schedule.m_mul", "lr_schedule.alpha"]),
}


def make_problem(optimizer, hypers, schedule, decay, live=False, seed=0):
    """A 5-6-3 tanh model in float64, the optimizer with `schedule` as its learning rate (a
    plain tf_keras schedule, or the run's `LiveSchedule` with variables) and legacy `decay`."""
    tf_keras.backend.set_floatx("float64")
    try:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(160, 5))
        y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 0.8)
        tensors = [tf.constant(a) for a in (x[:120], y[:120], x[120:], y[120:])]
        tf_keras.utils.set_random_seed(seed)
        model = tf_keras.Sequential([tf_keras.layers.Dense(6, activation="tanh", input_shape=(5,)),
                                     tf_keras.layers.Dense(3)])
        opt = registry.create(optimizer, hypers)
        if schedule is not None:
            value = LiveSchedule(schedule).schedule if live else schedule_from_config(
                "lr_schedule", schedule)
            opt._set_hyper("learning_rate", value)
        opt._initial_decay = decay  # what OptimizerV2.__init__ does with decay=
        opt._create_all_weights(model.trainable_variables)
    finally:
        tf_keras.backend.set_floatx("float32")
    batches = [rng.choice(120, 24, replace=False).astype("int32") for _ in range(STEPS)]
    return model, opt, tensors, batches


def three_ways(model, opt, tensors, batches, followed):
    xt, yt, xv, yv = tensors
    start = read_state(model, opt)
    trainer = ForwardModeTrainer(model, opt, followed, *tensors)
    for index in batches:
        trainer.step(index)
    _, forward, _ = trainer.hypergradients()
    window = [(tf.gather(xt, i), tf.gather(yt, i)) for i in batches]
    reverse = reverse_hypergradient(model, opt, start, window, followed, xv, yv)
    finite = central_difference(model, opt, start, window, followed, xv, yv, relative_step=1e-5)
    return trainer, forward, reverse, finite


@pytest.mark.parametrize("case", list(CASES))
def test_forward_equals_reverse_and_finite_differences(case):
    optimizer, hypers, schedule, decay, followed = CASES[case]
    model, opt, tensors, batches = make_problem(optimizer, hypers, schedule, decay)
    trainer, forward, reverse, finite = three_ways(model, opt, tensors, batches, followed)
    assert trainer.traces == 1
    for name in followed:
        assert np.isfinite(forward[name]) and abs(forward[name]) > 1e-8, (name, forward)
        assert relative_error(forward[name], reverse[name]) < 1e-10, (name, forward, reverse)
        assert relative_error(forward[name], finite[name]) < 1e-6, (name, forward, finite)


def test_piecewise_value_never_in_effect_has_zero_hypergradient():
    schedule = {"class_name": "PiecewiseConstantDecay",
                "config": {"boundaries": [5, 100], "values": [0.05, 0.02, 0.01]}}
    model, opt, tensors, batches = make_problem("adam", {}, schedule, 0.0)
    _, forward, reverse, _ = three_ways(model, opt, tensors, batches,
                                        ["lr_schedule.values.1", "lr_schedule.values.2"])
    assert forward["lr_schedule.values.2"] == 0.0 == reverse["lr_schedule.values.2"]
    assert forward["lr_schedule.values.1"] != 0.0


def test_trains_exactly_like_apply_gradients_with_schedule_and_decay():
    """The forward-mode step uses the learning rate `_decayed_lr` gives at every step. Float64
    schedule parameters (NumPy scalars) so Keras computes the schedule in float64 too."""
    schedule = tf_keras.optimizers.schedules.CosineDecay(
        np.float64(0.01), 15, alpha=np.float64(0.1), warmup_target=np.float64(0.08),
        warmup_steps=6)
    runs = []
    for _ in range(2):
        model, opt, tensors, batches = make_problem("adam", {}, None, 0.0)
        opt._set_hyper("learning_rate", schedule)
        opt._initial_decay = 0.02
        runs.append((model, opt))
    (model, opt), (twin, twin_opt) = runs
    xt, yt = tensors[:2]
    trainer = ForwardModeTrainer(model, opt, ["beta_1"], *tensors)
    for index in batches:
        trainer.step(index)
        x, y = tf.gather(xt, index), tf.gather(yt, index)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, twin(x)))
        grads = tape.gradient(loss, twin.trainable_variables)
        twin_opt.apply_gradients(zip(grads, twin.trainable_variables))
    for a, b in zip(model.trainable_variables, twin.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)
    assert int(opt.iterations.numpy()) == STEPS


def test_live_schedule_variables_are_read_and_autotuned_without_retrace():
    """A run's `LiveSchedule` keeps its numbers in variables: the plan differentiates them,
    an assignment (a user's change or auto-tune) takes effect at the next step, no retrace."""
    model, opt, tensors, batches = make_problem("sgd", {"momentum": 0.5}, EXPONENTIAL, 0.0,
                                                live=True)
    trainer = ForwardModeTrainer(model, opt, ["lr_schedule.decay_rate"], *tensors)
    plan = trainer.plan
    live_var = opt._hyper["learning_rate"].decay_rate
    assert plan.schedule_variables["lr_schedule.decay_rate"] is live_var and not plan.owned
    for index in batches[:5]:
        trainer.step(index)
    rates = plan.learning_rates(3, start=5)
    assert rates[0] == pytest.approx(0.05 * 0.7 ** (5 / 6), rel=1e-6)  # float32-held params
    plan.set_value("lr_schedule.decay_rate", 0.5)
    assert float(live_var.numpy()) == 0.5
    assert opt._hyper["learning_rate"].get_config()["decay_rate"] == 0.5
    assert plan.learning_rates(1, start=5)[0] == pytest.approx(0.05 * 0.5 ** (5 / 6), rel=1e-6)
    before = [v.numpy() for v in model.trainable_variables]
    for index in batches[5:8]:
        trainer.step(index)
    assert trainer.traces == 1
    assert any(np.abs(a - v.numpy()).max() > 0 for a, v in zip(before, model.trainable_variables))


def test_one_step_equals_exact_after_the_first_update():
    model, opt, tensors, batches = make_problem("adam", {}, COSINE_WARMUP, 0.01)
    followed = ["lr_schedule.warmup_target", "lr_schedule.initial_learning_rate"]
    trainer = ForwardModeTrainer(model, opt, followed, *tensors)
    trainer.step(batches[0])
    _, exact, one_step = trainer.hypergradients()
    # step 1 is at iterations 0: lr = initial_learning_rate exactly, so d/dwarmup_target = 0
    assert exact["lr_schedule.warmup_target"] == 0.0
    assert one_step["lr_schedule.initial_learning_rate"] == pytest.approx(
        exact["lr_schedule.initial_learning_rate"], rel=1e-12)


def test_plan_names_labels_specs_and_refusals():
    model, opt, tensors, _ = make_problem("adam", {}, COSINE_WARMUP, 0.0)
    plan = ParameterPlan(opt, tf.float64)
    assert plan.names == ["beta_1", "beta_2", "epsilon", "lr_schedule.initial_learning_rate",
                          "lr_schedule.alpha", "lr_schedule.warmup_target"]
    assert plan.label("lr_schedule.alpha") == "lr_schedule.alpha (CosineDecay)"
    spec = plan.spec("lr_schedule.warmup_target")
    assert spec.default == pytest.approx(0.08) and spec.log_scale
    with pytest.raises(KeyError, match="CosineDecay schedule; follow its parameters"):
        ForwardModeTrainer(model, opt, ["learning_rate"], *tensors)
    with pytest.raises(KeyError, match="lr_schedule.warmup_steps"):
        ForwardModeTrainer(model, opt, ["lr_schedule.warmup_steps"], *tensors)
    plain_model, plain_opt, plain_tensors, _ = make_problem("sgd", {}, None, 0.0)
    with pytest.raises(KeyError, match="the learning rate is not a schedule"):
        ForwardModeTrainer(plain_model, plain_opt, ["lr_schedule.decay_rate"], *plain_tensors)


def test_constant_learning_rate_with_legacy_decay():
    """No schedule: d/dlearning_rate flows through the decay factor 1 / (1 + decay (t - 1))
    (before, the decayed value at the current step was held for every step)."""
    model, opt, tensors, batches = make_problem("sgd", {"learning_rate": 0.2, "momentum": 0.5},
                                                None, 0.05)
    _, forward, reverse, finite = three_ways(model, opt, tensors, batches, ["learning_rate"])
    assert relative_error(forward["learning_rate"], reverse["learning_rate"]) < 1e-10
    assert relative_error(forward["learning_rate"], finite["learning_rate"]) < 1e-6


# ----- the correctness check, its panel and the figures -----------------------------------------
def test_correctness_check_has_a_row_per_schedule_parameter(capsys):
    import json

    import pandas as pd

    from hypergrad import correctness

    assert correctness.main(["--optimizer", "sgd", "--steps", "15", "--hypers",
                             json.dumps({"momentum": 0.5}), "--lr-schedule",
                             json.dumps(EXPONENTIAL), "--decay", "0.01"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    table = pd.DataFrame(result["rows"])
    assert list(table["hyperparameter"]) == [
        "momentum", "lr_schedule.initial_learning_rate", "lr_schedule.decay_rate"]
    assert result["passed"] and table["passed"].all()
    assert (table["rel_err_forward_reverse"] <= 1e-10).all()
    assert (table["rel_err_forward_fd"] <= 1e-6).all()
    assert (table["forward"].abs() > 1e-6).all()
    assert result["labels"]["lr_schedule.decay_rate"] == "lr_schedule.decay_rate (ExponentialDecay)"
    assert result["learning_rate"].startswith("ExponentialDecay(initial_learning_rate=0.05")
    assert result["learning_rate"].endswith("/ (1 + 0.01 t)")


def fake_schedule_grads():
    import pandas as pd

    rows = []
    for step in (1, 5, 10):
        rows.append((step, "lr_schedule.decay_rate", -0.5 * step, -0.4 * step, None, 1.0))
        rows.append((step, "beta_1", 0.1, 0.1, 0.1 if step == 10 else None, 1.0))
    return pd.DataFrame(rows, columns=["step", "name", "exact", "one_step", "reverse", "val_loss"])


def test_figure_titles_and_hover_say_which_schedule():
    from components import hypergrad_figures as hf

    labels = {n: hf.parameter_label(n, EXPONENTIAL) for n in ("lr_schedule.decay_rate", "beta_1")}
    assert labels == {"lr_schedule.decay_rate": "lr_schedule.decay_rate (ExponentialDecay)",
                      "beta_1": "beta_1"}
    fig = hf.hypergradient_figure(fake_schedule_grads(), labels=labels)
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("dE_val/dlr_schedule.decay_rate (ExponentialDecay)")
    assert "sign agreement 100%" in titles[0] and titles[1].startswith("dE_val/dbeta_1")
    assert "(ExponentialDecay) exact" in fig.data[0].hovertemplate
    assert list(fig.data[0].y) == [-0.5, -2.5, -5.0]
    specs = hf.schedule_specs(EXPONENTIAL)
    assert set(specs) == {"lr_schedule.initial_learning_rate", "lr_schedule.decay_rate"}
    assert specs["lr_schedule.initial_learning_rate"].log_scale
    assert specs["lr_schedule.decay_rate"].default == 0.7
    assert hf.learning_rate_text(None, 0.0) == "constant"
    table = hf.correctness_table({"rows": [{"hyperparameter": "lr_schedule.decay_rate"}],
                                  "labels": labels})
    assert list(table["hyperparameter"]) == ["lr_schedule.decay_rate (ExponentialDecay)"]


def test_page_shows_schedule_parameters_and_their_check(tmp_path, monkeypatch):
    import json

    from components import correctness_runner
    from runs.store.run_store import RunStore
    from settings.run_config import RunConfig
    from tests._pages import page_test

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore(tmp_path / "runs.sqlite")
    config = RunConfig(steps=20, lr_schedule=EXPONENTIAL,
                       hypergradients=["lr_schedule.decay_rate", "beta_1"])
    run_id = store.create_run(config.to_json_dict())
    store.append(run_id, hypergradients=list(fake_schedule_grads().itertuples(index=False,
                                                                              name=None)),
                 step=10)
    store.set_status(run_id, "finished", "finished 20 steps")
    stored = store.run(run_id)["config"]
    key = f"hg_check_{correctness_runner.cache_key(stored)}"
    at = page_test("hypergrad", default_timeout=60)
    at.session_state[key] = {  # a finished check of this configuration (no TF in the test)
        "rows": [{"hyperparameter": "lr_schedule.decay_rate", "forward": -1.5, "reverse": -1.5,
                  "finite_difference": -1.5000001, "rel_err_forward_reverse": 1e-15,
                  "rel_err_forward_fd": 7e-8, "passed": True}],
        "passed": True, "labels": {"lr_schedule.decay_rate":
                                   "lr_schedule.decay_rate (ExponentialDecay)"}}
    at.session_state["hg_run"] = run_id  # another session's run, opened view only
    at.run()
    assert not at.exception, at.exception
    grads = json.loads(at.get("plotly_chart")[0].proto.spec)
    titles = [a["text"] for a in grads["layout"]["annotations"]]
    assert any(t.startswith("dE_val/dlr_schedule.decay_rate (ExponentialDecay)") for t in titles)
    assert at.toggle(key=f"hg_auto_{run_id}_lr_schedule.decay_rate").label == (
        "auto-tune lr_schedule.decay_rate (ExponentialDecay)")
    assert any("ExponentialDecay(initial_learning_rate=0.05" in c.value for c in at.caption)
    frame = at.dataframe[0].value
    assert list(frame["hyperparameter"]) == ["lr_schedule.decay_rate (ExponentialDecay)"]
    assert any("PASS · all 1 parameters" in s.value for s in at.success)


# ----- a live run (worker, engine with a LiveSchedule, HyperStepper) -----------------------------
def test_a_run_follows_autotunes_and_slices_a_schedule_parameter(tmp_path):
    from runs.process import worker
    from runs.store.run_store import RunStore
    from settings.run_config import RunConfig

    store = RunStore(tmp_path / "runs.sqlite")
    schedule = {"class_name": "ExponentialDecay",
                "config": {"initial_learning_rate": 0.01, "decay_steps": 10, "decay_rate": 0.8}}
    config = RunConfig(optimizer="adam", dataset="digits", model="mlp", steps=30, eval_every=10,
                       lr_schedule=schedule, decay=0.001,
                       hypergradients=["lr_schedule.decay_rate", "lr_schedule.initial_learning_rate"],
                       hypergradient_every=5, reverse_horizon=5, reverse_every=10,
                       autotune={"lr_schedule.decay_rate": 0.5}, autotune_every=10)
    run_id = store.create_run(config.to_json_dict())
    slice_id = store.send_command(run_id, "response_slice",
                                  {"name": "lr_schedule.initial_learning_rate", "horizon": 5,
                                   "points": 5})
    status = worker.train(run_id, store)
    run = store.run(run_id)
    assert status == "finished", run["message"]
    assert run["traces"] == 1  # auto-tune assigns the schedule's variable: no retrace
    grads = store.hypergradients(run_id)
    assert set(grads["name"]) == {"lr_schedule.decay_rate", "lr_schedule.initial_learning_rate"}
    assert np.isfinite(grads[["exact", "one_step"]].to_numpy()).all()
    # step 1 uses lr = initial_learning_rate (iterations 0): d/d decay_rate is exactly 0
    first = grads[(grads["step"] == 1) & (grads["name"] == "lr_schedule.decay_rate")]
    assert float(first["exact"].iloc[0]) == 0.0
    later = grads[(grads["step"] == 30) & (grads["name"] == "lr_schedule.decay_rate")]
    assert float(later["exact"].iloc[0]) != 0.0
    reverse = grads.dropna(subset=["reverse"])
    assert sorted(set(reverse["step"])) == [10, 20, 30] and np.isfinite(reverse["reverse"]).all()
    changes = store.hyper_changes(run_id)
    auto = changes[changes["source"] == "auto-tune"]
    assert set(auto["name"]) == {"lr_schedule.decay_rate"} and len(auto) >= 1
    assert all(0.0 < float(v) <= 1.0 for v in auto["new"])
    commands = store.commands(run_id).set_index("id")
    assert commands.loc[slice_id, "status"] == "done", commands.loc[slice_id, "message"]
    rows = store.response_slices(run_id, slice_id)
    assert len(rows) == 5 and rows["center"].sum() == 1 and np.isfinite(rows["loss"]).all()
