"""Live run controls: one click one command, Step, speed, continuous mode, the Setup kept across
page switches, and Stop of a stopped run (issue 13, items 4-6)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from runs import protocol
from runs.service import control, pool, waiting
from runs.service.ownership import Caller
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests._pages import app_test, open_page

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TRAIN = "train"  # the app opens on Home; these tests drive the Train page
TIMEOUT_S = 120


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


def fake_live_run(store: RunStore, owner: str | None = None, status: str = "running") -> int:
    """A run the pages take for live (fresh heartbeat, no process): commands stay pending."""
    run_id = store.create_run(RunConfig(steps=500).to_json_dict(), owner=owner)
    store.set_status(run_id, status)
    store.append(run_id, scalars=[(1, "train_loss", 2.0)], step=1)
    return run_id


def pending(store: RunStore, run_id: int, kind: str) -> int:
    frame = store.commands(run_id)
    return int(((frame["kind"] == kind) & (frame["status"] == "pending")).sum())


# ----- the run service ------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 0.05, 1000.5, -1, math.inf, True, "fast"])
def test_set_speed_payload_refused_out_of_range(value):
    with pytest.raises(protocol.Refused, match="steps_per_second"):
        protocol.parse("set_speed", {"steps_per_second": value})


@pytest.mark.parametrize("value, expected", [(5, 5.0), (0.1, 0.1), (1000, 1000.0), (None, None)])
def test_set_speed_payload_accepted(value, expected):
    payload = protocol.parse("set_speed", {"steps_per_second": value})
    assert payload.steps_per_second == expected


def test_control_set_speed_names_the_range_and_dedupes(home):
    store = RunStore()
    run_id = fake_live_run(store)
    with pytest.raises(ValueError, match=r"steps_per_second=0 refused: must be in \[0.1, 1000\]"):
        control.set_speed(store, run_id, 0)
    first = control.set_speed(store, run_id, 5)
    assert control.set_speed(store, run_id, 5) == first  # identical and pending: not queued again
    other = control.set_speed(store, run_id, None)
    assert other != first
    assert pending(store, run_id, "set_speed") == 2
    assert control.speed(store, run_id) is None  # the last one not refused


def test_a_run_starts_at_the_pace_it_was_started_with(home, monkeypatch):
    monkeypatch.setattr(pool, "dispatch", lambda *args, **kwargs: None)  # no process
    store = RunStore()
    with pytest.raises(ValueError, match=r"steps_per_second=2000 refused: must be in "
                                         r"\[0.1, 1000\]"):
        control.start_run(RunConfig(steps=50), store, steps_per_second=2000)
    assert store.runs().empty  # refused before anything was stored
    run_id = control.start_run(RunConfig(steps=50), store, steps_per_second=50.0)
    assert store.run(run_id)["status"] == "queued"
    assert pending(store, run_id, "set_speed") == 1  # taken at the process's first poll
    assert control.speed(store, run_id) == 50.0
    plain = control.start_run(RunConfig(steps=50), store)
    assert pending(store, plain, "set_speed") == 0 and control.speed(store, plain) is None


def test_the_train_page_starts_at_the_chosen_speed(app, monkeypatch):
    monkeypatch.setattr(pool, "dispatch", lambda *args, **kwargs: None)
    assert app.select_slider(key="start_speed").value == 50.0  # the default pace
    app.select_slider(key="start_speed").set_value(5.0)
    app.button(key="start").click().run()
    assert not app.exception, app.exception
    run_id = int(RunStore().runs()["id"].iloc[0])
    assert control.speed(RunStore(), run_id) == 5.0


def test_pause_and_stop_twice_queue_one_command_each(home):
    store = RunStore()
    run_id = fake_live_run(store)
    assert control.pause(store, run_id) == control.pause(store, run_id)
    assert control.stop(store, run_id) == control.stop(store, run_id)
    assert pending(store, run_id, "pause") == 1 and pending(store, run_id, "stop") == 1


def test_step_needs_a_paused_run(home):
    store = RunStore()
    run_id = fake_live_run(store)
    with pytest.raises(ValueError, match="Step needs a paused run"):
        control.step(store, run_id)
    store.set_status(run_id, "paused")
    first = control.step(store, run_id)
    assert control.step(store, run_id) == first  # a double click: still one pending step
    assert pending(store, run_id, "step") == 1


# ----- the page -------------------------------------------------------------------------------
def test_setup_survives_a_page_switch(app):
    app.selectbox(key="optimizer").set_value("sgd").run()
    app.number_input(key="hp_sgd_learning_rate").set_value(0.05).run()
    app.number_input(key="hp_sgd_momentum__typed").set_value(0.9).run()
    app.selectbox(key="dataset").set_value("moons").run()
    app.number_input(key="steps").set_value(2500).run()
    assert not app.exception, app.exception
    assert app.slider(key="hp_sgd_momentum").value == pytest.approx(0.9)  # typed -> slider
    link = app.query_params.to_dict() if hasattr(app.query_params, "to_dict") else dict(
        app.query_params)
    open_page(app, "runs").run()
    assert not app.exception, app.exception
    open_page(app, TRAIN).run()
    assert not app.exception, app.exception
    assert app.selectbox(key="optimizer").value == "sgd"
    assert app.number_input(key="hp_sgd_learning_rate").value == pytest.approx(0.05)
    assert app.slider(key="hp_sgd_momentum").value == pytest.approx(0.9)
    assert app.number_input(key="hp_sgd_momentum__typed").value == pytest.approx(0.9)
    assert app.selectbox(key="dataset").value == "moons"
    assert app.number_input(key="steps").value == 2500
    again = app.query_params.to_dict() if hasattr(app.query_params, "to_dict") else dict(
        app.query_params)
    assert again == link and "sgd" in str(again)  # the URL follows the Setup back


def test_continuous_checkbox_sets_the_most_steps_and_back(app):
    app.number_input(key="steps").set_value(3000).run()
    app.checkbox(key="continuous").check().run()
    assert app.number_input(key="steps").value == 1_000_000
    assert app.number_input(key="steps").disabled
    app.checkbox(key="continuous").uncheck().run()
    assert app.number_input(key="steps").value == 3000
    assert not app.number_input(key="steps").disabled


def _live(app: AppTest) -> int:
    store = RunStore()
    run_id = fake_live_run(store, owner=Caller(app.session_state["session_token"]).owner)
    app.run()
    assert not app.exception, app.exception
    assert app.selectbox(key="run_select").value == run_id
    return run_id


def test_one_click_one_command(app):
    run_id = _live(app)
    store = RunStore()
    app.button(key=f"pause_{run_id}").click().run()
    assert not app.exception, app.exception
    assert pending(store, run_id, "pause") == 1
    assert app.button(key=f"pause_{run_id}").disabled  # until the run process takes it
    # a second click that reached the server before the button was redrawn disabled
    caller = Caller(app.session_state["session_token"])
    first = int(store.commands(run_id)["id"].iloc[-1])
    assert control.pause(store, run_id, caller=caller) == first
    assert pending(store, run_id, "pause") == 1
    app.button(key=f"stop_{run_id}").click().run()
    assert app.button(key=f"stop_{run_id}").disabled
    assert pending(store, run_id, "stop") == 1
    assert not app.warning and not app.error


def test_stop_of_a_stopped_run_is_not_an_error(app):
    run_id = _live(app)
    store = RunStore()
    store.set_status(run_id, "stopped", "stopped by the user after step 1")  # ended meanwhile
    app.button(key=f"stop_{run_id}").click().run()  # the button drawn while it ran
    assert not app.exception, app.exception
    assert not app.warning, [w.value for w in app.warning]
    assert any("already stopped" in i.value for i in app.info), [i.value for i in app.info]
    assert pending(store, run_id, "stop") == 0


# ----- real runs ------------------------------------------------------------------------------
def _start(app: AppTest) -> int:
    app.number_input(key="eval_every").set_value(10)
    app.button(key="start").click().run()
    assert not app.exception, app.exception
    return int(RunStore().runs()["id"].iloc[-1])


def _wait(predicate, timeout_s: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


@pytest.mark.slow
def test_step_advances_exactly_one_step_while_paused(app):
    run_id = _start(app)
    store = RunStore()
    try:
        waiting.wait_for_status(store, run_id, ("running",), 300)
        waiting.wait_for_step(store, run_id, 5, 120)
        app.run()
        app.button(key=f"pause_{run_id}").click().run()
        waiting.wait_for_status(store, run_id, ("paused",), 60)
        before = store.run(run_id)["step"]
        app.run()
        assert not app.button(key=f"step_{run_id}").disabled
        app.button(key=f"step_{run_id}").click().run()
        _wait(lambda: store.run(run_id)["step"] == before + 1, 60, "one step")
        time.sleep(1.5)  # nothing more trains
        run = store.run(run_id)
        assert run["step"] == before + 1 and run["status"] == "paused", run
        steps = store.scalars(run_id)
        assert int(steps.loc[steps["name"] == "train_loss", "step"].max()) == before + 1
        # the button stays disabled while its command is pending (one click, one command):
        # redraw until the run process has marked the first Step done
        _wait(lambda: not app.run().button(key=f"step_{run_id}").disabled, 60,
              "the Step button enabled again")
        app.button(key=f"step_{run_id}").click().run()
        _wait(lambda: store.run(run_id)["step"] == before + 2, 60, "a second step")
    finally:
        control.stop(store, run_id)
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, 120)


@pytest.mark.slow
def test_continuous_mode_runs_until_stop_at_the_speed_set(app):
    app.checkbox(key="continuous").check().run()
    run_id = _start(app)
    store = RunStore()
    try:
        assert store.run(run_id)["total_steps"] == 1_000_000
        waiting.wait_for_status(store, run_id, ("running",), 300)
        app.run()
        assert any("continuous" in m.value for m in app.markdown)
        app.select_slider(key=f"speed_{run_id}").set_value(5.0).run()
        assert not app.exception, app.exception
        _wait(lambda: control.speed(store, run_id) == 5.0
              and store.commands(run_id)["status"].iloc[-1] == "done", 60, "set_speed done")
        start, t0 = store.run(run_id)["step"], time.monotonic()
        time.sleep(4.0)
        rate = (store.run(run_id)["step"] - start) / (time.monotonic() - t0)
        assert 2.0 <= rate <= 6.5, rate  # at most 5 steps/s (+ the flush in flight)
        assert store.run(run_id)["status"] == "running"
        app.button(key=f"stop_{run_id}").click().run()
        done = waiting.wait_for_status(store, run_id, FINAL_STATUSES, 120)
        assert done["status"] == "stopped" and done["step"] < 1_000_000
    finally:
        if store.run(run_id)["status"] not in FINAL_STATUSES:
            control.stop(store, run_id)


def test_copy_link_holds_the_setup_and_typed_values_clamp(app):
    app.number_input(key="hp_adam_beta_2__typed").set_value(0.95).run()
    assert app.slider(key="hp_adam_beta_2").value == pytest.approx(0.95)
    codes = [c.value for c in app.get("code")]
    assert any("optimizer=adam" in c and "hp.beta_2=0.95" in c for c in codes), codes
    app.slider(key="hp_adam_beta_1").set_value(0.8).run()  # the slider moves the box too
    assert app.number_input(key="hp_adam_beta_1__typed").value == pytest.approx(0.8)
    assert not app.exception, app.exception


def test_a_start_click_is_taken_once():
    """`claim_start`: the token of the Start buttons drawn last is taken once and replaced; the
    same click delivered again (its token already taken) starts nothing."""
    from components.train_actions import START_TOKEN, claim_start

    state = {START_TOKEN: "drawn"}
    assert claim_start(state, "drawn")
    fresh = state[START_TOKEN]
    assert fresh != "drawn" and len(fresh) == 16
    assert not claim_start(state, "drawn") and state[START_TOKEN] == fresh
    assert not claim_start({}, "drawn")  # no button drawn in this session: no Start


def test_the_train_page_starts_one_run_per_drawn_button(app, monkeypatch):
    """A click on a freshly drawn Start starts a run, a second one after the page redrew starts
    a second; a click whose token was taken meanwhile (a delivery of the first click again)
    starts nothing."""
    from components.train_actions import START_TOKEN

    monkeypatch.setattr(pool, "dispatch", lambda *args, **kwargs: None)
    app.button(key="start").click().run()
    assert not app.exception, app.exception
    assert len(RunStore().runs()) == 1
    app.button(key="start_main").click().run()  # drawn again after the first Start
    assert len(RunStore().runs()) == 2
    app.session_state[START_TOKEN] = "taken by an earlier delivery"
    app.button(key="start").click().run()
    assert not app.exception, app.exception
    assert len(RunStore().runs()) == 2


def test_the_status_line_says_what_a_run_without_a_step_waits_for(store):
    """A fresh server's first Start waits ~6-10 s for its run host: the status line says so,
    with the seconds so far, then that the model is being built, then nothing once the first
    step is in."""
    from components.run_controls import first_step_wait, status_line
    from runs.service import worker_table

    host = worker_table.register(store, os.getpid())  # warming: importing TensorFlow
    with store._connect() as con:  # started 4 s ago
        con.execute("UPDATE workers SET created = ? WHERE id = ?", (time.time() - 4.2, host))
    run_id = store.create_run(RunConfig(steps=500).to_json_dict())
    store.update_run(run_id, worker=worker_table.host_label(host))
    no_scalars = store.scalars(run_id)
    assert ("waiting for run host %d to import TensorFlow (4 s so far;" % host
            in status_line(store, store.run(run_id), no_scalars))
    worker_table.set_state(store, host, "ready")
    store.set_status(run_id, "running")
    assert first_step_wait(store, store.run(run_id)) == (
        "building its model and tracing its first step")
    store.append(run_id, scalars=[(1, "train_loss", 2.0)], step=1)
    assert first_step_wait(store, store.run(run_id)) == ""
    cold = store.create_run(RunConfig(steps=500).to_json_dict())
    store.update_run(cold, worker="cold")
    assert "its own process imports TensorFlow" in first_step_wait(store, store.run(cold))
    store.set_status(cold, "queued")
    assert first_step_wait(store, store.run(cold)) == ""  # the queue line says why it waits
