"""A stalled run is not a dead run (issue 16 item 3): a run whose process lives (same pid AND
same start time) but has been silent beyond `STALE_AFTER` stays active, keeps its pool place,
can be stopped (SIGKILL) and cannot be deleted; a dead process or a reused pid is still
marked interrupted. A sleeping child process stands in for the worker; one slow test freezes a
real worker with SIGSTOP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from runs.service import control, pool, waiting
from runs.store import run_store as store_module
from runs.store.processes import pid_alive, process_start
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

TINY = dict(dataset="moons", model="logistic", eval_every=50)


@pytest.fixture()
def child():
    """A sleeping process standing in for a run worker; killed afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def silent_run(store: RunStore, pid: int, start: int | None, silent_s: float = 100.0) -> int:
    """An active run whose process is `pid` and whose last heartbeat is `silent_s` s old."""
    run_id = store.create_run(RunConfig(**TINY, steps=100).to_json_dict())
    then = time.time() - silent_s
    store.update_run(run_id, status="running", pid=pid, pid_start=start, heartbeat=then)
    with store._connect() as con:  # update_run bumps `updated`, not `created`
        con.execute("UPDATE runs SET created = ? WHERE id = ?", (then, run_id))
    return run_id


def test_process_start_tells_processes_apart(child):
    start = process_start(child.pid)
    assert start is not None and start > 0
    assert process_start(os.getpid()) != start or os.getpid() == child.pid
    assert process_start(2**22 + 12345) is None


def test_a_silent_live_process_is_stalled_not_interrupted(store, child):
    run_id = silent_run(store, child.pid, process_start(child.pid))
    assert store.mark_interrupted() == []
    run = store.run(run_id)
    assert run["status"] == "running"
    assert store.stalled_for(run) == pytest.approx(100, abs=5)
    # it keeps its pool place: a queued run does not start in a pool of 1
    queued = store.create_run(RunConfig(**TINY, steps=10).to_json_dict(), status="queued")
    assert store.claim_queued(1) == []
    assert store.run(queued)["status"] == "queued"
    # it cannot be deleted while its process lives
    with pytest.raises(ValueError, match=rf"delete of run #{run_id} refused: the run is running"):
        control.delete(store, run_id)


def test_stop_of_a_stalled_run_kills_it_and_frees_its_place(store, child):
    run_id = silent_run(store, child.pid, process_start(child.pid))
    queued = store.create_run(RunConfig(**TINY, steps=10).to_json_dict(), status="queued")
    os.kill(child.pid, signal.SIGSTOP)  # frozen: it would never read a `stop` command
    launched = []
    original = pool.dispatch

    def fake_dispatch(store, size=None):  # no TensorFlow worker for the queued run
        launched.extend(store.claim_queued(1))
        return launched

    pool.dispatch = fake_dispatch
    try:
        assert control.stop(store, run_id) is None
    finally:
        pool.dispatch = original
    run = store.run(run_id)
    assert run["status"] == "stopped"
    assert run["message"].startswith("stopped while stalled (no heartbeat for 10")
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert list(store.events(run_id)["kind"]) == ["stalled_stop"]
    assert launched == [queued]  # its place went to the next run only once it was dead
    control.delete(store, run_id)  # now it may go


def test_a_dead_or_reused_pid_is_still_interrupted(store, child):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = silent_run(store, gone.pid, 12345, silent_s=1)  # process gone: at once
    reused = silent_run(store, child.pid, process_start(child.pid) + 1)  # another process
    unknown = silent_run(store, child.pid, None)  # launched before start times were recorded
    fresh = silent_run(store, child.pid, None, silent_s=1)  # silent but not yet for long
    assert sorted(store.mark_interrupted()) == sorted([dead, reused, unknown])
    assert store.run(fresh)["status"] == "running"
    assert store.run(reused)["message"] == "the run process ended without finishing"


@pytest.fixture()
def store(any_store):
    """A fresh store, once on SQLite and once on PostgreSQL (tests/conftest.py); run
    processes started by the test are killed afterwards."""
    yield any_store
    for proc in list(pool._PROCESSES.values()):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pool.reap()


@pytest.mark.slow
@pytest.mark.parametrize("store_location", ["sqlite"], indirect=True)  # a real run: once
def test_a_real_worker_frozen_with_sigstop_stays_active(store, monkeypatch):
    """`kill -STOP` a real run process for longer than STALE_AFTER (shortened to 4 s here),
    then `kill -CONT`: it was never interrupted, kept its place, and trains on; frozen again,
    Stop kills it and the queued run starts."""
    monkeypatch.setattr(store_module, "STALE_AFTER", 4.0)
    monkeypatch.setenv(pool.POOL_SIZE_ENV, "1")
    run_id = control.start_run(RunConfig(**TINY, steps=1_000_000), store)
    nxt = control.start_run(RunConfig(**TINY, steps=1_000_000, seed=1), store)
    run = waiting.wait_for_status(store, run_id, "running", timeout_s=180)
    pid = run["pid"]
    assert run["pid_start"] == process_start(pid)
    waiting.wait_for_step(store, run_id, 20, timeout_s=120)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(7)
    run = store.run(run_id)
    assert run["status"] == "running" and store.stalled_for(run) > 4
    pool.dispatch(store)
    assert store.run(nxt)["status"] == "queued"  # no second run in a pool of 1
    with pytest.raises(ValueError, match="refused"):
        control.delete(store, run_id)
    step = run["step"]
    os.kill(pid, signal.SIGCONT)
    run = waiting.wait_for_step(store, run_id, step + 50, timeout_s=60)
    # the first batch written after SIGCONT may be one built before SIGSTOP (its heartbeat time
    # too): the run counts as live again at the next heartbeat (every HEARTBEAT_S = 1 s)
    deadline = time.monotonic() + 30
    while store.stalled_for(run) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        run = store.run(run_id)
    assert run["status"] == "running" and store.stalled_for(run) is None
    os.kill(pid, signal.SIGSTOP)
    time.sleep(7)
    assert control.stop(store, run_id) is None
    deadline = time.monotonic() + 20
    while pid_alive(pid):
        assert time.monotonic() < deadline, "the stalled worker was not killed"
        time.sleep(0.1)
    assert store.run(run_id)["status"] == "stopped"
    assert waiting.wait_for_status(store, nxt, ("starting", "running"), timeout_s=30)
    control.stop(store, nxt)
    waiting.wait_for_status(store, nxt, FINAL_STATUSES, timeout_s=60)


@pytest.mark.parametrize("store_location", ["sqlite"], indirect=True)  # a page
def test_pages_show_a_stalled_run_as_stalled(store, child):
    from components import session_runs
    from runs.service.ownership import Caller
    from tests._pages import app_test, open_page

    run_id = silent_run(store, child.pid, process_start(child.pid))
    store.update_run(run_id, owner=Caller("z" * 43).owner)
    at = app_test(default_timeout=120)
    at.session_state[session_runs._TOKEN] = "z" * 43
    open_page(at, "train").run()  # the app opens on Home
    assert not at.exception, at.exception
    line = next(m.value for m in at.markdown if m.value.startswith(f"**Run #{run_id}**"))
    assert "status **running**" in line and "no heartbeat for 10" in line
    assert not at.button(key=f"stop_{run_id}").disabled  # Stop kills it
