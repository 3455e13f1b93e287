"""A run with a learning-rate schedule: the effective rate it records, and live schedule
changes (an assign without retrace vs a class change that costs exactly one retrace)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import recording
from engine.record_rows import HyperChangeRow
from engine.train_step import Engine
from schedules.preview import schedule_curve
from runs.process.handlers import HANDLERS, TRACES_ROW
from runs.process.run_loop import RunLoop
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

EXPONENTIAL = {"class_name": "ExponentialDecay",
               "config": {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.5}}


def make_run(tmp_path, **settings) -> tuple[RunLoop, RunStore, int]:
    config = RunConfig(optimizer="sgd", dataset="moons", model="logistic", batch_size=32,
                       steps=200, eval_every=1000, **settings)
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    engine = Engine(config, "/CPU:0")
    run = RunLoop(run_id, store, engine, total=config.steps, eval_every=config.eval_every,
                  record=lambda s: s % 3 == 1, histogram=lambda s: False, handlers=HANDLERS)
    run.buffers["hyper_changes"] = [HyperChangeRow(1, n, None, v, "init")
                                    for n, v in engine.optimizer.hyper_values().items()]
    return run, store, run_id


def send(run: RunLoop, name: str, value, source: str = "user") -> str:
    command_id = run.store.send_command(run.run_id, "set_hyper",
                                        {"name": name, "value": value, "source": source})
    return run.handle({"id": command_id, "kind": "set_hyper",
                       "payload": json.dumps({"name": name, "value": value, "source": source})})


def effective(store: RunStore, run_id: int):
    rows = store.scalars(run_id, [recording.EFFECTIVE_LR])
    return rows["step"].to_numpy(int), rows["value"].to_numpy(float)


def test_exponential_decay_run_records_the_effective_rate_of_every_recorded_step(tmp_path):
    run, store, run_id = make_run(tmp_path, lr_schedule=EXPONENTIAL, decay=0.01)
    try:
        for _ in range(20):
            run.one_step()
        run.flush(wait=True)
        steps, values = effective(store, run_id)
        assert steps.tolist() == [1, 4, 7, 10, 13, 16, 19]  # the recorded steps (s % 3 == 1)
        # step s uses iterations s - 1: 0.1 * 0.5 ** ((s - 1) / 7) / (1 + 0.01 * (s - 1))
        expected = 0.1 * 0.5 ** ((steps - 1) / 7) / (1 + 0.01 * (steps - 1))
        np.testing.assert_allclose(values, expected, rtol=1e-6)
        np.testing.assert_allclose(values, schedule_curve(run.engine.config.lr_schedule,
                                                          steps - 1, decay=0.01), rtol=1e-6)
        changes = store.hyper_changes(run_id)
        init = changes[changes["source"] == "init"].set_index("name")["new"]
        # the schedule's numbers join the trace in place of the (replaced) learning_rate
        assert init["lr_schedule.initial_learning_rate"] == pytest.approx(0.1)
        assert init["lr_schedule.decay_steps"] == 7 and "learning_rate" not in init
        assert run.engine.optimizer.get_config()["decay"] == 0.01
        variables = {v["name"]: v["value"] for v in run.engine.hyper_variables()}
        assert variables["lr_schedule.decay_rate"] == 0.5 and "learning_rate" not in variables
    finally:
        run.close()


def test_a_parameter_change_is_an_assign_with_no_retrace(tmp_path):
    run, store, run_id = make_run(tmp_path, lr_schedule=EXPONENTIAL)
    try:
        for _ in range(5):
            run.one_step()
        traces = (run.engine.traces, run.engine.tracing_count())
        assert traces == (1, 1)
        changed = {**EXPONENTIAL, "config": {**EXPONENTIAL["config"],
                                             "initial_learning_rate": 0.2, "decay_rate": 0.25}}
        assert send(run, "lr_schedule", changed) == "done"
        assert (run.engine.traces, run.engine.tracing_count()) == traces  # no retrace
        # the next step (6, iterations 5) uses the new numbers
        assert run.engine.effective_learning_rate() == pytest.approx(0.2 * 0.25 ** (5 / 7),
                                                                      rel=1e-6)
        run.one_step()
        assert run.engine.optimizer.iterations.numpy() == 6
        assert run.engine.tracing_count() == 1
        rows = store.hyper_changes(run_id)
        user = rows[rows["source"] == "user"].set_index("name")
        assert user.loc["lr_schedule.initial_learning_rate", "old"] == pytest.approx(0.1)
        assert user.loc["lr_schedule.initial_learning_rate", "new"] == pytest.approx(0.2)
        assert user.loc["lr_schedule.decay_rate", "step"] == 6
        assert TRACES_ROW not in user.index
    finally:
        run.close()


def test_a_class_change_retraces_exactly_once_and_the_count_is_recorded(tmp_path):
    run, store, run_id = make_run(tmp_path, lr_schedule=EXPONENTIAL)
    try:
        for _ in range(4):
            run.one_step()
        cosine = {"class_name": "CosineDecay",
                  "config": {"initial_learning_rate": 0.05, "decay_steps": 40}}
        assert send(run, "lr_schedule", cosine) == "done"
        assert (run.engine.traces, run.engine.tracing_count()) == (2, 2)
        run.one_step()  # step 5, iterations 4
        run.one_step()
        assert run.engine.tracing_count() == 2  # no further retrace
        lr = run.engine.effective_learning_rate()  # iterations 6
        assert lr == pytest.approx(0.05 * 0.5 * (1 + np.cos(np.pi * 6 / 40)), rel=1e-6)
        rows = store.hyper_changes(run_id)
        traced = rows[rows["name"] == TRACES_ROW]
        assert traced[["step", "old", "new"]].values.tolist() == [[5, 1, 2]]
        assert "ExponentialDecay -> CosineDecay (retrace)" in traced["source"].iloc[0]
        assert store.run(run_id)["traces"] == 2
        # back to a constant rate, then a new decay: one retrace each
        assert send(run, "lr_schedule", None) == "done"
        assert send(run, "decay", 0.5) == "done"
        assert run.engine.tracing_count() == 4
        assert run.engine.effective_learning_rate() == pytest.approx(lr / (1 + 0.5 * 6),
                                                                      rel=1e-6)
    finally:
        run.close()


def test_bad_live_schedules_are_refused_naming_the_field_and_nothing_changes(tmp_path):
    run, store, run_id = make_run(tmp_path, lr_schedule=EXPONENTIAL)
    try:
        run.one_step()
        bad = {**EXPONENTIAL, "config": {**EXPONENTIAL["config"], "decay_steps": 0}}
        assert send(run, "lr_schedule", bad) == "refused"
        assert send(run, "lr_schedule", {"class_name": "os.system", "config": {}}) == "refused"
        assert send(run, "decay", -1.0) == "refused"
        assert send(run, "learning_rate", 0.5) == "refused"  # the schedule replaces it
        messages = store.commands(run_id)["message"].tolist()
        assert "lr_schedule.config.decay_steps=0 refused" in messages[0]
        assert "lr_schedule.class_name='os.system' refused" in messages[1]
        assert "decay=-1.0 refused" in messages[2]
        assert "ExponentialDecay schedule" in messages[3]
        assert run.engine.tracing_count() == 1
        assert run.engine.schedule_values()["config"]["decay_steps"] == 7
    finally:
        run.close()


def test_a_schedule_switched_on_from_now_starts_at_its_value_for_step_0(tmp_path):
    run, store, run_id = make_run(tmp_path, hyperparameters={"learning_rate": 0.01})
    try:
        for _ in range(12):
            run.one_step()
        assert send(run, "lr_schedule", {**EXPONENTIAL, "start_step": "now"}) == "done"
        assert run.engine.schedule_values()["start_step"] == 12
        # the next step (13, iterations 12) reads the schedule at 0: its initial rate, not
        # 0.1 * 0.5 ** (12 / 7) as "from step 0" would give
        assert run.engine.effective_learning_rate() == pytest.approx(0.1, rel=1e-6)
        for _ in range(7):
            run.one_step()
        # seven steps later (iterations 19): one decay period
        assert run.engine.effective_learning_rate() == pytest.approx(0.05, rel=1e-6)
        run.flush(wait=True)
        steps, values = effective(store, run_id)
        recorded = dict(zip(steps.tolist(), values.tolist()))
        assert recorded[10] == pytest.approx(0.01, rel=1e-6)  # the constant rate is recorded too
        assert recorded[13] == pytest.approx(0.1, rel=1e-6)
        np.testing.assert_allclose(
            [recorded[s] for s in (13, 16, 19)],
            schedule_curve(run.engine.schedule_values(), np.array([12, 15, 18])), rtol=1e-6)
        changes = store.hyper_changes(run_id).set_index("name")
        assert changes.loc["lr_schedule.start_step", "new"] == 12
        # the optimizer's config is Keras's wrapper form, and it rebuilds the same schedule
        saved = run.engine.optimizer.get_config()["learning_rate"]
        assert saved["class_name"] == "ScheduleFromStep"
        assert saved["config"]["start_step"] == 12
        from optimizers.keras_schedules import schedule_from_config
        rebuilt = schedule_from_config("learning_rate", saved)
        assert float(rebuilt(18)) == pytest.approx(0.1 * 0.5 ** (6 / 7), rel=1e-6)
        # new numbers of the started schedule: an assign that keeps its start
        traces = run.engine.tracing_count()
        faster = {**EXPONENTIAL, "config": {**EXPONENTIAL["config"], "decay_rate": 0.25},
                  "start_step": 12}
        assert send(run, "lr_schedule", faster) == "done"
        assert run.engine.tracing_count() == traces
        assert run.engine.effective_learning_rate() == pytest.approx(0.1 * 0.25 ** (7 / 7),
                                                                      rel=1e-6)
    finally:
        run.close()


def test_start_step_is_checked_and_shifts_the_preview():
    from schedules.preview import schedule_marks
    from schedules.table import ScheduleError, validate_schedule
    started = validate_schedule("lr_schedule", {**EXPONENTIAL, "start_step": 100})
    assert started["start_step"] == 100
    np.testing.assert_allclose(schedule_curve(started, np.array([0, 100, 107])),
                               [0.1, 0.1, 0.05], rtol=1e-12)
    stair = {**EXPONENTIAL, "config": {**EXPONENTIAL["config"], "staircase": True}}
    assert schedule_marks({**stair, "start_step": 100}, 120)[:2] == [(108, "staircase"),
                                                                   (115, "staircase")]
    for bad in (-1, 2.5, "soon", True):
        with pytest.raises(ScheduleError, match="lr_schedule.start_step="):
            validate_schedule("lr_schedule", {**EXPONENTIAL, "start_step": bad})
    with pytest.raises(ScheduleError, match="start_step='now'"):
        validate_schedule("lr_schedule", {**EXPONENTIAL, "start_step": "now"})
    assert validate_schedule("lr_schedule", {**EXPONENTIAL, "start_step": "now"},
                             allow_now=True)["start_step"] == "now"
    with pytest.raises(ValueError, match="start_step=5 refused with hypergradients"):
        RunConfig(optimizer="sgd", lr_schedule={**EXPONENTIAL, "start_step": 5},
                  hypergradients=["lr_schedule.decay_rate"])
