"""Run hosts: many runs in one TensorFlow process, isolated from each other.

In-process (one shared fixture): a `HostScheduler` interleaves seven runs of the default model
(digits/mlp) step by step; at step `K` one run raises inside its step, one diverges, one is
stopped, one is paused (and never resumed) and one gets `_set_hyper` changes (one of them a
retrace). The two runs left alone end bit-equal (<= 1e-6) to the same runs trained alone, and
no variable, traced function or trace count is shared. Slow tests start a real host process:
a SIGKILLed host's runs are `interrupted` with the truth and keep every committed record; a
SIGSTOPped host's runs are stalled, not interrupted.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from runs.protocol import FINAL_STATUSES
from runs.store import run_store as store_module
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

K = 8  # the step at which the faults and commands happen
STEPS = 40
BASE = dict(dataset="digits", model="mlp", steps=STEPS, eval_every=10, batch_size=64)
# name -> config; the two `keep_*` runs must end as if trained alone
CONFIGS = {
    "keep_adam": RunConfig(**BASE, optimizer="adam", seed=1),
    "keep_sgd": RunConfig(**BASE, optimizer="sgd", seed=2,
                          hyperparameters={"learning_rate": 0.05, "momentum": 0.0}),
    "changed": RunConfig(**BASE, optimizer="sgd", seed=2,
                         hyperparameters={"learning_rate": 0.05, "momentum": 0.0}),
    "raises": RunConfig(**BASE, optimizer="adam", seed=3),
    "diverges": RunConfig(**BASE, optimizer="adam", seed=4),
    "stopped": RunConfig(**BASE, optimizer="rmsprop", seed=5),
    "paused": RunConfig(**BASE, optimizer="adam", seed=6),
}


def _engine(config, device):
    from engine.train_step import Engine

    return Engine(config, device)


def _state(engine) -> list[np.ndarray]:
    from engine.prepared import _state as variables

    return [np.array(v.numpy()) for v in variables(engine)]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b]
    return max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    """The seven runs trained together in one scheduler, plus the keepers trained alone."""
    from runs.process.host_scheduler import HostScheduler
    from runs.process.run_session import RunSession

    store = RunStore(tmp_path_factory.mktemp("hosts") / "runs.sqlite")
    ids = {name: store.create_run(c.to_json_dict()) for name, c in CONFIGS.items()}
    scheduler = HostScheduler()
    sessions = {name: RunSession(store, ids[name], engine_source=_engine) for name in CONFIGS}
    for session in sessions.values():
        assert scheduler.open_and_add(session) is None
    engines = {name: s.run.engine for name, s in sessions.items()}
    traces_before = {name: e.traces for name, e in engines.items()}
    lr_keep_sgd = float(engines["keep_sgd"].optimizer._get_hyper("learning_rate"))
    done = False
    rounds = 0
    while scheduler.sessions:
        scheduler.round()
        rounds += 1
        if not done and sessions["keep_adam"].run.step == K:
            done = True
            assert {s.run.step for s in scheduler.sessions} == {K}  # one step each per round

            def boom():
                raise RuntimeError(f"boom inside the step after step {K}")

            sessions["raises"].run.one_step = boom
            kernel = engines["diverges"].model.trainable_variables[0]
            kernel.assign(np.full(kernel.shape, np.nan, np.float32))
            for name, kind, payload in [
                ("stopped", "stop", {}), ("paused", "pause", {}),
                ("changed", "set_hyper", {"name": "learning_rate", "value": 0.2}),
                ("changed", "set_hyper", {"name": "momentum", "value": 0.9}),  # a retrace
            ]:
                store.send_command(ids[name], kind, payload)
                sessions[name].run.poll()
        if sessions["paused"].run is not None and scheduler.sessions == [sessions["paused"]]:
            paused_step = sessions["paused"].run.step
            paused_status = store.run(ids["paused"])["status"]
            t0 = time.monotonic()
            stepped = scheduler.steps
            for _ in range(5):  # a paused run alone: rounds do no step and do not spin
                scheduler.round()
                time.sleep(max(0.0, scheduler.next_wake(0) - time.monotonic()))
            paused_rounds_s = time.monotonic() - t0
            assert scheduler.steps == stepped
            sessions["paused"].stop("stopped by the test")
    hosted_state = {name: _state(e) for name, e in engines.items()}
    # the keepers alone, each in a scheduler of its own (the same code as a cold process)
    alone = {}
    for name in ("keep_adam", "keep_sgd"):
        run_id = store.create_run(CONFIGS[name].to_json_dict())
        solo = RunSession(store, run_id, engine_source=_engine)
        assert solo.open() is None
        status, message = solo.run.loop(None)
        solo.end(status, message)
        solo.close()
        alone[name] = (run_id, _state(solo.run.engine))
    return dict(store=store, ids=ids, engines=engines, hosted=hosted_state, alone=alone,
                traces_before=traces_before, lr_keep_sgd=lr_keep_sgd, rounds=rounds,
                paused=(paused_step, paused_status, paused_rounds_s))


def test_faults_and_commands_end_only_their_own_run(hosted):
    store, ids = hosted["store"], hosted["ids"]
    runs = {name: store.run(i) for name, i in ids.items()}
    assert runs["keep_adam"]["status"] == runs["keep_sgd"]["status"] == "finished"
    assert runs["keep_adam"]["step"] == runs["keep_sgd"]["step"] == STEPS
    assert runs["changed"]["status"] == "finished" and runs["changed"]["step"] == STEPS
    assert runs["raises"]["status"] == "failed"
    assert runs["raises"]["message"] == f"RuntimeError: boom inside the step after step {K}"
    assert runs["diverges"]["status"] == "diverged"
    assert runs["diverges"]["message"].startswith(f"diverged at step {K + 1}: ")
    assert runs["stopped"]["status"] == "stopped" and runs["stopped"]["step"] == K
    paused_step, paused_status, paused_rounds_s = hosted["paused"]
    assert paused_step == K and paused_status == "paused"
    assert paused_rounds_s >= 0.3  # 5 rounds of a paused run waited for its polls (0.1 s)
    assert runs["paused"]["status"] == "stopped"
    # every run's records are its own: steps 0..end of its own validation loss
    for name in ("keep_adam", "keep_sgd"):
        val = store.scalars(ids[name], ["val_loss"])
        assert val["step"].tolist() == [0, 10, 20, 30, 40]


def test_runs_left_alone_end_equal_to_the_same_runs_trained_alone(hosted):
    for name in ("keep_adam", "keep_sgd"):
        run_id, alone = hosted["alone"][name]
        assert _max_diff(hosted["hosted"][name], alone) <= 1e-6
        store = hosted["store"]
        together = store.scalars(hosted["ids"][name], ["train_loss", "val_loss"])
        solo = store.scalars(run_id, ["train_loss", "val_loss"])
        assert together["value"].tolist() == solo["value"].tolist()


def test_no_variable_trace_or_function_is_shared(hosted):
    engines = hosted["engines"]
    owners: dict[int, str] = {}
    from engine.prepared import _state as variables

    for name, engine in engines.items():
        for variable in variables(engine):
            assert owners.setdefault(id(variable), name) == name, (name, variable.name)
        functions = {id(f) for compile_ in engine.train_functions for f in compile_.values()}
        for other, other_engine in engines.items():
            if other != name:
                theirs = {id(f) for c in other_engine.train_functions for f in c.values()}
                assert not functions & theirs, (name, other)
    # `_set_hyper` on `changed`: its learning rate and its trace count changed, nobody else's
    changed, keep = engines["changed"], engines["keep_sgd"]
    assert float(changed.optimizer._get_hyper("learning_rate")) == pytest.approx(0.2)
    assert float(changed.optimizer._get_hyper("momentum")) == pytest.approx(0.9)
    assert float(keep.optimizer._get_hyper("learning_rate")) == hosted["lr_keep_sgd"] == \
        pytest.approx(0.05)
    assert float(keep.optimizer._get_hyper("momentum")) == 0.0
    assert changed.traces == hosted["traces_before"]["changed"] + 1 == 2
    assert changed.tracing_count() == changed.traces
    for name, engine in engines.items():
        if name != "changed":
            assert engine.traces == hosted["traces_before"][name] == engine.tracing_count() == 1
    store = hosted["store"]
    assert store.run(hosted["ids"]["changed"])["traces"] == 2
    assert store.run(hosted["ids"]["keep_sgd"])["traces"] == 1


# ----- slow: a real host process --------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.warm
def test_a_stopped_host_is_stalled_and_a_killed_host_interrupts_its_runs_truthfully(
        store, monkeypatch):
    """One host, three runs. SIGSTOP: after `STALE_AFTER` of silence the runs are stalled, not
    interrupted; SIGCONT: they train on. A stop of one run goes through its commands while the
    others train. SIGKILL: the two runs left are `interrupted`, the message names the host,
    its pid and the last committed step, and every record committed before stays."""
    from runs.service import control, pool, waiting, warm_pool, worker_table
    from runs.store.processes import pid_alive

    monkeypatch.setenv(pool.HOSTS_ENV, "1")
    monkeypatch.delenv(pool.WARM_ENV, raising=False)
    monkeypatch.setattr(store_module, "STALE_AFTER", 4.0)
    kept = warm_pool.keep_warm(store)
    try:
        kept.wait_ready(1, timeout_s=300)
        host, = worker_table.spares(store)
        tiny = dict(dataset="moons", model="logistic", eval_every=20, steps=1_000_000)
        ids = [control.start_run(RunConfig(**tiny, seed=seed), store) for seed in (1, 2, 3)]
        for run_id in ids:
            run = waiting.wait_for_step(store, run_id, 20, timeout_s=180)
            assert run["worker"] == f"host {host['id']}" and run["pid"] == host["pid"]
        os.kill(host["pid"], signal.SIGSTOP)
        try:
            time.sleep(6)
            assert store.mark_interrupted() == []
            for run_id in ids:
                run = store.run(run_id)
                assert run["status"] == "running" and store.stalled_for(run) > 4
        finally:
            os.kill(host["pid"], signal.SIGCONT)
        steps = {i: store.run(i)["step"] for i in ids}
        for run_id in ids:
            waiting.wait_for_step(store, run_id, steps[run_id] + 20, timeout_s=60)
        stopped = ids[0]
        control.stop(store, stopped)
        assert waiting.wait_for_status(store, stopped, FINAL_STATUSES,
                                       timeout_s=60)["status"] == "stopped"
        assert pid_alive(host["pid"])  # the host trains the others on
        for run_id in ids[1:]:
            waiting.wait_for_step(store, run_id, store.run(run_id)["step"] + 20, timeout_s=60)
        committed = {i: store.scalars(i, ["train_loss", "val_loss"]) for i in ids[1:]}
        os.kill(host["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pid_alive(host["pid"]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert sorted(pool.check_processes(store)) == ids[1:]
        for run_id in ids[1:]:
            run = store.run(run_id)
            assert run["status"] == "interrupted"
            assert run["message"] == (
                f"its run host {host['id']} (pid {host['pid']}) died: interrupted after step "
                f"{run['step']}, the last committed step; every record up to it is kept")
            after = store.scalars(run_id, ["train_loss", "val_loss"])
            kept_rows = after.merge(committed[run_id], how="inner")
            assert len(kept_rows) == len(committed[run_id])  # nothing committed was lost
            assert after["step"].max() <= run["step"]
        assert store.run(stopped)["status"] == "stopped"
    finally:
        warm_pool.shutdown()
