"""Warm run hosts: a run starts in a process that already imported TensorFlow and trains beside
other runs.

Fast tests drive the `workers` table with stand-in processes (`sleep`) and the pure sizing rule;
slow tests start a real run host (`warm_pool.keep_warm`) and train digits/logistic runs. What a
run used is read from what it records (`runs.worker`, `runs.taken_at`, the run's log, the
`workers` table), never from timings. Isolation inside a host: tests/test_run_hosts.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from _waiting import wait_until
from runs.service import control, pool, waiting, warm_pool, worker_table
from runs.store import admission, host_devices
from runs.store.processes import process_start
from runs.protocol import FINAL_STATUSES
from runs.store.processes import pid_alive
from runs.store.run_store import RunStore
from settings import fields
from settings.run_config import RunConfig

pytestmark = pytest.mark.warm  # warm workers on (tests/conftest.py turns them off elsewhere)

TINY = dict(dataset="digits", model="logistic", eval_every=20)
ROOT = Path(__file__).resolve().parents[1]


def host_processes(store: RunStore) -> list[int]:
    """Pids of live `runs.process.run_host` processes of this store (any parent)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "runs.process.run_host" in argv and str(store.path) in argv and pid_alive(int(entry)):
            found.append(int(entry))
    return found


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
def test_assignment_gives_each_run_one_host_and_no_host_more_than_its_capacity(any_store,
                                                                               sleepers):
    """8 runs, 3 ready hosts of capacity 2, 4 threads assigning at once: each host gets
    exactly 2 runs, no run gets two hosts, the runs' pids are their hosts' pids (on SQLite and
    on PostgreSQL, tests/conftest.py)."""
    store = any_store
    hosts = ready_rows(store, sleepers(3))
    runs = starting_runs(store, 8)
    results: list[tuple[int, tuple[int, int] | None]] = []
    lock = threading.Lock()

    def assign_some(part: list[int]) -> None:
        for run_id in part:
            got = worker_table.assign(store, run_id, 2)
            with lock:
                results.append((run_id, got))

    threads = [threading.Thread(target=assign_some, args=(runs[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    given = {run_id: got for run_id, got in results if got is not None}
    assert len(given) == 6  # the hosts' capacity, no more
    spare, = ready_rows(store, sleepers(1))  # a new host: still never a second host for a run
    assert all(worker_table.assign(store, run_id, 2) is None for run_id in given)
    assert sorted(h for h, _ in given.values()) == sorted(hosts * 2)  # each host exactly twice
    for run_id, (hid, pid) in given.items():
        run = store.run(run_id)
        assert run["worker"] == f"host {hid}" and run["pid"] == pid
        assert worker_table.row(store, hid)["state"] == "ready"
    assert sorted(worker_table.held_runs(store, hosts[0])) == sorted(
        r for r, (h, _) in given.items() if h == hosts[0])
    left = sorted(set(runs) - set(given))
    for run_id in left:
        assert store.run(run_id)["worker"] == "" and store.run(run_id)["pid"] is None
    assert worker_table.assign(store, left[0], 2)[0] == spare
    assert {h["id"]: h["runs"] for h in worker_table.hosts(store)} == {
        **{h: 2 for h in hosts}, spare: 1}


def test_assignment_prefers_ready_then_least_loaded_hosts(store, sleepers):
    busy, idle = ready_rows(store, sleepers(2))
    warming = worker_table.register(store, os.getpid())
    proc, = sleepers(1)
    worker_table.set_process(store, warming, proc.pid, process_start(proc.pid))
    first, second, third, fourth = starting_runs(store, 4)
    assert worker_table.assign(store, first, 3)[0] == busy  # the oldest of equals
    assert worker_table.assign(store, second, 3)[0] == idle  # the least loaded
    assert worker_table.assign(store, third, 1)[0] == warming  # the ready ones are full
    assert worker_table.assign(store, fourth, 1) is None


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
    assert worker_table.assign(store, stopped, 4) is None  # a stopped run gets no host
    monkeypatch.setenv("OPTIMIZER_LAB_PLUGINS", "/tmp/my-plugins")
    assert worker_table.assign(store, wanted, 4) == (ids[2], alive.pid)
    assert worker_table.row(store, ids[0])["state"] == "gone"
    assert worker_table.row(store, ids[1])["state"] == "retired"
    assert worker_table.row(store, ids[2])["env"]["OPTIMIZER_LAB_PLUGINS"] == "/tmp/my-plugins"
    assert worker_table.new_runs(store, ids[2]) == [wanted]
    assert worker_table.take(store, ids[2], wanted)
    assert not worker_table.take(store, ids[2], wanted)  # taken once
    assert worker_table.new_runs(store, ids[2]) == []
    run = store.run(wanted)
    assert run["taken_at"] >= run["created"]
    assert not worker_table.release_untaken(store, wanted)  # taken: the host releases it
    worker_table.release(store, wanted)
    assert store.run(wanted)["pid"] is None and store.run(wanted)["worker"] == f"host {ids[2]}"


def test_a_run_stopped_before_its_host_took_it_is_released_and_never_taken(store, sleepers):
    host, = ready_rows(store, sleepers(1))
    run_id, = starting_runs(store, 1)
    assert worker_table.assign(store, run_id, 4)[0] == host
    assert control.stop(store, run_id) is None  # no signal: the host holds other runs
    run = store.run(run_id)
    assert run["status"] == "stopped" and run["pid"] is None
    assert not worker_table.take(store, host, run_id)
    assert worker_table.new_runs(store, host) == []


def test_retire_takes_every_host_of_this_parent(any_store, sleepers):
    store = any_store  # on SQLite and on PostgreSQL (tests/conftest.py)
    a, b, c = ready_rows(store, sleepers(3))
    run_id, nxt = starting_runs(store, 2)
    assert worker_table.assign(store, run_id, 4)[0] == a
    with store._connect() as con:
        con.execute("UPDATE workers SET parent_pid = 1 WHERE id = ?", (c,))
    assert [w for w, _ in worker_table.retire(store, os.getpid())] == [a, b]
    assert [worker_table.row(store, w)["state"] for w in (a, b, c)] == [
        "retired", "retired", "ready"]
    assert worker_table.assign(store, nxt, 4)[0] == c  # a retired host takes no new run
    assert {h["id"] for h in worker_table.hosts(store)} == {a, b, c}  # a, b still drain


@pytest.mark.parametrize("live, count, budget, held, expected", [
    (0, 2, None, 0.0, 2),           # up to the number of hosts
    (1, 2, None, 0.0, 1),
    (2, 2, None, 0.0, 0),           # already there
    (0, 4, 2800.0, 0.0, 3),         # memory for 3 x 900 MB
    (0, 4, 2500.0, 0.0, 2),         # not for a third
    (1, 4, 2500.0, 1000.0, 1),      # 2500 - 1000 leaves room for one
    (3, 2, None, 0.0, 0),           # never negative
])
def test_hosts_follow_the_setting_and_memory(live, count, budget, held, expected):
    assert admission.hosts_wanted(live, count, budget, held) == expected


def test_warm_setting_is_validated(monkeypatch):
    monkeypatch.setenv(pool.WARM_ENV, "Off")
    assert pool.warm_enabled() is False
    monkeypatch.setenv(pool.WARM_ENV, "maybe")
    with pytest.raises(ValueError, match="OPTIMIZER_LAB_WARM_WORKERS='maybe' refused.*on, off"):
        pool.warm_enabled()


@pytest.mark.parametrize("name, raw, allowed", [
    ("OPTIMIZER_LAB_HOSTS", "0", r"\[1, 64\]"), ("OPTIMIZER_LAB_HOSTS", "65", r"\[1, 64\]"),
    ("OPTIMIZER_LAB_RUNS_PER_HOST", "0", r"\[1, 256\]"),
    ("OPTIMIZER_LAB_RUNS_PER_HOST", "many", r"\[1, 256\]"),
])
def test_host_settings_are_validated(monkeypatch, name, raw, allowed):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError,
                       match=rf"{name}='{raw}' refused: must be an integer in {allowed}"):
        pool.host_count() if name == pool.HOSTS_ENV else pool.runs_per_host()


def test_pool_size_with_hosts_is_what_the_hosts_hold(monkeypatch):
    monkeypatch.delenv(pool.POOL_SIZE_ENV, raising=False)
    monkeypatch.setenv(pool.HOSTS_ENV, "2")
    monkeypatch.setenv(pool.RUNS_PER_HOST_ENV, "25")
    assert pool.host_count() == 2 and pool.runs_per_host() == 25 and pool.pool_size() == 50
    monkeypatch.delenv(pool.RUNS_PER_HOST_ENV)
    assert pool.runs_per_host() == pool.DEFAULT_RUNS_PER_HOST
    monkeypatch.setenv(pool.WARM_ENV, "off")
    assert pool.pool_size() == pool.DEFAULT_POOL_SIZE == 2


def test_hosts_that_die_warming_up_are_not_respawned_forever(store, monkeypatch):
    """A warm-up that cannot succeed (here the "python" is /bin/false) stops the refills after
    `MAX_FAILURES` such exits; dispatch then goes cold. The failed host's log is kept."""
    monkeypatch.setenv(pool.HOSTS_ENV, "2")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    kept = warm_pool.WarmPool(store)  # not started: refills driven here
    spawned = []
    for _ in range(4):
        spawned += kept.refill()
        for proc in kept._mine().values():
            proc.wait(timeout=10)
    # one host at a time while none lives: each refill starts one, until MAX_FAILURES exits
    assert len(spawned) == kept.failures == warm_pool.MAX_FAILURES == 3
    assert kept.refill() == []
    assert f"run host {spawned[-1]} exited with code 1 before it was ready" in kept.last_error
    assert warm_pool.host_log_path(store, spawned[-1]).exists()
    assert worker_table.spares(store) == []
    kept.shutdown()


def test_hosts_import_tensorflow_one_at_a_time_and_wait_for_a_first_step(store, monkeypatch):
    """On this machine one host warms at a time (a second TensorFlow import beside it delays
    the host the first Start waits for), and no host starts while a run has no step yet."""
    monkeypatch.setenv(pool.HOSTS_ENV, "3")

    class Counted(warm_pool.WarmPool):  # hosts as rows only: no process is started
        def _spawn(self):
            return worker_table.register(self.store, os.getpid())

    kept = Counted(store)
    first = kept.refill()
    assert len(first) == 1 and kept.refill() == []  # the first one is still warming
    worker_table.set_state(store, first[0], "ready")
    run_id = store.create_run(RunConfig(steps=10).to_json_dict())
    store.set_status(run_id, "running")  # taken by the host, building its engine
    assert kept.refill() == []  # a run waits for its first step: it has the cores
    store.append(run_id, step=1)
    second = kept.refill()
    assert len(second) == 1 and kept.refill() == []
    worker_table.set_state(store, second[0], "ready")
    assert len(kept.refill()) == 1  # the third, once the second is ready
    kept.shutdown()


# ----- slow: real run hosts -----------------------------------------------------------------
@pytest.fixture()
def warm(store, monkeypatch, request):
    """One run host (of 2 runs, or `request.param` runs) this process keeps for `store`, shut
    down afterwards."""
    monkeypatch.setenv(pool.HOSTS_ENV, "1")
    monkeypatch.setenv(pool.RUNS_PER_HOST_ENV, str(getattr(request, "param", 2)))
    monkeypatch.delenv(pool.POOL_SIZE_ENV, raising=False)
    monkeypatch.delenv(pool.WARM_ENV, raising=False)
    kept = warm_pool.keep_warm(store)
    yield kept
    warm_pool.shutdown()


@pytest.mark.slow
def test_two_runs_share_one_host_and_match_cold_runs(store, warm, monkeypatch):
    warm.wait_ready(1, timeout_s=240)
    host, = worker_table.spares(store)
    ids = [control.start_run(RunConfig(**TINY, steps=60, seed=seed), store) for seed in (3, 4)]
    runs = [waiting.wait_for_status(store, i, FINAL_STATUSES, timeout_s=240) for i in ids]
    assert [r["status"] for r in runs] == ["finished", "finished"], runs
    assert [r["worker"] for r in runs] == [f"host {host['id']}"] * 2
    assert [r["pid"] for r in runs] == [None, None]  # released by the host at their end
    assert all(0 <= r["taken_at"] - r["created"] < 30 for r in runs)
    assert all(f"run host {host['id']} (pid {host['pid']}) takes run {i}" in
               pool.log_path(store, i).read_text() for i in ids)
    assert [h["pid"] for h in worker_table.hosts(store)] == [host["pid"]]  # it stays warm

    # the same runs alone, each in a cold process: the same numbers
    warm_pool.shutdown()
    monkeypatch.setenv(pool.WARM_ENV, "off")
    for seed, hosted in zip((3, 4), ids):
        cold = control.start_run(RunConfig(**TINY, steps=60, seed=seed), store)
        done = waiting.wait_for_status(store, cold, FINAL_STATUSES, timeout_s=240)
        assert done["status"] == "finished" and done["worker"] == "cold"
        assert done["taken_at"] is not None and done["taken_at"] >= done["created"]
        assert final_loss(store, cold) == final_loss(store, hosted)
        assert store.scalars(cold, ["train_loss"])["value"].tolist() == \
            store.scalars(hosted, ["train_loss"])["value"].tolist()


@pytest.mark.slow
def test_a_run_of_the_default_setup_trains_its_first_step_before_the_host_prepares_again(
        store, warm):
    """The default Setup adopts the host's prepared engine; the host prepares the next one (a
    pause of every run it holds, ~1 s here) only once that run has trained its first step."""
    warm.wait_ready(1, timeout_s=240)
    run_id = control.start_run(fields.page_defaults().model_copy(update={"steps": 300}), store)
    assert waiting.wait_for_status(store, run_id, FINAL_STATUSES,
                                   timeout_s=240)["status"] == "finished"
    host, = worker_table.hosts(store)
    log = pool.host_log_path(store, host["id"])
    preparing = wait_until(lambda: [line for line in log.read_text().splitlines()
                                    if line.startswith("preparing the default Setup's engine")],
                           120, "the host prepares the default Setup's engine again")
    assert not any(f"run {run_id} at step 0" in line for line in preparing), preparing


@pytest.mark.slow
def test_a_run_given_while_the_host_imports_comes_before_the_default_engines_preparation(
        store, warm):
    """A fresh server's first Start reaches a host still importing TensorFlow: the host builds
    that run's engine at once, without preparing and rehearsing the default Setup's first,
    and prepares it once the run has trained its first step."""
    wait_until(lambda: [h for h in worker_table.hosts(store) if h["state"] == "warming"
                        and h["pid"]], 60,
               "the host's row, warming")  # its process is started in the background
    run_id = control.start_run(fields.page_defaults().model_copy(update={"steps": 200}), store)
    assert store.run(run_id)["worker"] == "host 1"  # given to the host while it warms up
    assert worker_table.row(store, 1)["state"] == "warming"
    assert waiting.wait_for_status(store, run_id, FINAL_STATUSES,
                                   timeout_s=240)["status"] == "finished"
    log = pool.host_log_path(store, 1)
    preparing = wait_until(lambda: [line for line in log.read_text().splitlines()
                                    if line.startswith("preparing the default Setup's engine")],
                           120, "the host prepares the default Setup's engine")
    lines = log.read_text().splitlines()
    warmed = [i for i, line in enumerate(lines) if line.startswith("warmed up with run(s) ")]
    assert warmed and f"run(s) {run_id} waiting" in lines[warmed[0]], lines
    assert lines.index(preparing[0]) > warmed[0]
    assert not any(f"run {run_id} at step 0" in line for line in preparing), preparing
    # the devices it lists are offered by the server without a TensorFlow child of its own
    assert "/device:CPU:0" in (host_devices.read(store.data_dir) or ())


@pytest.mark.slow
@pytest.mark.parametrize("warm", [1], indirect=True)
def test_a_queued_run_waits_while_the_pool_is_full_then_runs(store, warm):
    warm.wait_ready(1, timeout_s=240)
    first = control.start_run(RunConfig(**TINY, steps=400, seed=1), store)
    second = control.start_run(RunConfig(**TINY, steps=50, seed=2), store)
    assert store.run(first)["worker"] == "host 1"
    assert store.run(second)["status"] == "queued"
    assert store.queue_positions() == {second: 1}
    assert not worker_table.assign(store, second, 1)  # a queued run is never given a host
    most_active, deadline = 0, time.monotonic() + 240
    while store.run(second)["status"] not in FINAL_STATUSES:  # the first run hands over
        assert time.monotonic() < deadline, store.runs()
        most_active = max(most_active, store.active_count())
        time.sleep(0.05)
    done = store.run(second)
    assert done["status"] == "finished" and done["step"] == 50
    assert store.run(first)["status"] == "finished" and most_active == 1
    assert done["worker"] == "host 1"  # the host that handed the place over took it


@pytest.mark.slow
@pytest.mark.parametrize("warm", [1], indirect=True)
def test_no_orphan_host_after_shutdown_or_a_killed_parent(store, warm):
    warm.wait_ready(1, timeout_s=240)
    assert len(host_processes(store)) == 1
    warm_pool.shutdown()
    assert host_processes(store) == []
    assert worker_table.row(store, 1)["state"] in ("gone", "retired")
    assert not list((store.path.parent / "logs").glob("host-*.log"))

    # a parent killed with SIGKILL runs no shutdown: its idle hosts notice and exit
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
        orphans = wait_until(lambda: host_processes(store), 30, "the parent's hosts")
        parent.kill()
        parent.wait()
        wait_until(lambda: not any(pid_alive(p) for p in orphans), 30, "orphans exited")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
