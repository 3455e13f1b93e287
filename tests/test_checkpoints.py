"""Checkpoints and Continue (`runs.process.checkpoint`, `runs.store.checkpoint_files`,
`runs.service.continuing`, `train --continue`): a run continued from its checkpoint at step k
ends equal to the same run never interrupted; a checkpoint survives SIGKILL (mid-write too);
a full disk keeps the previous checkpoint and the run trains on."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine import recording
from runs.service import continuing, control, pool
from runs.store import checkpoint_files as files
from runs.store import checkpoints
from runs.store.checkpoint_files import CheckpointError
from runs.store.run_store import RunStore
from settings import fields
from settings.run_config import RunConfig

DEVICE = "/device:CPU:0"
STEPS, K = 40, 17  # steps of the in-process runs; the checkpoint's step
SCHEDULE = {"class_name": "ExponentialDecay",
            "config": {"initial_learning_rate": 0.01, "decay_steps": 5, "decay_rate": 0.5}}
# before step -> (name, value) live changes, made while the run trains (before step K)
CHANGES = {3: [("learning_rate", 0.01), ("beta_1", 0.8)], 6: [("lr_schedule", SCHEDULE)]}
VARIANTS = {
    "default": (fields.page_defaults(), {}),
    "live-changes": (fields.page_defaults(), CHANGES),
    "sgd-momentum-regime": (RunConfig(optimizer="sgd", hyperparameters={"momentum": 0.0}),
                            {5: [("momentum", 0.9)]}),  # the fused regime: Python state
}


@pytest.fixture(scope="module")
def module_store(tmp_path_factory) -> RunStore:
    return RunStore(tmp_path_factory.mktemp("checkpoints") / "runs.sqlite")


def _loop(store: RunStore, config: RunConfig):
    from engine.train_step import Engine
    from runs.process.handlers import HANDLERS
    from runs.process.run_loop import RunLoop

    run_id = store.create_run(config.to_json_dict())
    return RunLoop(run_id, store, Engine(config, DEVICE), config.steps, config.eval_every,
                   recording.should_record, recording.should_histogram, HANDLERS)


def _change(run, name: str, value) -> None:
    payload = {"name": name, "value": value}
    command = run.store.send_command(run.run_id, "set_hyper", payload)
    assert run.handle({"id": command, "kind": "set_hyper",
                       "payload": json.dumps(payload)}) == "done"


def _state(run) -> list[np.ndarray]:
    from engine.prepared import _state as engine_variables

    return [v.numpy() for v in engine_variables(run.engine)]


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_continued_run_ends_equal_to_the_uninterrupted_run(module_store, variant):
    from runs.process import checkpoint

    config, changes = VARIANTS[variant]
    config = config.model_copy(update={"steps": STEPS, "eval_every": 10})
    first = _loop(module_store, config)
    while first.step < K:
        for name, value in changes.get(first.step + 1, []):
            _change(first, name, value)
        first.one_step()
    saver = checkpoint.Checkpointer(first, 5.0, module_store.run(first.run_id)["created"])
    assert saver.save() and saver.saved_step == K
    while first.step < STEPS:  # the same run, never interrupted
        first.one_step()
    second = _loop(module_store, config)  # a fresh process's engine
    meta, arrays = saver.place.read()
    checkpoint.restore(second, meta, arrays)
    assert second.step == K and second.engine.traces == first.engine.traces
    assert second.engine.optimizer.hyper_values() == first.engine.optimizer.hyper_values()
    while second.step < STEPS:
        second.one_step()
    want, got = _state(first), _state(second)
    assert len(want) == len(got) > 6  # weights, slots (Adam: m and v), iterations, hypers
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(want, got))
    assert worst <= 1e-6, f"max |weight/slot diff| {worst}"
    assert first.engine.evaluate() == second.engine.evaluate()
    first.close()
    second.close()


@pytest.mark.slow
def test_checkpoint_cost_and_a_full_disk(module_store, monkeypatch, capsys):
    """The default run's checkpoint costs milliseconds; a full disk keeps the previous one,
    is reported once (log and run event) and the run trains on."""
    from runs.process import checkpoint

    run = _loop(module_store, fields.page_defaults().model_copy(update={"steps": 100}))
    for _ in range(5):
        run.one_step()
    saver = checkpoint.Checkpointer(run, 5.0, module_store.run(run.run_id)["created"])
    costs = []
    for _ in range(5):
        assert saver.save()
        costs.append(saver.last_cost_s)
    print(f"checkpoint of the default digits MLP (Adam): {saver.bytes:,} bytes, "
          f"median {1000 * float(np.median(costs)):.1f} ms")
    assert float(np.median(costs)) < 0.25  # ~15 ms measured; every 5 s by default
    assert 900_000 < saver.bytes < 1_300_000  # ~85k parameters x (weight, m, v) x 4 bytes

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.np, "savez", full_disk)
    run.one_step()
    assert not saver.save() and not saver.save()
    assert "not written" in saver.failure and "step 5 is kept" in saver.failure
    assert saver.place.read_meta()["step"] == 5  # the previous checkpoint, whole
    assert not list(saver.place.path.parent.glob("*.tmp"))
    events = module_store.events(run.run_id)
    assert list(events["kind"]) == ["checkpoint_failed"]  # twice the same cause: once
    assert capsys.readouterr().err.count("No space left") == 1
    monkeypatch.undo()
    run.one_step()  # the run trains on
    assert saver.save() and saver.place.read_meta()["step"] == 7 and not saver.failure
    run.close()


@pytest.mark.parametrize("store_location", ["postgresql"], indirect=True)
def test_a_postgresql_store_holds_the_checkpoint_and_the_request_in_rows(any_store, tmp_path,
                                                                         monkeypatch):
    """Nodes that share no disk with the server reach the store: there the checkpoint is a row,
    replaced whole; a write the store refuses raises OSError and keeps the previous row."""
    from runs.store.files import StoreUnavailable

    store = any_store
    run_id = store.create_run(RunConfig().to_json_dict())
    place = checkpoints.of_run(store, run_id)
    assert isinstance(place, checkpoints.StoreCheckpoints)
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    for step in (3, 4):
        size = place.write({"w": weights + step}, {"format": files.FORMAT, "step": step})
    meta, arrays = place.read()
    assert meta == {"format": files.FORMAT, "step": 4} and arrays["w"].dtype == np.float32
    np.testing.assert_array_equal(arrays["w"], weights + 4)
    rows = store.frame("SELECT run_id, step, LENGTH(data) AS size FROM checkpoints", ())
    assert rows.values.tolist() == [[run_id, 4, size]]

    def unreachable():
        raise StoreUnavailable("the PostgreSQL server cannot be reached")

    with monkeypatch.context() as patch:
        patch.setattr(store, "immediate", unreachable)
        with pytest.raises(OSError, match=rf"the checkpoint of run {run_id} in the store "
                                          r"\S+ was not written \(the PostgreSQL server"):
            place.write({"w": weights}, {"format": files.FORMAT, "step": 5})
    assert place.read_meta()["step"] == 4  # the previous checkpoint, whole
    assert place.read_request() is None
    place.write_request({"from_step": 4})
    assert place.read_request() == {"from_step": 4}
    place.drop_request()
    assert place.read_request() is None
    place.write_request({"from_step": 4})
    place.discard()
    assert place.read_request() is None
    with pytest.raises(CheckpointError, match=rf"no checkpoint of run {run_id} in the store"):
        place.read_meta()
    assert not list(tmp_path.rglob("*.npz"))  # never a file


@pytest.mark.parametrize("store_location", ["postgresql"], indirect=True)
def test_a_checkpoint_table_from_before_its_meta_column_is_upgraded_and_read(any_store):
    """A PostgreSQL store whose `checkpoints` table predates the `meta` column: opening the
    store adds the column, the old row's document is read from its arrays, and a new
    checkpoint is written whole."""
    store = any_store
    run_id = store.create_run(RunConfig().to_json_dict())
    old = files.encode({"w": np.ones(3, np.float32)}, {"format": files.FORMAT, "step": 7})
    with store.immediate() as con:
        con.execute("ALTER TABLE checkpoints DROP COLUMN meta")
        con.execute("INSERT INTO checkpoints (run_id, written, step, data) VALUES (?, ?, ?, ?)",
                    (run_id, time.time(), 7, old))
    reopened = RunStore(store.path)
    place = checkpoints.of_run(reopened, run_id)
    assert place.read_meta() == {"format": files.FORMAT, "step": 7}
    place.write({"w": np.zeros(3, np.float32)}, {"format": files.FORMAT, "step": 8})
    assert place.read_meta() == {"format": files.FORMAT, "step": 8}
    np.testing.assert_array_equal(place.read()[1]["w"], np.zeros(3, np.float32))


_WRITER = """
import sys, numpy as np
from pathlib import Path
from runs.store import checkpoint_files as files
path, step = Path(sys.argv[1]), 0
while True:
    step += 1
    files.write_atomic(path, {"w": np.full(2_000_000, step, np.float32)}, {"format": 1,
                       "step": step})
    print(step, flush=True)
"""


def test_a_sigkill_mid_write_leaves_the_last_checkpoint_whole(tmp_path):
    """A process writing 8 MB checkpoints in a loop is killed at several moments: the latest
    checkpoint always reads whole (its array matches its step)."""
    path = tmp_path / "run-1" / files.LATEST
    for delay in (0.35, 0.5, 0.65):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                                stdout=subprocess.PIPE, cwd=Path(__file__).parents[1],
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        proc.stdout.readline()  # one checkpoint written
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        meta, arrays = files.read(path)
        assert meta["step"] >= 1 and np.all(arrays["w"] == meta["step"])


def _fake_checkpoint(store: RunStore, run_id: int, step: int) -> None:
    checkpoints.of_run(store, run_id).write({}, {"format": files.FORMAT, "step": step,
                                                  "run_created": store.run(run_id)["created"]})


@pytest.fixture()
def store_of_each_kind(any_store):
    """A store on each backend: checkpoints are files beside a SQLite store and rows of a
    PostgreSQL store (`runs.store.checkpoints`)."""
    return any_store


@pytest.fixture()
def ended_run(store_of_each_kind):
    """An interrupted run at step 30 (no process) with a checkpoint at step 20, and rows on
    both sides of it."""
    store = store_of_each_kind
    from engine.record_rows import HyperChangeRow, ScalarRow

    run_id = store.create_run(RunConfig(steps=100).to_json_dict())
    store.append(run_id, scalars=[ScalarRow(s, "train_loss", 1.0 / s) for s in (10, 20, 30)],
                 hyper_changes=[HyperChangeRow(1, "learning_rate", None, 0.001, "init"),
                                HyperChangeRow(25, "learning_rate", 0.001, 0.01, "user")],
                 step=30)
    store.set_status(run_id, "interrupted", "the run process ended without finishing")
    _fake_checkpoint(store, run_id, 20)
    store.send_command(run_id, "pause")  # never read by the dead process
    return run_id


def test_continue_requeues_drops_later_records_and_says_what_was_lost(store_of_each_kind,
                                                                      ended_run, monkeypatch):
    store = store_of_each_kind
    monkeypatch.setattr(pool, "dispatch", lambda store, size=None: [])
    done = continuing.continue_run(store, ended_run)
    note = "continued from step 20; 10 steps since the last checkpoint were lost"
    assert (done.from_step, done.lost_steps, done.dropped_changes) == (20, 10, 1)
    assert done.note == note + " (1 live change after it undone)"
    run = store.run(ended_run)
    assert (run["status"], run["step"], run["pid"]) == ("queued", 20, None)
    assert list(store.scalars(ended_run)["step"]) == [10, 20]
    assert list(store.hyper_changes(ended_run)["source"]) == ["init"]
    assert continuing.notes(store, ended_run) == [done.note]
    assert store.commands(ended_run)["status"].tolist() == ["refused"]
    assert checkpoints.of_run(store, ended_run).read_request()["from_step"] == 20
    with pytest.raises(ValueError, match=rf"continue of run #{ended_run} refused: the run is "
                                         "queued"):
        continuing.continue_run(store, ended_run)


def test_continue_refusals_name_the_run_and_why(store_of_each_kind, ended_run):
    store = store_of_each_kind
    from runs.service.ownership import Caller, NotOwner

    store.update_run(ended_run, owner=Caller("alice").owner)
    with pytest.raises(NotOwner, match=rf"continue of run #{ended_run} refused: the run "
                                       "belongs to another browser session"):
        continuing.continue_run(store, ended_run, caller=Caller("bob"))
    store.set_status(ended_run, "finished")
    with pytest.raises(ValueError, match="the run is finished; only an interrupted"):
        continuing.continue_run(store, ended_run)
    store.set_status(ended_run, "failed", "RuntimeError: boom")
    assert "failed (not because of the store)" in continuing.refusal(store, store.run(ended_run))
    store.set_status(ended_run, "failed", "failed after step 30: StoreUnavailable: full disk")
    assert continuing.refusal(store, store.run(ended_run)) == ""
    checkpoints.of_run(store, ended_run).discard()
    assert "it has no checkpoint" in continuing.refusal(store, store.run(ended_run))
    _fake_checkpoint(store, ended_run, 20)
    store.update_run(ended_run, created=1.0)  # a reused id: the checkpoint is another run's
    assert "it has no checkpoint" in continuing.refusal(store, store.run(ended_run))
    follows = store.create_run(RunConfig(hypergradients=["learning_rate"]).to_json_dict())
    store.set_status(follows, "stopped")
    assert "follows hyper-gradients" in continuing.refusal(store, store.run(follows))
    control.delete(store, ended_run)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        checkpoints.of_run(store, ended_run).read_meta()


def test_the_cli_refuses_continue_with_config_flags_or_an_unknown_run(store, capsys):
    from lab_cli import cli

    for argv, fragment in ((["--continue", "1", "--steps", "5"], "refused with steps"),
                           (["--continue", "99"], "run 99 is not in the store")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["train", *argv, "--store", str(store.path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "error: argument --continue: " in err and fragment in err, err


@pytest.mark.slow
def test_a_sigkilled_run_continues_with_the_cli_to_the_uninterrupted_records(
        store_of_each_kind, monkeypatch, capsys):
    """A real run process is killed with SIGKILL mid-run (checkpoints every 0.2 s); `train
    --continue ID` requeues it; trained on (in this process) it finishes with the same records
    as the same run trained without interruption. On each backend: a PostgreSQL store holds
    the checkpoint itself, no file."""
    store = store_of_each_kind
    from lab_cli import cli
    from runs.process import worker

    monkeypatch.setenv(files.EVERY_ENV, "0.2")
    monkeypatch.setenv(pool.NICE_ENV, "0")
    config = fields.page_defaults().model_copy(update={"steps": 600, "eval_every": 100})
    # a cold process, paced so that it is still training when this test kills it (6 s)
    run_id = control.start_run(config, store, steps_per_second=100)
    place = checkpoints.of_run(store, run_id)
    deadline, seen = time.monotonic() + 240, 0  # a cold start on a loaded machine: up to ~70 s
    while time.monotonic() < deadline and seen < 60:
        try:
            seen = place.read_meta()["step"]
        except CheckpointError:
            pass  # not written yet
        time.sleep(0.05)
    assert seen >= 60 and store.run(run_id)["status"] == "running", store.run(run_id)
    os.kill(store.run(run_id)["pid"], signal.SIGKILL)
    pool._PROCESSES[run_id].wait()
    assert store.run(run_id)["status"] == "running"  # nobody has looked yet
    monkeypatch.setattr(pool, "dispatch", lambda store, size=None: [])  # trained here instead
    assert cli.main(["train", "--continue", str(run_id), "--store", str(store.path),
                     "--detach"]) == 0
    err = capsys.readouterr().err
    k = place.read_meta()["step"]
    assert f"run {run_id} continued from step {k:,};" in err
    assert store.run(run_id)["status"] == "queued" and store.run(run_id)["step"] == k
    assert store.claim_queued(2) == [run_id]
    control.set_speed(store, run_id, None)  # after the pace the continue carried over
    assert worker.train(run_id, store) == "finished"
    again = store.create_run(config.to_json_dict(), status="starting")
    assert worker.train(again, store) == "finished"
    # in step order; within a step by name (PostgreSQL returns the ties of a step in any order)
    got, want = (store.scalars(run).sort_values(["step", "name"], kind="stable")
                 for run in (run_id, again))
    assert not got.duplicated(["name", "step"]).any()
    assert got[["step", "name"]].values.tolist() == want[["step", "name"]].values.tolist()
    np.testing.assert_allclose(got["value"], want["value"], rtol=0, atol=1e-6)
    with pytest.raises(CheckpointError, match="no checkpoint"):  # finished: nothing to continue
        place.read_meta()


def test_the_runs_page_continues_an_interrupted_run_of_its_owner(store_of_each_kind, ended_run,
                                                                  monkeypatch):
    store = store_of_each_kind
    """Continue on the Runs page (AppTest): the owner's button says the checkpoint's step,
    a click requeues the run and the page says how many steps were lost; another session's
    button is disabled with the reason."""
    from components import session_runs
    from runs.service.ownership import Caller
    from tests._pages import page_test

    token = "c" * 43
    store.update_run(ended_run, owner=Caller(token).owner)
    store.add_event(ended_run, files.FAILED_EVENT, "", "the checkpoint at step 25 was not "
                    "written ([Errno 28] No space left on device); the checkpoint at step 20 "
                    "is kept")
    monkeypatch.setattr(pool, "dispatch", lambda store, size=None: [])  # no process here
    stranger = page_test("runs")
    stranger.session_state[session_runs._TOKEN] = "s" * 43
    stranger.run()
    assert not stranger.exception, stranger.exception
    button = stranger.button(key=f"runs_continue_{ended_run}")
    assert button.disabled and "only the session that started" in button.help
    at = page_test("runs")
    at.session_state[session_runs._TOKEN] = token
    at.run()
    button = at.button(key=f"runs_continue_{ended_run}")
    assert button.label == "Continue from step 20" and not button.disabled
    assert "No space left on device); the checkpoint at step 20 is kept" in at.warning[0].value
    button.click().run()
    assert not at.exception, at.exception
    lost = "continued from step 20; 10 steps since the last checkpoint were lost"
    assert lost in at.success[0].value
    assert store.run(ended_run)["status"] == "queued"
    assert any(lost in caption.value for caption in at.caption)
    assert not [b for b in at.button if b.key == f"runs_continue_{ended_run}"]  # queued now
