"""The Train page reopened while this browser's run trains (AppTest, no run process: the run
row is faked as running, owned by this test's pid): the page load sends no command, the Setup
shows the run's live values read from the store (optimizer, hyperparameters, schedule), the
speed control shows its pace, and a value equal to what the run uses sends nothing."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from runs.service import control, ownership
from runs.service.ownership import Caller
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests._pages import app_test, open_page

TOKEN = "r" * 43


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    monkeypatch.delenv(ownership.TAKEOVER_ENV, raising=False)
    return RunStore()


def live_run(store: RunStore, config: RunConfig, speed: float | None = 5.0,
             init_rows: bool = True) -> int:
    """A run of `config` owned by `TOKEN`, running, started at `speed` (its set_speed done),
    with its `init` hyper_changes rows (`init_rows`)."""
    run_id = store.create_run(config.to_json_dict(), owner=Caller(TOKEN).owner)
    store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
    if speed is not None:
        command = store.send_command(run_id, "set_speed", {"steps_per_second": speed})
        store.finish_command(command, "done", step=1)
    if init_rows:
        store.append(run_id, hyper_changes=[(1, name, None, float(np.float32(value)), "init")
                                            for name, value in config.hyperparameters.items()],
                     step=1)
    return run_id


def reopen() -> AppTest:
    """A new session of the same browser (its cookie sent) on the Train page."""
    at = open_page(app_test(default_timeout=120), "train")
    at.session_state[session_runs._TOKEN] = TOKEN
    at.run()
    assert not at.exception, at.exception
    return at


ADAM = RunConfig(optimizer="adam", steps=100_000,
                 hyperparameters={"learning_rate": 0.01, "beta_1": 0.5})


def test_reopening_sends_nothing_and_shows_the_runs_live_values(store):
    run_id = live_run(store, ADAM)
    # a live change the run took: its row holds the float32 value (0.02 -> 0.0199999996)
    store.append(run_id, hyper_changes=[(40, "learning_rate", float(np.float32(0.01)),
                                         float(np.float32(0.02)), "user")], step=40)
    before = store.commands(run_id)
    at = reopen()
    at.run()  # a second script run of the reopened page (a refresh): still nothing sent
    assert at.selectbox(key="run_select").value == run_id
    assert store.commands(run_id).equals(before)
    assert at.selectbox(key="optimizer").value == "adam"
    assert at.number_input(key="hp_adam_learning_rate").value == 0.02
    assert at.slider(key="hp_adam_beta_1").value == 0.5
    assert at.number_input(key="hp_adam_beta_1__typed").value == 0.5
    assert at.session_state["hp_adam_beta_2"] == pytest.approx(0.999)
    assert at.select_slider(key=f"speed_{run_id}").value == 5.0
    assert any("moving a value changes it live" in c.value for c in at.caption)
    assert control.speed(store, run_id) == 5.0


def test_a_pending_change_and_the_saved_config_win_over_the_start_config(store):
    run_id = live_run(store, ADAM, init_rows=False)  # no rows written yet
    store.update_run(run_id, optimizer_config={"learning_rate": 0.03, "beta_1": 0.699999988079071,
                                               "decay": 0.0})
    # sent by the page before the reopen, not taken yet by the run process
    store.send_command(run_id, "set_hyper", {"name": "learning_rate", "value": 0.04,
                                             "source": "user"})
    at = reopen()
    assert at.number_input(key="hp_adam_learning_rate").value == 0.04
    assert at.slider(key="hp_adam_beta_1").value == 0.7  # float32 0.69999999 read back as 0.7
    assert len(store.commands(run_id)) == 2  # the done set_speed and the pending set_hyper


def test_the_setup_shows_the_runs_optimizer_and_schedule(store):
    schedule = {"class_name": "ExponentialDecay",
                "config": {"initial_learning_rate": 0.1, "decay_steps": 500,
                           "decay_rate": 0.5, "staircase": False}}
    config = RunConfig(optimizer="sgd", steps=100_000, hyperparameters={"momentum": 0.8},
                       lr_schedule=schedule)
    run_id = live_run(store, config)
    at = reopen()
    assert at.selectbox(key="optimizer").value == "sgd"
    assert at.slider(key="hp_sgd_momentum").value == 0.8
    assert at.selectbox(key="lrs_class").value == "ExponentialDecay"
    assert at.session_state["lrs_ExponentialDecay_decay_steps"] == 500
    assert store.commands(run_id)["kind"].tolist() == ["set_speed"]


def test_a_value_equal_to_the_runs_sends_nothing(store):
    run_id = live_run(store, ADAM)
    at = reopen()
    # auto-tuning (or a teacher) moved the rate meanwhile; the user then types that value
    store.append(run_id, hyper_changes=[(60, "learning_rate", 0.01, float(np.float32(0.05)),
                                         "autotune")], step=60)
    at.number_input(key="hp_adam_learning_rate").set_value(0.05).run()
    assert not at.exception, at.exception
    assert store.commands(run_id)["kind"].tolist() == ["set_speed"]
    # a different value is sent
    at.number_input(key="hp_adam_learning_rate").set_value(0.06).run()
    sent = store.commands(run_id)
    assert sent["kind"].tolist() == ["set_speed", "set_hyper"]
    assert json.loads(sent["payload"].iloc[-1])["value"] == 0.06
    # the speed control set to the pace the run already has: nothing
    store.send_command(run_id, "set_speed", {"steps_per_second": 20.0})  # e.g. a teacher's
    at.select_slider(key=f"speed_{run_id}").set_value(20.0).run()
    assert store.commands(run_id)["kind"].tolist() == ["set_speed", "set_hyper", "set_speed"]
    at.select_slider(key=f"speed_{run_id}").set_value(10.0).run()
    assert json.loads(store.commands(run_id)["payload"].iloc[-1]) == {"steps_per_second": 10.0}
