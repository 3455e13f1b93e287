"""AppTest of the three teaching pages (Inside one step, Landscape, Plugins), each drawn alone."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from tests._pages import page_test

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins_broken"
TIMEOUT_S = 240  # the first page checks the plugins in a child process (imports TensorFlow)


@pytest.fixture(autouse=True)
def isolated_registry():
    """The pages register passing plugins and export the plugins folder: undo both afterwards so
    other test modules of the same session see the stock registry and environment."""
    import os

    from optimizer_plugins import plugin_discovery as plugins
    from optimizers import registry

    saved = registry.snapshot()
    env = {name: os.environ.get(name) for name in (plugins.ENV_VAR, plugins.LOADED_ENV_VAR)}
    yield
    registry.restore(saved)
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def page(name: str) -> AppTest:
    at = page_test(name, default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, at.exception
    return at


def figure(at: AppTest, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def values(array) -> np.ndarray:
    """A plotly JSON array: a list, or plotly >= 6's {"dtype", "bdata" (base64)} encoding."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


def test_inside_step_steps_and_shows_values():
    at = page("inside_step")
    assert at.selectbox(key="is_optimizer").value == "adam"
    assert "No step yet" in at.info[0].value
    at.button(key="is_step").click().run()
    assert not at.exception, at.exception
    assert at.subheader[0].value.startswith("Step 1:")
    calls = at.dataframe[0].value
    methods = [c.strip() for c in calls["call"]]
    assert methods[:4] == ["apply_gradients", "_create_all_weights", "_create_hypers", "_create_slots"]
    assert "_resource_apply_dense" in methods
    at.button(key="is_step").click().run()
    assert at.subheader[0].value.startswith("Step 2:")
    # the dense model's kernel: a coordinates table with the two Adam slots
    assert any("m after" in df.value.columns for df in at.dataframe)
    names = [json.loads(c.proto.spec)["data"][0]["name"] for c in at.get("plotly_chart")]
    assert names[:2] == ["grad", "m before"]


def test_inside_step_embedding_sparse_rows_and_demo():
    at = page("inside_step")
    at.selectbox(key="is_optimizer").set_value("diffgrad")
    at.radio(key="is_model").set_value("embedding").run()
    at.button(key="is_step").click().run()
    assert not at.exception, at.exception
    rows = next(df.value for df in at.dataframe if "in gradient" in df.value.columns)
    assert rows["in gradient"].tolist() == [True, False, True, False, True, False]
    assert rows["variable changed"].tolist() == [True, False, True, False, True, False]
    at.button(key="is_demo_setattr").click().run()
    demo = next(df.value for df in at.dataframe if "verdict" in df.value.columns)
    assert demo["traces_after"].tolist() == [1, 2, 1, 1]
    assert demo["value_returned_after"].tolist() == [0.0, 5.0, 5.0, 7.0]
    at.button(key="is_demo_epsilon").click().run()
    assert not at.exception, at.exception
    eps = next(df.value for df in at.dataframe if "took_effect" in df.value.columns)
    assert eps["took_effect"].tolist() == [False, True]


def test_inside_step_lookahead_shows_inner_calls():
    at = page("inside_step")
    at.selectbox(key="is_optimizer").set_value("lookahead:sgd").run()
    at.button(key="is_step").click().run()
    assert not at.exception, at.exception
    calls = [c.strip() for c in at.dataframe[0].value["call"]]
    assert calls.index("apply_gradients") < calls.index("inner.apply_gradients")
    assert "inner._resource_apply_dense" in calls and "_resource_apply_dense" not in calls


def test_landscape_page_runs_and_replays():
    at = page("landscape")
    assert at.selectbox(key="ls_function").value == "rosenbrock"
    assert at.multiselect(key="ls_optimizers").value == ["sgd", "adam", "rmsprop", "diffgrad"]
    contour = figure(at, 0)
    names = [t.get("name") for t in contour["data"]]
    assert {"sgd", "adam", "rmsprop", "diffgrad", "minimum", "start"} <= set(names)
    assert at.slider(key="ls_step").value == 500
    at.button(key="ls_prev").click().run()
    assert not at.exception, at.exception
    assert at.slider(key="ls_step").value == 475
    adam = next(t for t in figure(at, 0)["data"] if t.get("name") == "adam")
    assert len(values(adam["x"])) == 476  # steps 0..475 drawn
    at.number_input(key="ls_x0").set_value(0.0).run()
    start = next(t for t in figure(at, 0)["data"] if t.get("name") == "start")
    assert values(start["x"]).tolist() == [0.0]
    # the sliders beside the plot: momentum for SGD moves its path at once, Adam's stays
    before = {t["name"]: values(t["x"]) for t in figure(at, 0)["data"]
              if t.get("name") in ("sgd", "adam")}
    assert at.slider(key="ls_hp_sgd_momentum").value == 0.0
    at.slider(key="ls_hp_sgd_momentum").set_value(0.9).run()
    assert not at.exception, at.exception
    after = {t["name"]: values(t["x"]) for t in figure(at, 0)["data"]
             if t.get("name") in ("sgd", "adam")}
    assert not np.allclose(after["sgd"], before["sgd"])
    np.testing.assert_array_equal(after["adam"], before["adam"])


def test_landscape_tune_sets_learning_rates():
    at = page("landscape")
    at.selectbox(key="ls_function").set_value("ill_conditioned").run()
    at.multiselect(key="ls_optimizers").set_value(["sgd", "adam"]).run()
    at.number_input(key="ls_steps").set_value(100).run()
    at.button(key="ls_tune").click().run()
    assert not at.exception, at.exception
    lr = at.select_slider(key="ls_hp_sgd_learning_rate").value
    assert 1e-4 <= lr <= 1.0 and lr != pytest.approx(1e-3)
    assert "grid" in at.markdown[-1].value or any("13 learning rates" in m.value for m in at.markdown)


def test_plugins_page_reports_the_examples_and_the_template(monkeypatch):
    at = page("plugins")
    titles = [s.value for s in at.subheader]
    assert titles == ["bad_optimizer.py", "good_optimizer.py", "template_optimizer.py"]
    assert any("registered as 'adabelief'" in s.value or "already registered" in s.value for s in at.success)
    assert any("not registered: failed" in w.value for w in at.warning)
    text = " ".join(c.value for c in at.caption)
    assert "2/9 items pass" in text and "9/9 items pass" in text


def test_plugins_page_survives_a_raising_plugin(monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_PLUGINS", str(FIXTURES))
    at = page("plugins")
    assert any("this plugin is broken on purpose" in e.value for e in at.error)
    assert [s.value for s in at.subheader] == ["raises_on_import.py", "sign_sgd.py"]
    assert any("signsgd_fixture" in s.value for s in at.success)
