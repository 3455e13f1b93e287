"""Warm run workers (issue 13): a run starts on a process that already imported TensorFlow.

Fast tests drive the `workers` table with stand-in processes (`sleep`) and the pure sizing rule;
slow tests start real warm workers (`warm_pool.keep_warm`) and train digits/logistic runs. What a
run used is read from what it records (`runs.process.worker`, `runs.taken_at`, the `workers` table),
never from timings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runs.service import control, pool, waiting, warm_pool, worker_table
from runs.store import admission
from runs.store.processes import process_start
from runs.protocol import FINAL_STATUSES
from runs.store.processes import pid_alive
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

pytestmark = pytest.mark.warm  # warm workers on (tests/conftest.py turns them off elsewhere)

TINY = dict(dataset="digits", model="logistic", eval_every=20)
ROOT = Path(__file__).resolve().parents[1]


def warm_processes(store: RunStore) -> list[int]:
    """Pids of live `runs.process.warm_worker` processes of this store (any parent)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "runs.process.warm_worker" in argv and str(store.path) in argv and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def final_loss(store: RunStore, run_id: int) -> float:
    loss = store.scalars(run_id, ["val_loss"])
    return float(loss.sort_values("step")["value"].iloc[-1])


@pytest.fixture()
def sleepers():
    """Stand-in worker processes (`sleep 60`), killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(n: int) -> list[subprocess.Popen]:
        new = [subprocess.Popen(["sleep", "60"]) for _ in range(n)]
        procs.extend(new)
        return new

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def ready_rows(store: RunStore, procs: list[subprocess.Popen]) -> list[int]:
    ids = []
    for proc in procs:
        wid = worker_table.register(store, os.getpid())
        worker_table.set_process(store, wid, proc.pid, process_start(proc.pid))
        assert worker_table.set_state(store, wid, "ready", only_from=("warming",))
        ids.append(wid)
    return ids


def starting_runs(store: RunStore, n: int) -> list[int]:
    ids = [store.create_run(RunConfig(**TINY, steps=5).to_json_dict(), status="queued")
           for _ in range(n)]
    assert store.claim_queued(64) == ids
    return ids


# ----- fast: the table and the sizing rule ------------------------------------------------------
def test_assignment_gives_each_run_one_worker_and_each_worker_one_run(any_store, sleepers):
    """8 runs, 5 ready workers, 4 threads assigning at once: every worker gets at most one
    run, no run gets two workers, the runs' pids are their workers' pids (on SQLite and on
    PostgreSQL, tests/conftest.py)."""
    store = any_store
    workers = ready_rows(store, sleepers(5))
    runs = starting_runs(store, 8)
    results: list[tuple[int, tuple[int, int] | None]] = []
    lock = threading.Lock()

    def assign_some(part: list[int]) -> None:
        for run_id in part:
            got = worker_table.assign(store, run_id)
            with lock:
                results.append((run_id, got))

    threads = [threading.Thread(target=assign_some, args=(runs[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    given = {run_id: got for run_id, got in results if got is not None}
    assert len(given) == 5  # as many runs as workers, no more
    spare, = ready_rows(store, sleepers(1))  # a new ready worker: still never a second one
    assert all(worker_table.assign(store, run_id) is None for run_id in given)
    assert worker_table.row(store, spare)["state"] == "ready"
    assert sorted(w for w, _ in given.values()) == workers  # each worker exactly once
    for run_id, (wid, pid) in given.items():
        run = store.run(run_id)
        assert run["worker"] == "warm" and run["pid"] == pid
        assert worker_table.row(store, wid)["run_id"] == run_id
        assert worker_table.row(store, wid)["state"] == "assigned"
    for run_id in set(runs) - set(given):
        assert store.run(run_id)["worker"] == "" and store.run(run_id)["pid"] is None
    assert worker_table.assign(store, min(set(runs) - set(given)))[0] == spare


def test_assignment_skips_dead_retired_and_stopped(any_store, sleepers, monkeypatch):
    store = any_store  # on SQLite and on PostgreSQL (tests/conftest.py)
    dead, retired, alive = sleepers(3)
    ids = ready_rows(store, [dead, retired, alive])
    dead.kill()
    dead.wait()
    with store._connect() as con:
        con.execute("UPDATE workers SET state = 'retired' WHERE id = ?", (ids[1],))
    stopped, wanted = starting_runs(store, 2)
    store.set_status(stopped, "stopped")
    assert worker_table.assign(store, stopped) is None  # a stopped run gets no worker
    monkeypatch.setenv("OPTIMIZER_LAB_PLUGINS", "/tmp/my-plugins")
    assert worker_table.assign(store, wanted) == (ids[2], alive.pid)
    assert worker_table.row(store, ids[0])["state"] == "gone"
    assert worker_table.row(store, ids[1])["state"] == "retired"
    assert worker_table.row(store, ids[2])["env"]["OPTIMIZER_LAB_PLUGINS"] == "/tmp/my-plugins"
    assert worker_table.take(store, ids[2], wanted)
    assert not worker_table.take(store, ids[2], wanted)  # taken once
    run = store.run(wanted)
    assert run["taken_at"] >= run["created"]


def test_retire_takes_only_idle_workers_of_this_parent(any_store, sleepers):
    store = any_store  # on SQLite and on PostgreSQL (tests/conftest.py)
    a, b, c = ready_rows(store, sleepers(3))
    run_id, = starting_runs(store, 1)
    assert worker_table.assign(store, run_id)[0] == a
    with store._connect() as con:
        con.execute("UPDATE workers SET parent_pid = 1 WHERE id = ?", (c,))
    assert [w for w, _ in worker_table.retire(store, os.getpid())] == [b]
    assert [worker_table.row(store, w)["state"] for w in (a, b, c)] == [
        "assigned", "retired", "ready"]


@pytest.mark.parametrize("active, spares, queued, size, budget, expected", [
    (0, 0, 0, 2, None, 2),          # one spare per free place
    (1, 0, 0, 2, None, 1),
    (1, 1, 0, 2, None, 0),          # already there
    (2, 0, 0, 2, None, 0),          # pool full: no idle process beyond the places
    (0, 0, 1, 2, None, 0),          # queued runs take the places
    (0, 0, 0, 4, 2500.0, 3),        # memory for 3 x 800 MB
    (1, 0, 0, 4, 2500.0, 1),        # 2500 - 1000 leaves room for one
    (0, 3, 0, 2, None, 0),          # never negative
])
def test_spares_follow_free_places_and_memory(active, spares, queued, size, budget, expected):
    configs = [RunConfig(**TINY, steps=5).to_json_dict()] * active
    assert admission.warm_spares(configs, spares, queued, size, budget) == expected


def test_warm_setting_is_validated(monkeypatch):
    monkeypatch.setenv(pool.WARM_ENV, "Off")
    assert pool.warm_enabled() is False
    monkeypatch.setenv(pool.WARM_ENV, "maybe")
    with pytest.raises(ValueError, match="OPTIMIZER_LAB_WARM_WORKERS='maybe' refused.*on, off"):
        pool.warm_enabled()


def test_workers_that_die_warming_up_are_not_respawned_forever(store, monkeypatch):
    """A warm-up that cannot succeed (here the "python" is /bin/false) stops the refills after
    `MAX_FAILURES` such exits; dispatch then goes cold. The failed worker's log is kept."""
    monkeypatch.setenv(pool.POOL_SIZE_ENV, "2")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    kept = warm_pool.WarmPool(store)  # not started: refills driven here
    spawned = []
    for _ in range(4):
        spawned += kept.refill()
        for proc in kept._mine().values():
            proc.wait(timeout=10)
    assert len(spawned) == 4 and kept.failures == 4 >= warm_pool.MAX_FAILURES
    assert "exited with code 1 before it was ready" in kept.last_error
    assert warm_pool.warm_log_path(store, spawned[-1]).exists()
    assert worker_table.spares(store) == []
    kept.shutdown()


# ----- slow: real warm workers --------------------------------------------------------------
@pytest.fixture()
def warm(store, monkeypatch, request):
    """A pool (of 2 places, or `request.param`) whose warm workers this process keeps for
    `store`, shut down afterwards."""
    monkeypatch.setenv(pool.POOL_SIZE_ENV, str(getattr(request, "param", 2)))
    monkeypatch.delenv(pool.WARM_ENV, raising=False)
    kept = warm_pool.keep_warm(store)
    yield kept
    warm_pool.shutdown()


@pytest.mark.slow
def test_two_runs_take_two_warm_workers_and_match_cold_runs(store, warm, monkeypatch):
    warm.wait_ready(2, timeout_s=240)
    ids = [control.start_run(RunConfig(**TINY, steps=60, seed=seed), store) for seed in (3, 4)]
    runs = [waiting.wait_for_status(store, i, FINAL_STATUSES, timeout_s=240) for i in ids]
    assert [r["status"] for r in runs] == ["finished", "finished"], runs
    assert [r["worker"] for r in runs] == ["warm", "warm"]
    assert runs[0]["pid"] != runs[1]["pid"]
    assert all(0 <= r["taken_at"] - r["created"] < 30 for r in runs)
    with store._connect() as con:
        rows = con.execute("SELECT run_id, pid, state FROM workers WHERE run_id IS NOT NULL "
                           "ORDER BY run_id").fetchall()
    assert [(r, p) for r, p, _ in rows] == [(i, r["pid"]) for i, r in zip(ids, runs)]
    assert "warm worker" in pool.log_path(store, ids[0]).read_text()

    # the same runs alone, each in a cold process: the same numbers
    warm_pool.shutdown()
    monkeypatch.setenv(pool.WARM_ENV, "off")
    for seed, warm_run in zip((3, 4), ids):
        cold = control.start_run(RunConfig(**TINY, steps=60, seed=seed), store)
        done = waiting.wait_for_status(store, cold, FINAL_STATUSES, timeout_s=240)
        assert done["status"] == "finished" and done["worker"] == "cold"
        assert done["taken_at"] is not None and done["taken_at"] >= done["created"]
        assert final_loss(store, cold) == final_loss(store, warm_run)
        assert store.scalars(cold, ["train_loss"])["value"].tolist() == \
            store.scalars(warm_run, ["train_loss"])["value"].tolist()


@pytest.mark.slow
def test_sigkill_of_a_warm_worker_interrupts_its_run_and_the_pool_replaces_it(store, warm):
    warm.wait_ready(2, timeout_s=240)
    before = {s["pid"] for s in worker_table.spares(store)}
    run_id = control.start_run(RunConfig(**TINY, steps=500_000), store)
    run = waiting.wait_for_step(store, run_id, 5, timeout_s=120)
    assert run["worker"] == "warm" and run["pid"] in before
    assert run["pid_start"] == process_start(run["pid"])  # its identity, as for a cold run
    proc = pool._PROCESSES[run_id]  # the pool's Popen, handed over under the run id
    assert proc.pid == run["pid"]
    os.kill(run["pid"], signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert store.mark_interrupted() == [run_id]
    killed = store.run(run_id)
    assert killed["status"] == "interrupted" and killed["step"] >= 5
    # two places free again: the pool is back to two ready spares, one of them new
    warm.wait_ready(2, timeout_s=240)
    after = {s["pid"] for s in worker_table.spares(store)}
    assert len(after) == 2 and run["pid"] not in after and after - before

    # a Stop right after Start reaches the warm worker (SIGTERM to the pid it was given)
    quick = control.start_run(RunConfig(**TINY, steps=500_000), store)
    pid = store.run(quick)["pid"]
    assert pid in after and control.stop(store, quick) is None
    wait_until(lambda: not pid_alive(pid), 60, "the stopped warm worker exited")
    stopped = store.run(quick)
    assert stopped["status"] == "stopped", stopped
    assert stopped["message"] == "stopped before its first step"


@pytest.mark.slow
@pytest.mark.parametrize("warm", [1], indirect=True)
def test_a_queued_run_waits_while_the_pool_is_full_then_runs(store, warm):
    warm.wait_ready(1, timeout_s=240)
    first = control.start_run(RunConfig(**TINY, steps=400, seed=1), store)
    second = control.start_run(RunConfig(**TINY, steps=50, seed=2), store)
    assert store.run(first)["worker"] == "warm"
    assert store.run(second)["status"] == "queued"
    assert store.queue_positions() == {second: 1}
    assert not worker_table.assign(store, second)  # a queued run is never given a worker
    most_active, deadline = 0, time.monotonic() + 240
    while store.run(second)["status"] not in FINAL_STATUSES:  # the first run hands over
        assert time.monotonic() < deadline, store.runs()
        most_active = max(most_active, store.active_count())
        time.sleep(0.05)
    done = store.run(second)
    assert done["status"] == "finished" and done["step"] == 50
    assert store.run(first)["status"] == "finished" and most_active == 1
    assert done["worker"] in ("warm", "cold")  # cold when no spare was ready at the hand-over


@pytest.mark.slow
@pytest.mark.parametrize("warm", [1], indirect=True)
def test_no_orphan_warm_worker_after_shutdown_or_a_killed_parent(store, warm):
    warm.wait_ready(1, timeout_s=240)
    assert len(warm_processes(store)) == 1
    warm_pool.shutdown()
    assert warm_processes(store) == []
    assert worker_table.row(store, 1)["state"] in ("gone", "retired")
    assert not list((store.path.parent / "logs").glob("warm-*.log"))

    # a parent killed with SIGKILL runs no shutdown: its idle workers notice and exit
    script = textwrap.dedent(f"""
        import sys, time
        from runs.service import control, pool, waiting, warm_pool
        from runs.store.run_store import RunStore
        warm_pool.keep_warm(RunStore({str(store.path)!r})).wait_ready(1, timeout_s=240)
        print("ready", flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        orphans = wait_until(lambda: warm_processes(store), 30, "the parent's warm workers")
        parent.kill()
        parent.wait()
        wait_until(lambda: not any(pid_alive(p) for p in orphans), 30, "orphans exited")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
