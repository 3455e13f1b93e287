"""The NumPy schedule maths against tf_keras's classes, the regime marks, the figures that draw
them, and the Train page's schedule picker (AppTest)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components import figures
from schedules.preview import preview_points, schedule_curve, schedule_marks
from schedules.table import EFFECTIVE_LR, validate_schedule

CASES = [  # (class, config): every class, its branches (staircase, cycle, warm-up, t_mul = 1)
    ("ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 30, "decay_rate": 0.6}),
    ("ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 30, "decay_rate": 0.6,
                          "staircase": True}),
    ("InverseTimeDecay", {"initial_learning_rate": 0.5, "decay_steps": 20, "decay_rate": 2.0}),
    ("InverseTimeDecay", {"initial_learning_rate": 0.5, "decay_steps": 20, "decay_rate": 2.0,
                          "staircase": True}),
    ("PiecewiseConstantDecay", {"boundaries": [10, 50, 120], "values": [1.0, 0.3, 0.1, 0.01]}),
    ("PolynomialDecay", {"initial_learning_rate": 0.2, "decay_steps": 90,
                         "end_learning_rate": 0.01, "power": 2.0}),
    ("PolynomialDecay", {"initial_learning_rate": 0.2, "decay_steps": 45,
                         "end_learning_rate": 0.01, "power": 0.5, "cycle": True}),
    ("CosineDecay", {"initial_learning_rate": 0.1, "decay_steps": 150, "alpha": 0.1}),
    ("CosineDecay", {"initial_learning_rate": 0.0, "decay_steps": 150, "alpha": 0.05,
                     "warmup_target": 0.2, "warmup_steps": 40}),
    ("CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 25,
                             "t_mul": 2.0, "m_mul": 0.7, "alpha": 0.01}),
    ("CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 25,
                             "t_mul": 1.0, "m_mul": 0.5}),
]


@pytest.mark.parametrize("class_name, config", CASES,
                         ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_numpy_curve_equals_the_keras_schedule(class_name, config):
    import tensorflow as tf
    from optimizers.keras_schedules import ALLOWED_SCHEDULES

    if class_name == "CosineDecay" and config["initial_learning_rate"] == 0.0:
        config = {**config, "initial_learning_rate": 0.001}  # (0, 10]: warm-up from near 0
    data = validate_schedule("lr_schedule", {"class_name": class_name, "config": config})
    # float64 tensors, so that Keras computes in float64 too (a Python float makes it float32)
    wide = {k: tf.constant(v, tf.float64) if isinstance(v, float) else
            [tf.constant(x, tf.float64) for x in v] if k == "values" else v
            for k, v in data["config"].items()}
    keras = ALLOWED_SCHEDULES[class_name](**wide)
    # steps off the exact restart points, where float32 and float64 may floor differently
    steps = np.array([s for s in range(0, 400) if class_name != "CosineDecayRestarts"
                      or s % 25 != 0] + [0], np.float64)
    expected = np.array([float(keras(tf.constant(s, tf.float64))) for s in steps])
    np.testing.assert_allclose(schedule_curve(data, steps), expected, rtol=1e-12, atol=1e-15)


def test_decay_and_constant_follow_the_optimizer_v2_formula():
    steps = np.arange(5.0)
    np.testing.assert_allclose(schedule_curve(None, steps, learning_rate=0.1, decay=0.5),
                               0.1 / (1 + 0.5 * steps))
    data = validate_schedule("s", {"class_name": "ExponentialDecay",
                                   "config": {"initial_learning_rate": 0.1, "decay_steps": 2,
                                              "decay_rate": 0.5}})
    np.testing.assert_allclose(schedule_curve(data, steps, decay=0.25),
                               0.1 * 0.5 ** (steps / 2) / (1 + 0.25 * steps))


def test_marks_are_the_first_steps_of_each_regime():
    piecewise = validate_schedule("s", {"class_name": "PiecewiseConstantDecay",
                                        "config": {"boundaries": [10, 50],
                                                   "values": [1.0, 0.5, 0.1]}})
    marks = schedule_marks(piecewise, 100)
    assert marks == [(12, "boundary 10"), (52, "boundary 50")]
    # step 12 uses iterations 11 > 10: the new value; step 11 (iterations 10) the old one
    assert schedule_curve(piecewise, np.array([10.0, 11.0])).tolist() == [1.0, 0.5]
    restarts = validate_schedule("s", {"class_name": "CosineDecayRestarts",
                                       "config": {"first_decay_steps": 10, "t_mul": 2.0}})
    assert [s for s, _ in schedule_marks(restarts, 100)] == [11, 31, 71]
    stair = validate_schedule("s", {"class_name": "ExponentialDecay",
                                    "config": {"decay_steps": 30, "staircase": True}})
    assert [s for s, _ in schedule_marks(stair, 100)] == [31, 61, 91]
    warm = validate_schedule("s", {"class_name": "CosineDecay",
                                   "config": {"decay_steps": 30, "warmup_target": 0.1,
                                              "warmup_steps": 20}})
    assert schedule_marks(warm, 100) == [(21, "warm-up end")]
    assert schedule_marks(None, 100) == []
    steps, rates = preview_points(piecewise, 100, points=20)
    assert {11, 12, 51, 52} <= set(steps.tolist()) and steps[0] == 1 and steps[-1] == 100
    assert rates[list(steps).index(12)] == 0.5


def _vlines(fig):
    return [shape for shape in fig.layout.shapes if shape.x0 == shape.x1]


def test_loss_figure_draws_the_schedule_marks():
    scalars = pd.DataFrame({"step": [1, 2, 3], "name": ["train_loss"] * 3,
                            "value": [1.0, 0.8, 0.7]})
    plain = figures.loss_figure(scalars)
    marked = figures.loss_figure(scalars, schedule_marks=[(12, "boundary 10"), (52, "b 50")])
    extra = _vlines(marked)[len(_vlines(plain)):]
    assert [s.x0 for s in extra] == [12, 52]
    assert {a.text for a in marked.layout.annotations} >= {"boundary 10", "b 50"}


def test_learning_rate_figure_planned_and_recorded():
    planned = (np.array([1, 2, 3]), np.array([0.1, 0.05, 0.025]))
    recorded = pd.DataFrame({"step": [1, 3], "name": [EFFECTIVE_LR] * 2,
                             "value": [0.1, 0.025]})
    fig = figures.learning_rate_figure(planned, recorded, [(2, "restart")], uirevision=7)
    assert [t.name for t in fig.data] == ["schedule (NumPy)", "effective (recorded)"]
    assert list(fig.data[0].y) == [0.1, 0.05, 0.025] and list(fig.data[1].x) == [1, 3]
    assert [s.x0 for s in _vlines(fig)] == [2] and fig.layout.uirevision == 7
    empty = figures.learning_rate_figure()
    assert not empty.data and empty.layout.annotations[0].text == figures.EMPTY_TEXT


def test_train_page_cosine_decay_start_carries_the_schedule(tmp_path, monkeypatch):
    from runs.service import control
    from runs.protocol import FINAL_STATUSES
    from runs.store.run_store import RunStore
    from tests._pages import app_test, open_page

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = open_page(app_test(default_timeout=120), "train")
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="lrs_class").set_value("CosineDecay").run()
    at.number_input(key="lrs_CosineDecay_initial_learning_rate").set_value(0.002)
    at.number_input(key="lrs_CosineDecay_decay_steps").set_value(40)
    at.number_input(key="lrs_CosineDecay_warmup_target").set_value(0.05)
    at.number_input(key="lrs_CosineDecay_warmup_steps").set_value(10)
    at.number_input(key="decay").set_value(0.001)
    at.number_input(key="steps").set_value(60).run()
    assert not at.exception, at.exception
    assert not [e.value for e in at.error]
    preview = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    lr = next(p for p in preview if p["layout"]["title"]["text"] == "Learning rate")
    assert max(lr["data"][0]["y"]) == pytest.approx(0.05 / (1 + 0.001 * 10), rel=1e-9)
    assert any(s.get("x0") == 11 for s in lr["layout"]["shapes"])  # warm-up end
    assert at.query_params["lr_schedule"] == ["CosineDecay"] or \
        at.query_params["lr_schedule"] == "CosineDecay"
    at.button(key="start").click().run()
    assert not at.exception, at.exception
    store = RunStore()
    run_id = int(store.runs()["id"].iloc[0])
    try:
        config = store.run(run_id)["config"]
        assert config["lr_schedule"] == {"class_name": "CosineDecay", "config": {
            "initial_learning_rate": 0.002, "decay_steps": 40, "alpha": 0.0,
            "warmup_target": 0.05, "warmup_steps": 10}}
        assert config["decay"] == 0.001
        # a page switch and back keeps the choice (non-widget Setup keys)
        open_page(at, "home").run()
        open_page(at, "train").run()
        assert at.selectbox(key="lrs_class").value == "CosineDecay"
        assert at.number_input(key="lrs_CosineDecay_decay_steps").value == 40
    finally:
        if store.run(run_id)["status"] not in FINAL_STATUSES:
            control.stop(store, run_id)
