"""NumPy references of the conventions compared on the Conventions view: each checked against
the lab's TensorFlow optimizers or against the identity that relates it to another form."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from optimizers import registry
from teaching import conventions as cv


def lab_run(name: str, hypers: dict, steps: int, lr_change_at: int | None = None,
            options: dict | None = None) -> np.ndarray:
    """The lab's optimizer on `cv.problem()` in float64 (hyperparameters live in float32)."""
    w0, gradient = cv.problem()
    opt = registry.create(name, hypers, options or {})
    var = tf.Variable(w0, dtype=tf.float64)
    out = []
    for t in range(1, steps + 1):
        if lr_change_at is not None and t == lr_change_at:
            opt.learning_rate = hypers["learning_rate"] / 2  # routed to _set_hyper
        opt.apply_gradients([(tf.constant(gradient(var.numpy(), t)), var)])
        out.append(var.numpy())
    return np.array(out)


@pytest.mark.parametrize("name,step,hypers", [
    ("adam", cv.adam_keras, {"learning_rate": 0.01}),
    ("rmsprop", cv.rmsprop_outside, {"learning_rate": 0.01, "rho": 0.9}),
    ("sgd", cv.sgd_keras, {"learning_rate": 0.01, "momentum": 0.9}),
    ("adamw", cv.adamw_lr_scaled, {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("nadam", cv.nadam_dozat, {"learning_rate": 0.01}),
    ("adamax", cv.adamax_keras, {"learning_rate": 0.01}),
    ("schedule_free_adamw", cv.schedule_free_paper, {"learning_rate": 0.01, "epsilon": 1e-8}),
    ("schedule_free_adamw-keras3", cv.schedule_free_live,
     {"learning_rate": 0.01, "epsilon": 1e-8}),
])
def test_keras_forms_equal_the_lab_optimizers(name, step, hypers):
    change = 25 if name == "sgd" else None
    ours = cv.run(step, 50, hypers["learning_rate"], lr_change_at=change)
    options = {"keras3_tf_compat": True} if name.endswith("-keras3") else {}
    lab = lab_run(name.split("-")[0], hypers, 50, change, options)
    # float32 hyperparameters (0.9 -> 0.89999998) bound the agreement at ~1e-7 relative
    np.testing.assert_allclose(ours, lab, rtol=2e-6, atol=5e-7)


def test_schedule_free_on_tensorflow_makes_y_the_running_mean_of_z_and_drops_beta_1():
    """The live reference: x_old from the updated z turns y_{t+1} = (1 - 1/t) y_t + z_{t+1}/t,
    so y is the plain mean of z_2..z_{t+1}; the snapshot form is Keras's formula as written,
    and both differ from the paper's Algorithm 1."""
    w, mean = cv.schedule_free_live_mean(30, 0.01)
    np.testing.assert_allclose(w, mean, rtol=1e-10)
    table = cv.compare("Schedule-free AdamW (live reference vs snapshot)", steps=200)
    final = table[table["step"] == 200].set_index("convention")["max_abs_difference"]
    assert (final.iloc[1:] > 1e-3).all(), final


def test_pytorch_adam_is_algorithm_1_and_keras_is_algorithm_1_with_epsilon_hat():
    np.testing.assert_allclose(cv.run(cv.adam_pytorch, 100, 0.01),
                               cv.run(cv.adam_algorithm1, 100, 0.01), rtol=1e-12)

    def algorithm1_eps_hat(w, state, g, t, lr):  # epsilon_t = epsilon-hat / sqrt(1 - beta_2^t)
        return cv.adam_algorithm1(w, state, g, t, lr,
                                  eps=cv.EPSILON / np.sqrt(1 - cv.BETA_2 ** t))

    np.testing.assert_allclose(cv.run(cv.adam_keras, 100, 0.01),
                               cv.run(algorithm1_eps_hat, 100, 0.01), rtol=1e-12)
    # with epsilon = 0.1 the first forms part visibly (the epsilon of the first steps differs)
    keras = cv.run(lambda *a: cv.adam_keras(*a, eps=0.1), 100, 0.01)
    paper = cv.run(lambda *a: cv.adam_algorithm1(*a, eps=0.1), 100, 0.01)
    assert np.abs(keras - paper).max() > 1e-3


def test_sgd_conventions_agree_until_the_learning_rate_changes():
    table = cv.compare("SGD momentum (lr halved at the middle step)", steps=200)
    pytorch = table[table["convention"] == "PyTorch"]
    before, after = pytorch[pytorch["step"] < 100], pytorch[pytorch["step"] >= 101]
    assert before["max_abs_difference"].max() < 1e-12
    assert after["max_abs_difference"].max() > 1e-4


def test_rmsprop_epsilon_inside_and_outside_differ_most_where_r_is_small():
    table = cv.compare("RMSprop epsilon", steps=200)
    inside = table[table["convention"].str.startswith("inside")]
    assert inside["max_abs_difference"].max() > 1e-5


def test_adamw_decay_conventions():
    table = cv.compare("AdamW decay", steps=200, lr=0.01)
    diff = table.groupby("convention")["max_abs_difference"].max()
    # unscaled decay (TF Addons) = the paper's form with eta_t = 1; both decay 1/lr = 100x faster
    np.testing.assert_allclose(cv.run(cv.adamw_unscaled, 200, 0.01),
                               cv.run(cv.adamw_eta, 200, 0.01), rtol=1e-12, atol=1e-15)
    assert diff["unscaled (TF Addons)"] > 1e-2
    with pytest.raises(KeyError, match="known: Adam epsilon"):
        cv.compare("nope")


def test_conventions_page_and_figure(tmp_path, monkeypatch):
    from components.convention_figures import conventions_figure
    from tests._pages import page_test

    fig = conventions_figure(cv.compare("Adam epsilon", steps=50), "Adam epsilon")
    assert len(fig.data) == 2 + 3  # 2 distance curves (the first form is the reference), 3 losses
    assert fig.layout.yaxis.type == "log"
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("conventions", default_timeout=60).run()
    assert not at.exception, at.exception
    (cost,) = [t for t in at.table if "XLA, any extra variable" in str(t.value)]
    assert list(cost.value["mode"]) == ["graph", "XLA", "XLA, any extra variable"]
    assert "us per extra scalar variable" in cost.value["measured"].iloc[2]
    at.selectbox(key="cv_family").select("SGD momentum (lr halved at the middle step)").run()
    assert not at.exception, at.exception
    assert "halved at step 200" in at.info[0].value


def test_coinciding_loss_curves_stay_visible_and_are_named():
    """Adam's epsilon forms train to losses equal at the plot's scale: each line has its own
    dash pattern, and the legend says which ones coincide with the first."""
    from components.convention_figures import COINCIDE_RTOL, conventions_figure

    table = cv.compare("Adam epsilon", steps=50)
    fig = conventions_figure(table, "Adam epsilon")
    losses = [t for t in fig.data if t.xaxis == "x2"]
    assert len({t.line.dash for t in losses}) == len(losses) == 3
    first = table[table["convention"] == losses[0].legendgroup]["loss"].to_numpy(float)
    for trace in losses[1:]:
        rows = table[table["convention"] == trace.legendgroup]["loss"].to_numpy(float)
        close = bool(np.all(np.abs(rows - first) <= COINCIDE_RTOL * np.abs(first)))
        assert ("identical to" in trace.name) == close
    assert any("identical to" in t.name for t in fig.data if t.showlegend is not False)
