"""The Train page under `streamlit.testing.v1.AppTest` with a temporary run store."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from _plotly_arrays import decoded
from runs.protocol import FINAL_STATUSES
from runs.service import waiting
from runs.store.run_store import RunStore
from tests._pages import app_test, open_page

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TRAIN = "train"  # the app opens on Home; these tests drive the Train page
TIMEOUT_S = 120  # the first run of the script imports TensorFlow


def engine():
    """`runs.service.control`, or skip while the engine is not written yet."""
    try:
        return importlib.import_module("runs.service.control")
    except ImportError as error:
        pytest.skip(f"runs.service.control is not importable yet: {error}")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def app(home) -> AppTest:
    at = open_page(app_test(default_timeout=TIMEOUT_S), TRAIN)
    at.run()
    assert not at.exception, at.exception
    return at


def test_page_renders_with_adam_defaults(app):
    assert app.selectbox(key="optimizer").value == "adam"
    assert app.selectbox(key="dataset").value == "digits"
    assert app.selectbox(key="model").value == "mlp"
    assert app.selectbox(key="model").options == ["mlp", "logistic", "cnn"]
    assert app.number_input(key="hp_adam_learning_rate").value == pytest.approx(1e-3)
    assert app.number_input(key="hp_adam_epsilon").value == pytest.approx(1e-7)
    assert app.slider(key="hp_adam_beta_1").value == pytest.approx(0.9)
    assert app.slider(key="hp_adam_beta_2").value == pytest.approx(0.999)
    assert app.slider(key="hp_adam_beta_2").max == pytest.approx(0.9999)  # [0, 1) stepped in
    assert app.checkbox(key="opt_adam_amsgrad").value is False
    assert "allowed a float in (0, 10]" in app.number_input(key="hp_adam_learning_rate").help
    assert app.button(key="start").disabled is False
    assert not app.error


def test_other_optimizer_builds_its_widgets(app):
    app.selectbox(key="optimizer").set_value("sgd").run()
    assert not app.exception
    keys = {w.key for w in app.sidebar.slider} | {w.key for w in app.sidebar.number_input}
    assert "hp_sgd_learning_rate" in keys and "hp_sgd_momentum" in keys


def test_dataset_filters_models(app):
    app.selectbox(key="dataset").set_value("tokens").run()
    assert app.selectbox(key="model").options == ["embedding"]
    assert app.selectbox(key="model").value == "embedding"
    assert not app.exception


def test_invalid_hyperparameter_shows_error_naming_it(app):
    app.number_input(key="hp_adam_learning_rate").set_value(-1.0).run()
    messages = [e.value for e in app.error]
    assert any("learning_rate" in m and "(0, 10]" in m for m in messages), messages
    assert app.button(key="start").disabled is True
    assert not app.exception


def _start(app: AppTest, steps: int, lr: float = 0.01) -> int:
    app.number_input(key="steps").set_value(steps)
    app.number_input(key="eval_every").set_value(10)
    app.number_input(key="hp_adam_learning_rate").set_value(lr)
    app.button(key="start").click().run()
    assert not app.exception, app.exception
    assert not [e.value for e in app.error]
    runs = RunStore().runs()
    assert len(runs) == 1
    return int(runs["id"].iloc[0])


@pytest.mark.slow
def test_start_creates_a_run_and_charts_fill(app):
    runs = engine()
    run_id = _start(app, steps=60)
    store = RunStore()
    try:
        run = store.run(run_id)
        assert run["config"]["steps"] == 60
        assert run["config"]["hyperparameters"]["learning_rate"] == pytest.approx(0.01)
        done = waiting.wait_for_status(store, run_id, FINAL_STATUSES, 300)
        assert done["status"] == "finished", done
    finally:
        if store.run(run_id)["status"] not in FINAL_STATUSES:
            runs.stop(store, run_id)
    app.run()
    assert not app.exception, app.exception
    assert app.selectbox(key="run_select").value == run_id
    specs = [json.loads(e.proto.spec) for e in app.get("plotly_chart")]
    by_title = {}
    for spec in specs:
        title = (spec["layout"].get("title") or {}).get("text", "")
        by_title[title] = spec
        assert spec["layout"]["uirevision"] in (run_id, str(run_id)) or str(spec["layout"]["uirevision"]).startswith(f"{run_id}-")
    loss = by_title["Loss"]["data"]
    assert [t["name"] for t in loss] == ["train loss", "val loss"]
    steps = decoded(loss[0]["x"])  # NumPy arrays arrive as typed arrays
    assert len(steps) >= 30 and steps.max() == 60
    assert len(decoded(by_title["Validation accuracy"]["data"][0]["y"])) >= 5
    assert any(t.get("type") == "heatmap" for s in specs for t in s["data"])
    assert any(t.get("name") == "learning_rate" for s in specs for t in s["data"])
    assert any("finished" in m.value for m in app.markdown)


@pytest.mark.slow
def test_live_hyperparameter_change_reaches_the_run(app):
    runs = engine()
    run_id = _start(app, steps=100_000)
    store = RunStore()
    try:
        waiting.wait_for_status(store, run_id, ("running",), 300)
        app.run()  # the page now sees the run active
        app.number_input(key="hp_adam_learning_rate").set_value(0.003).run()
        assert not app.exception, app.exception
        said = [s.value for s in app.success]
        assert any("sent to run" in m or "applied to run" in m for m in said), (
            said, [e.value for e in app.error])
        if any("applied to run" in m for m in said):  # the run carried it out within 0.5 s:
            changes = store.hyper_changes(run_id)  # its row was readable before the rerun
            assert (changes["source"] == "user").any(), changes
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            changes = store.hyper_changes(run_id)
            user = changes[changes["source"] == "user"]
            if not user.empty:
                break
            time.sleep(0.5)
        assert user["name"].tolist() == ["learning_rate"]
        assert user["new"].iloc[0] == pytest.approx(0.003)
        # an invalid live value is refused on the page and the run goes on
        app.number_input(key="hp_adam_learning_rate").set_value(0.0).run()
        assert any("learning_rate" in e.value for e in app.error)
        assert store.run(run_id)["status"] in ("running", "paused")
    finally:
        runs.stop(store, run_id)
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, 120)
