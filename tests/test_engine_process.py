"""Runs in real worker subprocesses: live set_hyper, pause/resume/stop, SIGKILL."""

import math
import os
import signal
import time

import pytest

from optimizers.hyperparams import InvalidHyperparameter
from runs.service import control, pool, waiting
from settings.run_config import RunConfig


@pytest.mark.slow
def test_live_set_hyper_and_refusals(store):
    config = RunConfig(dataset="moons", model="mlp", steps=3000, eval_every=100)
    run_id = control.start_run(config, store)
    waiting.wait_for_step(store, run_id, 1, timeout_s=120)

    command_id = control.set_hyper(store, run_id, "learning_rate", 0.01)
    done = waiting.wait_for_command(store, command_id, timeout_s=30)
    assert done["status"] == "done" and done["step"] >= 2
    changes = store.hyper_changes(run_id)
    user = changes[changes.source == "user"]
    assert len(user) == 1
    row = user.iloc[0]
    assert row["name"] == "learning_rate" and row["step"] == done["step"]
    assert row["old"] == pytest.approx(1e-3) and row["new"] == pytest.approx(0.01)

    # refused locally, before anything is queued
    for bad in (-1, math.nan, "abc"):
        with pytest.raises(InvalidHyperparameter, match=r"learning_rate.*\(0, 10\]"):
            control.set_hyper(store, run_id, "learning_rate", bad)
    with pytest.raises(KeyError, match="momentum"):
        control.set_hyper(store, run_id, "momentum", 0.5)
    # refused by the worker too (bypassing the service's check): by the optimizer's own guard,
    # the library's range (the lab's "(0, 10]" is checked once, by the service, above)
    refused = [store.send_command(run_id, "set_hyper", {"name": "learning_rate", "value": bad})
               for bad in (-1, math.nan, "abc")]
    for command_id in refused:
        row = waiting.wait_for_command(store, command_id, timeout_s=30)
        assert row["status"] == "refused", row
        assert "learning_rate" in row["message"] and "in [0, inf]" in row["message"]

    run = waiting.wait_for_status(store, run_id, "finished", timeout_s=120)
    assert run["traces"] == 1 and run["step"] == 3000
    assert run["optimizer_config"]["learning_rate"] == 0.01
    lr = [h for h in run["hyper_variables"] if h["name"] == "learning_rate"][0]
    assert lr["value"] == 0.01
    assert len(store.hyper_changes(run_id)) == 5  # 4 init rows + 1 user row
    assert pool.log_path(store, run_id).exists()
    with pytest.raises(ValueError, match="finished"):
        control.pause(store, run_id)


@pytest.mark.slow
def test_pause_resume_stop_and_sigkill(store):
    config = RunConfig(dataset="moons", model="logistic", steps=500_000, eval_every=1000)
    steered = control.start_run(config, store)
    killed = control.start_run(config, store)
    waiting.wait_for_step(store, steered, 5, timeout_s=120)

    assert waiting.wait_for_command(store, control.pause(store, steered))["status"] == "done"
    paused = waiting.wait_for_status(store, steered, "paused", timeout_s=10)
    time.sleep(1.5)
    again = store.run(steered)
    assert again["status"] == "paused" and again["step"] == paused["step"]
    assert again["heartbeat"] > paused["heartbeat"]  # beats while paused

    assert waiting.wait_for_command(store, control.resume(store, steered))["status"] == "done"
    waiting.wait_for_status(store, steered, "running", timeout_s=10)
    waiting.wait_for_step(store, steered, again["step"] + 50, timeout_s=30)
    assert waiting.wait_for_command(store, control.stop(store, steered))["status"] == "done"
    stopped = waiting.wait_for_status(store, steered, "stopped", timeout_s=30)
    assert "stopped" in stopped["message"]
    pool._PROCESSES[steered].wait(timeout=30)
    assert pool._PROCESSES[steered].returncode == 0

    waiting.wait_for_step(store, killed, 5, timeout_s=120)
    os.kill(pool._PROCESSES[killed].pid, signal.SIGKILL)
    pool._PROCESSES[killed].wait(timeout=30)
    pool.reap()
    assert killed not in pool._PROCESSES
    assert store.mark_interrupted() == [killed]
    run = store.run(killed)
    assert run["status"] == "interrupted" and run["step"] >= 5
    assert len(store.scalars(killed, ["train_loss"])) >= 5
    assert not store.slot_stats(killed).empty
