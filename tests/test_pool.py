"""The run pool and its queue, instant stops, the tab-close policy, and 50 Start/Stop cycles
from the Train page with no leaked processes, threads or file handles."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from runs.service import control, pool, waiting, warm_pool, worker_table
from settings.run_config import RunConfig
from runs.protocol import ACTIVE_STATUSES, FINAL_STATUSES
from runs.store.processes import pid_alive
from runs.store.run_store import RunStore
from tests._pages import app_test, open_page

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TRAIN = "train"  # the app opens on Home; these tests drive the Train page
TINY = dict(dataset="moons", model="logistic", eval_every=50)


def workers_of(store: RunStore) -> list[int]:
    """Pids of live run processes of this store (any parent): cold `runs.process.worker`
    processes (the warm pool's run hosts stay alive between runs: they are not counted)."""
    idle = {s["pid"] for s in worker_table.spares(store)}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if (("runs.process.worker" in cmdline or "runs.process.run_host" in cmdline)
                and str(store.path) in cmdline and pid_alive(int(entry))
                and int(entry) not in idle):
            found.append(int(entry))
    return found


@pytest.mark.parametrize("raw", ["0", "-1", "1025", "two", "1.5"])
def test_pool_size_setting_is_validated(monkeypatch, raw):
    monkeypatch.setenv(pool.POOL_SIZE_ENV, raw)
    with pytest.raises(ValueError, match=r"OPTIMIZER_LAB_POOL_SIZE=.*integer in \[1, 1024\]"):
        pool.pool_size()


def test_pool_size_default_and_tab_policy(monkeypatch):
    monkeypatch.delenv(pool.POOL_SIZE_ENV, raising=False)
    assert pool.pool_size() == 2
    monkeypatch.setenv(pool.TAB_CLOSE_ENV, "Stop")
    assert pool.tab_close_policy() == "stop"
    monkeypatch.setenv(pool.TAB_CLOSE_ENV, "kill")
    with pytest.raises(ValueError, match="OPTIMIZER_LAB_ON_TAB_CLOSE='kill' refused.*finish, stop"):
        pool.tab_close_policy()


@pytest.mark.parametrize("raw", ["-1", "20", "ten", "2.5"])
def test_worker_nice_setting_is_validated(monkeypatch, raw):
    monkeypatch.setenv(pool.NICE_ENV, raw)
    with pytest.raises(ValueError, match=r"OPTIMIZER_LAB_WORKER_NICE=.*integer in \[0, 19\]"):
        pool.worker_nice()


def test_worker_nice_default_and_off(monkeypatch):
    monkeypatch.delenv(pool.NICE_ENV, raising=False)
    assert pool.worker_nice() == 10
    monkeypatch.setenv(pool.NICE_ENV, " 0 ")
    assert pool.worker_nice() == 0


@pytest.mark.slow
def test_a_training_run_yields_the_cpu_to_the_page(store, monkeypatch):
    """Once its first step is recorded, the run process trains `OPTIMIZER_LAB_WORKER_NICE`
    (here 7) below the priority it was started with, so the server and browser that watch it
    get the CPU first."""
    monkeypatch.setenv(pool.NICE_ENV, "7")
    run_id = control.start_run(RunConfig(**TINY, steps=1_000_000), store)
    try:
        run = waiting.wait_for_status(store, run_id, "running", timeout_s=120)
        deadline = time.monotonic() + 60
        while store.run(run_id)["step"] < 2:  # step 1 recorded, and the loop went on
            assert time.monotonic() < deadline, "the run made no second step in 60 s"
            time.sleep(0.1)
        assert os.getpriority(os.PRIO_PROCESS, run["pid"]) == min(os.nice(0) + 7, 19)
    finally:
        control.stop(store, run_id)
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=60)


def test_claim_respects_the_pool_and_the_order(any_store):
    store = any_store
    ids = [store.create_run(RunConfig(**TINY, steps=10).to_json_dict(), status="queued")
           for _ in range(4)]
    assert store.queue_positions() == {ids[0]: 1, ids[1]: 2, ids[2]: 3, ids[3]: 4}
    assert store.claim_queued(2) == ids[:2]
    assert store.claim_queued(2) == []  # both places taken
    assert store.active_count() == 2
    assert store.queue_positions() == {ids[2]: 1, ids[3]: 2}
    store.set_status(ids[0], "finished")
    assert store.claim_queued(2) == [ids[2]]


def test_two_servers_claiming_at_once_fill_each_place_once(any_store):
    """`claim_queued` from several store objects at once (several web servers dispatching on
    one database): the places are filled once, in queue order, and no run is claimed twice."""
    ids = [any_store.create_run(RunConfig(**TINY, steps=10).to_json_dict(), status="queued")
           for _ in range(6)]
    stores = [RunStore(any_store.path) for _ in range(4)]
    start, claimed = threading.Barrier(len(stores)), []

    def claim(store: RunStore) -> None:
        start.wait()
        claimed.extend(store.claim_queued(3))

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(claimed) == ids[:3]
    assert any_store.active_count() == 3
    assert any_store.queue_positions() == {ids[3]: 1, ids[4]: 2, ids[5]: 3}


@pytest.mark.slow
def test_queue_drains_one_at_a_time_without_a_page(store, monkeypatch):
    monkeypatch.setenv(pool.POOL_SIZE_ENV, "1")
    ids = [control.start_run(RunConfig(**TINY, steps=300, seed=i), store) for i in range(3)]
    assert [store.run(i)["status"] for i in ids[1:]] == ["queued", "queued"]
    assert store.queue_positions() == {ids[1]: 1, ids[2]: 2}
    # cancel the last one while it waits: it never gets a process
    assert control.stop(store, ids[2]) is None
    cancelled = store.run(ids[2])
    assert cancelled["status"] == "stopped" and cancelled["pid"] is None
    assert cancelled["message"] == "cancelled while queued"
    most_active = 0
    deadline = time.monotonic() + 240
    while store.run(ids[1])["status"] not in FINAL_STATUSES:
        assert time.monotonic() < deadline, store.runs()
        most_active = max(most_active, store.active_count())
        time.sleep(0.05)  # nobody dispatches here: run 1's process hands its place over
    assert most_active == 1
    assert [store.run(i)["status"] for i in ids[:2]] == ["finished", "finished"]
    assert store.run(ids[1])["step"] == 300


@pytest.mark.slow
def test_stop_while_starting_is_immediate(store):
    run_id = control.start_run(RunConfig(**TINY, steps=100_000), store)
    pid = store.run(run_id)["pid"]
    started = time.monotonic()
    assert control.stop(store, run_id) is None
    run = store.run(run_id)
    assert run["status"] == "stopped" and run["message"] == "stopped before its first step"
    while pid_alive(pid):
        assert time.monotonic() - started < 30, "the worker ignored SIGTERM"
        time.sleep(0.05)
    pool.reap()
    assert store.run(run_id)["status"] == "stopped"  # the worker did not overwrite it
    with pytest.raises(ValueError, match="the run is stopped"):
        control.stop(store, run_id)


@pytest.mark.slow
def test_tab_close_policy_stop_stops_an_unwatched_run(store):
    run_id = control.start_run(RunConfig(**TINY, steps=1_000_000), store, on_tab_close="stop")
    waiting.wait_for_status(store, run_id, "running", timeout_s=120)
    store.touch_viewers([run_id])  # the page saw it just now: it keeps training
    time.sleep(6)
    assert store.run(run_id)["status"] == "running"
    store.touch_viewers([run_id], now=time.time() - 1000)  # the tab has been gone for long
    run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=60)
    assert run["status"] == "stopped"
    assert "browser session closed" in run["message"] and "OPTIMIZER_LAB_ON_TAB_CLOSE" in run["message"]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.warm
def test_fifty_start_stop_cycles_from_the_train_page(store):
    """50 x (Start, Stop) through the page script; every 10th run is stopped only once it
    trains (the `stop` command path), the others while starting (the SIGTERM path for a cold
    process; a run host drops it, or never takes it). The page's Start makes the test process
    keep run hosts: runs go to a host or cold."""
    try:
        _fifty_cycles(store)
    finally:
        warm_pool.shutdown()  # the page's runs made this process keep run hosts


def _fifty_cycles(store: RunStore) -> None:
    at = open_page(app_test(default_timeout=120), TRAIN)
    at.run()
    at.selectbox(key="dataset").set_value("moons").run()
    at.number_input(key="steps").set_value(100_000).run()
    baseline: tuple[int, int] | None = None
    ids = []
    for cycle in range(50):
        at.button(key="start").click().run()
        assert not at.exception, at.exception
        run_id = int(store.runs()["id"].iloc[0])
        assert run_id not in ids
        ids.append(run_id)
        if cycle % 10 == 0:
            waiting.wait_for_status(store, run_id, "running", timeout_s=120)
            at.run()
        at.button(key=f"stop_{run_id}").click().run()
        assert not at.exception, at.exception
        run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=60)
        assert run["status"] == "stopped", run
        deadline = time.monotonic() + 30
        while workers_of(store):
            assert time.monotonic() < deadline, f"cycle {cycle}: workers left {workers_of(store)}"
            time.sleep(0.05)
        pool.reap()
        if cycle == 1:  # after the first cycles imported and cached everything
            baseline = (threading.active_count(), _fds())
    at.run()
    pool.reap()
    assert baseline is not None
    assert not pool._PROCESSES, "children not reaped"
    print(f"50 cycles: threads {baseline[0]} -> {threading.active_count()}, "
          f"fds {baseline[1]} -> {_fds()}, workers left {len(workers_of(store))}")
    assert threading.active_count() <= baseline[0] + 2, (threading.active_count(), baseline)
    assert _fds() <= baseline[1] + 5, (_fds(), baseline)
    table = store.runs()
    assert len(table) == 50 and set(table["status"]) == {"stopped"}
    assert not set(table["status"]) & set(ACTIVE_STATUSES)
    deadline = time.monotonic() + 60  # a host drops a run stopped while it opened it
    while True:
        with store._connect() as con:
            rows = con.execute("SELECT worker, pid FROM runs").fetchall()
        if all(pid is None for k, pid in rows if k.startswith("host ")):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    kinds = [k for k, _ in rows]
    hosted = [pid for k, pid in rows if k.startswith("host ")]
    print(f"workers: {len(hosted)} in a host, {kinds.count('cold')} cold")
    assert hosted  # the page's runs used the run hosts
    assert len(hosted) + kinds.count("cold") == 50
    assert hosted == [None] * len(hosted)  # every run released by its host (none still held)
