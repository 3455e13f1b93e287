"""Training-dynamics diagnostics (`engine.diagnostics`) against explicit references.

* sharpness: on logistic regression of breast_cancer (62 parameters, float64) the recorded
  lambda_1(H) and lambda_1(P^-1 H) equal `numpy.linalg.eigvalsh`'s largest eigenvalue of the
  Hessian formed explicitly (and of D H D, D = P^(-1/2), P from the slots by a NumPy formula)
  to 1e-6, for SGD, Adam (and AMSGrad), RMSprop (plain and centered with momentum);
* update ratio: against weights read before and after a step;
* noise scale: against per-example gradients of the softmax regression written out in NumPy
  (x_i (p_i - e_y)^T), and against the paper's two-batch estimator;
* the run loop records them, the store reads them, the export writes them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from components import dynamics_figures as figs
from engine.diagnostics import catalog
from engine.diagnostics.noise_scale import estimates
from engine.diagnostics.recorder import Diagnostics
from engine.diagnostics.sharpness import lanczos_top
from engine.models import variable_label
from engine.train_step import Engine, cross_entropy
from runs.process.handlers import HANDLERS
from runs.process.run_loop import RunLoop
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

CASES = {  # name -> (optimizer, options, hyperparameters)
    "sgd": ("sgd", {}, {"learning_rate": 0.1}),
    "adam": ("adam", {}, {"learning_rate": 0.01}),
    "amsgrad": ("adam", {"amsgrad": True}, {"learning_rate": 0.01}),
    "rmsprop": ("rmsprop", {}, {"learning_rate": 0.01}),
    "rmsprop-centered": ("rmsprop", {"centered": True},
                         {"learning_rate": 0.01, "momentum": 0.5}),
}


def small_engine(case: str, dataset: str = "breast_cancer") -> Engine:
    optimizer, options, hypers = CASES[case]
    config = RunConfig(optimizer=optimizer, options=options, hyperparameters=hypers,
                       dataset=dataset, model="logistic", dtype="float64", batch_size=32,
                       sharpness="on", sharpness_every=1, noise_scale="on", noise_scale_every=1)
    engine = Engine(config, "/CPU:0")
    for _ in range(4):
        engine.step(record=False)
    return engine


def explicit_hessian(engine: Engine, x: tf.Tensor, y: tf.Tensor) -> np.ndarray:
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = cross_entropy(y, engine.model(x, training=False))
        flat = tf.concat([tf.reshape(g, [-1]) for g in inner.gradient(loss, engine.variables)], 0)
    blocks = outer.jacobian(flat, engine.variables)
    hessian = np.concatenate([np.reshape(b.numpy(), (flat.shape[0], -1)) for b in blocks], 1)
    return (hessian + hessian.T) / 2


def numpy_preconditioner(engine: Engine) -> np.ndarray | None:
    """P of the optimizer's last step, from its slots (see `sharpness.preconditioner`)."""
    opt, config = engine.optimizer, engine.config
    hypers = opt.hyper_values()
    slot = lambda name: np.concatenate([opt.get_slot(v, name).numpy().ravel()  # noqa: E731
                                        for v in engine.variables])
    if config.optimizer == "adam":
        t = float(opt.iterations.numpy())
        b1, b2 = float(opt._get_hyper("beta_1").numpy()), float(opt._get_hyper("beta_2").numpy())
        v = slot("vhat" if config.options.get("amsgrad") else "v")
        eps = float(opt._get_hyper("epsilon").numpy())
        return (1 - b1 ** t) / np.sqrt(1 - b2 ** t) * (np.sqrt(v) + eps)
    if config.optimizer == "rmsprop":
        eps = float(opt._get_hyper("epsilon").numpy())
        denominator = slot("rms") - (slot("mg") ** 2 if config.options.get("centered") else 0)
        if hypers["momentum"] > 0:
            return np.sqrt(denominator + eps)
        return np.sqrt(denominator) + eps
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_sharpness_equals_the_top_eigenvalue_of_the_explicit_hessian(case):
    engine = small_engine(case)
    diagnostics = Diagnostics(engine)
    rows = {r.name: r.value for r in diagnostics.sharpness_rows(5)}
    x, y = diagnostics.sharpness_batch()
    hessian = explicit_hessian(engine, x, y)
    assert hessian.shape == (62, 62)
    top = np.linalg.eigvalsh(hessian)[-1]
    assert abs(rows[catalog.SHARPNESS] - top) <= 1e-6 * max(1.0, abs(top)), (rows, top)
    p = numpy_preconditioner(engine)
    if p is None:
        assert catalog.PRECONDITIONED not in rows
        return
    d = 1 / np.sqrt(p)
    top_p = np.linalg.eigvalsh(d[:, None] * hessian * d[None, :])[-1]
    # the preconditioned spectrum is spread wide (tiny second moments): still exact to 1e-6
    assert abs(rows[catalog.PRECONDITIONED] - top_p) <= 1e-6 * max(1.0, abs(top_p)), \
        (rows, top_p)
    assert top_p > top  # Adam/RMSprop's P < 1 here: the preconditioned sharpness is larger


def test_thresholds_follow_the_papers():
    assert catalog.sharpness_threshold("sgd", {"momentum": 0.0}, {}, 0.01) == pytest.approx(200)
    assert catalog.sharpness_threshold("sgd", {"momentum": 0.9}, {}, 0.01) == pytest.approx(380)
    assert catalog.sharpness_threshold("sgd", {"momentum": 0.9}, {"nesterov": True}, 0.01) \
        == pytest.approx(3.8 / 2.8 / 0.01)
    assert catalog.sharpness_threshold("adam", {}, {}, 0.01) is None
    assert catalog.preconditioned_threshold("adam", {"beta_1": 0.9}, 0.001) == \
        pytest.approx(38_000)  # 38 / lr
    assert catalog.preconditioned_threshold("rmsprop", {"momentum": 0.0}, 0.01) == \
        pytest.approx(200)
    assert catalog.preconditioned_threshold("sgd", {}, 0.01) is None


def test_lanczos_is_exact_once_it_spans_the_space():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((30, 30))
    a = a + a.T
    value, vector = lanczos_top(lambda v: a @ v, 30, 30)
    assert value == pytest.approx(np.linalg.eigvalsh(a)[-1], abs=1e-10)
    assert np.linalg.norm(a @ vector - value * vector) < 1e-8


@pytest.mark.parametrize("case", ["sgd", "adam"])
def test_update_ratio_against_weights_read_before_and_after_a_step(case):
    engine = small_engine(case, dataset="moons")
    before = [v.numpy().copy() for v in engine.variables]
    _, stats, _ = engine.step(record=True)
    after = [v.numpy() for v in engine.variables]
    rows = Diagnostics(engine).rows(10, stats.numpy())
    ratios = {r.variable: r.value for r in rows if r.name == catalog.UPDATE_RATIO}
    assert len(ratios) == len(engine.variables) == 2
    for variable, old, new in zip(engine.variables, before, after):
        expected = np.linalg.norm(old - new) / np.linalg.norm(new)
        assert expected > 0
        # the update norm comes from the float32 slot statistics
        assert ratios[variable_label(variable)] == pytest.approx(expected, rel=1e-5)


def numpy_per_example_gradients(engine: Engine, indices: np.ndarray) -> np.ndarray:
    """[m, n_params] gradients of -log softmax(x W + b)[y] per example, written out."""
    kernel, bias = (v.numpy() for v in engine.variables)
    x = engine.x_train.numpy()[indices]
    y = engine.y_train.numpy()[indices]
    logits = x @ kernel + bias
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    delta = p - np.eye(kernel.shape[1])[y]  # d loss_i / d logits_i
    return np.concatenate([np.einsum("mi,mj->mij", x, delta).reshape(len(x), -1), delta], 1)


def test_noise_scale_against_explicit_per_example_gradients():
    engine = small_engine("sgd")
    diagnostics = Diagnostics(engine)
    step = 7
    rows = {r.name: r.value for r in diagnostics.noise_rows(step)}
    n, m = int(engine.x_train.shape[0]), diagnostics.examples
    rng = np.random.RandomState((engine.config.seed * 1_000_003 + step) % 2**32)
    grads = numpy_per_example_gradients(engine, rng.choice(n, m, replace=False))
    mean = grads.mean(0)
    trace = np.sum((grads - mean) ** 2) / (m - 1)  # unbiased trace of the covariance
    norm_sq = mean @ mean - trace / m
    assert rows[catalog.GRADIENT_NOISE] == pytest.approx(trace, rel=1e-10)
    assert rows[catalog.GRADIENT_NORM_SQ] == pytest.approx(norm_sq, rel=1e-10)
    assert rows[catalog.NOISE_SCALE] == pytest.approx(trace / norm_sq, rel=1e-10)  # 1st record
    # McCandlish et al. 2018, appendix A.1, with B_small = 1 and B_big = m
    small, big = np.mean(np.sum(grads ** 2, 1)), mean @ mean
    assert (m * big - small) / (m - 1) == pytest.approx(norm_sq, rel=1e-10)
    assert (small - big) / (1 - 1 / m) == pytest.approx(trace, rel=1e-10)
    assert estimates(float(np.sum(grads ** 2)), float(big), m) == pytest.approx(
        (trace, norm_sq), rel=1e-12)


def test_the_run_loop_records_the_diagnostics_and_the_export_writes_them(tmp_path):
    from runs.io.export import export_run

    config = RunConfig(optimizer="adam", dataset="moons", model="logistic", batch_size=32,
                       steps=12, eval_every=1000, sharpness="on", sharpness_every=5,
                       noise_scale="on", noise_scale_every=5, update_ratio_every=2)
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    engine = Engine(config, "/CPU:0")
    run = RunLoop(run_id, store, engine, total=config.steps,
                  eval_every=config.eval_every, record=lambda s: s % 3 != 0,
                  histogram=lambda s: False, handlers=HANDLERS)
    try:
        for _ in range(config.steps):
            run.one_step()
        run.flush(wait=True)
    finally:
        run.close()
    rows = store.diagnostics(run_id)
    steps = lambda name: sorted(set(rows.loc[rows["name"] == name, "step"]))  # noqa: E731
    assert steps(catalog.SHARPNESS) == [1, 5, 10]
    assert steps(catalog.PRECONDITIONED_THRESHOLD) == [1, 5, 10]
    assert steps(catalog.GRADIENT_NOISE) == [1, 5, 10]
    # every 2nd step among the recorded ones (s % 3 != 0), and step 1; the last step (12) is
    # recorded by the loop whatever `record` says
    assert steps(catalog.UPDATE_RATIO) == [1, 2, 4, 8, 10, 12]
    assert (rows.loc[rows["name"] == catalog.SHARPNESS, "seconds"] > 0).all()
    assert set(rows.loc[rows["name"] == catalog.UPDATE_RATIO, "variable"]) == {
        variable_label(v) for v in engine.variables}
    paths = export_run(store, run_id, tmp_path / "out")
    exported = pd.read_csv(paths.tables["diagnostics"])
    assert len(exported) == len(rows)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(paths.logdir))
    events.Reload()
    tags = events.Tags()["tensors"]
    assert "diagnostics/sharpness" in tags and "diagnostics/noise_scale" in tags
    # the figures: threshold line, the cost meter names each diagnostic that is on
    fig = figs.sharpness_figure(rows, "adam")
    assert any("threshold" in (t.name or "") for t in fig.data)
    labels = [label for label, _, _ in figs.cost_metrics(rows, {"sharpness": 5,
                                                               "update_ratio": 2})]
    assert labels == ["step interval", "sharpness", "update ratio"]


def test_threshold_crossing_marks_the_first_step_that_reaches_it():
    rows = pd.DataFrame({
        "step": [1, 1, 50, 50, 100, 100, 150, 150],
        "name": [catalog.SHARPNESS, catalog.SHARPNESS_THRESHOLD] * 4,
        "variable": [""] * 8,
        "value": [5.0, 20.0, 15.0, 20.0, 19.7, 20.0, 21.0, 20.0],
        "seconds": [0.1, 0, 0.1, 0, 0.1, 0, 0.1, 0]})
    assert figs.threshold_crossing(rows, catalog.SHARPNESS, catalog.SHARPNESS_THRESHOLD) == 100
    assert figs.threshold_crossing(rows, catalog.SHARPNESS, catalog.SHARPNESS_THRESHOLD,
                                   tolerance=0.0) == 150
    fig = figs.sharpness_figure(rows, "sgd")
    assert any("reached at step 100" in str(t.text) for t in fig.data)


def test_the_update_ratio_chart_draws_each_variable_the_band_and_the_marks():
    """The live dict and the Figure say the same: one line per variable with its values, the
    rule-of-thumb band and line, its label AT 1e-3 on the log axis (an annotation's y on a
    log axis is log10 of the value in plotly.js), a dotted line per learning-rate mark."""
    rows = pd.DataFrame({
        "step": [10, 20, 10, 20], "name": [catalog.UPDATE_RATIO] * 4,
        "variable": ["dense/kernel:0", "dense/kernel:0", "dense/bias:0", "dense/bias:0"],
        "value": [1e-3, 2e-3, 5e-4, 4e-4], "seconds": [0.0] * 4})
    spec = figs.update_ratio_spec(rows, uirevision=3, marks=[15])
    fig = figs.update_ratio_figure(rows, uirevision=3, marks=[15])
    for traces in (spec["data"], fig.to_plotly_json()["data"]):
        assert [t["name"] for t in traces] == ["dense/kernel:0", "dense/bias:0"]
    assert list(fig.data[0].y) == [1e-3, 2e-3] and list(fig.data[1].x) == [10, 20]
    band, rule, mark = fig.layout.shapes
    assert (band.y0, band.y1) == catalog.RATIO_BAND and band.xref == "x domain"
    assert rule.y0 == rule.y1 == catalog.RATIO_TARGET == 1e-3
    assert (mark.x0, mark.x1, mark.line.dash) == (15, 15, "dot")
    (label,) = fig.layout.annotations
    assert label.text == "1e-3 rule of thumb" and label.y == pytest.approx(-3.0)
    assert fig.layout.yaxis.type == "log" and fig.layout.uirevision == 3
