"""The correctness check from the Hyper-gradients page is bounded (issue 16): one running per
server, and a configuration's result computed once."""

from __future__ import annotations

import json

from components import correctness_runner as runner

CONFIG = {"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.05}, "options": {}}


def test_a_second_check_is_refused_while_one_runs(monkeypatch):
    started = []
    monkeypatch.setattr(runner, "run_correctness", lambda c: started.append(c) or {"rows": []})
    runner._cached.clear()
    slots = runner.running_slots()
    assert slots.acquire(blocking=False)  # a check is running (another session's)
    try:
        result = runner.check(CONFIG)
    finally:
        slots.release()
    assert result["error"].startswith("refused: 1 correctness check(s) already running")
    assert started == []  # no process started


def test_a_configuration_is_checked_once(monkeypatch):
    started = []
    monkeypatch.setattr(runner, "run_correctness",
                        lambda c: started.append(c) or {"rows": [], "passed": True})
    runner._cached.clear()
    for _ in range(3):  # three clicks, two sessions: one process
        assert runner.check(CONFIG) == {"rows": [], "passed": True}
    assert len(started) == 1 and started[0]["optimizer"] == "sgd"
    runner.check({**CONFIG, "hyperparameters": {"learning_rate": 0.1}})
    assert len(started) == 2  # another configuration is another check
    runner._cached.clear()


def test_a_schedule_or_decay_is_another_configuration_and_reaches_the_cli(monkeypatch):
    started = []
    monkeypatch.setattr(runner, "run_correctness",
                        lambda c: started.append(c) or {"rows": [], "passed": True})
    runner._cached.clear()
    schedule = {"class_name": "ExponentialDecay",
                "config": {"initial_learning_rate": 0.05, "decay_steps": 6, "decay_rate": 0.7,
                           "staircase": False}}
    runner.check(CONFIG)
    runner.check({**CONFIG, "lr_schedule": schedule})
    runner.check({**CONFIG, "lr_schedule": schedule, "decay": 0.01})
    runner.check({**CONFIG, "lr_schedule": None, "decay": 0.0})  # = CONFIG: cached
    assert len(started) == 3
    assert started[2]["lr_schedule"] == schedule and started[2]["decay"] == 0.01
    runner._cached.clear()


def test_the_command_line_carries_schedule_and_decay(monkeypatch):
    seen = {}

    class Done:
        stdout, stderr, returncode = '{"rows": [], "passed": true}\n', "", 0

    def fake_run(args, **kwargs):
        seen["args"] = args
        return Done()

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    schedule = {"class_name": "CosineDecay", "config": {"initial_learning_rate": 0.01,
                                                        "decay_steps": 15}}
    assert runner.run_correctness({**CONFIG, "lr_schedule": schedule, "decay": 0.02})["passed"]
    args = seen["args"]
    assert args[args.index("--lr-schedule") + 1] == json.dumps(schedule)
    assert args[args.index("--decay") + 1] == "0.02"
