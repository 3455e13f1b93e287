"""The run pool: how many runs train at once, the memory they may hold together, and which
process trains a run. No Streamlit, no TensorFlow.

`dispatch` starts queued runs while the pool has a free place AND the memory budget room
(`runs.store.admission`); it is called by `runs.service.control.start_run`, by a run process or
run host as a run ends and by the pages' heartbeat. Each run it starts goes to a run host with
room (a warm process that trains many runs, `runs.process.run_host`, kept by
`runs.service.warm_pool`; assigned in one transaction, `runs.service.worker_table.assign`),
else to a cold process started for it alone (`python -m runs.process.worker`, `_launch`) - when
no host has room, or run hosts are off (`OPTIMIZER_LAB_WARM_WORKERS=off`). The run's `worker`
column says which: `host <id>` or `cold`.

How many (settings, all validated, the message naming the variable and its range):
`OPTIMIZER_LAB_HOSTS` run hosts (`host_count`), each holding up to `OPTIMIZER_LAB_RUNS_PER_HOST`
runs (`runs_per_host`); `OPTIMIZER_LAB_POOL_SIZE` runs at once in all (`pool_size`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

from runs.protocol import ACTIVE_STATUSES
from runs.service import executor, worker_table
# the run-host switch lives with the executor settings; re-exported here, where the
# pool's other settings are
from runs.service.executor import WARM_ENV, env_choice, warm_enabled  # noqa: F401 (WARM_ENV re-exported)
from runs.store.admission import memory_budget_mb
from runs.store.processes import pid_alive, process_start
from runs.store.run_store import RunStore

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Popen objects of the run processes started by this process, reaped on every call.
_PROCESSES: dict[int, subprocess.Popen] = {}
# Popen objects of the run hosts started by this process, by (store path, host id); filled by
# `runs.service.warm_pool`, reaped on every call.
_HOST_CHILDREN: dict[tuple[str, int], subprocess.Popen] = {}
# Called after a run was given to a host (`runs.service.warm_pool` wakes its refill thread).
_ON_ASSIGN: list[Callable[[], None]] = []
POOL_SIZE_ENV = "OPTIMIZER_LAB_POOL_SIZE"
# With run hosts off every run is a TensorFlow process of ~1 GB that keeps a core busy: one
# per core of a small machine. With hosts the pool is what the hosts hold together.
DEFAULT_POOL_SIZE = 2
MAX_POOL_SIZE = 1024
# With hosts on, runs beyond what the hosts can take (none started yet, e.g. a CLI run; all
# full) get cold processes, at most this many at once: each is ~1 GB and a busy core.
COLD_PLACES = DEFAULT_POOL_SIZE
HOSTS_ENV = "OPTIMIZER_LAB_HOSTS"
MAX_HOSTS = 64
RUNS_PER_HOST_ENV = "OPTIMIZER_LAB_RUNS_PER_HOST"
DEFAULT_RUNS_PER_HOST = 32
MAX_RUNS_PER_HOST = 256
NICE_ENV = "OPTIMIZER_LAB_WORKER_NICE"
DEFAULT_NICE = 10
TAB_CLOSE_ENV = "OPTIMIZER_LAB_ON_TAB_CLOSE"
TAB_CLOSE_POLICIES = ("finish", "stop")


def reap() -> list[int]:
    """Collect finished child run processes and run hosts (no zombies); returns the run ids
    of the cold processes reaped."""
    # a copy: the warm pool's thread may add a run meanwhile
    done = [run_id for run_id, proc in list(_PROCESSES.items()) if proc.poll() is not None]
    for run_id in done:
        _PROCESSES.pop(run_id, None)
    for proc in list(_HOST_CHILDREN.values()):
        proc.poll()  # reaps an exited host; `warm_pool` forgets it on its next refill
    return done


def check_processes(store: RunStore) -> list[int]:
    """Collect finished child processes (`reap`) and mark the active runs whose process is gone
    interrupted (`RunStore.mark_interrupted`: the explicit stale-detection step, so that the
    store's reads never write); returns the run ids newly marked."""
    reap()
    return store.mark_interrupted()


def log_path(store: RunStore, run_id: int) -> Path:
    """`<store dir>/logs/run-<id>.log`: a cold process's stdout and stderr; for a run in a
    host, the lines saying which host took it and how it ended (the host's own output is
    `host_log_path`)."""
    return store.data_dir / "logs" / f"run-{run_id}.log"


def host_log_path(store: RunStore, host_id: int) -> Path:
    """`<store dir>/logs/host-<id>.log`: a run host's output (TensorFlow's start-up lines, the
    tracebacks of its runs that failed); removed once the host is gone after a clean life."""
    return store.data_dir / "logs" / f"host-{host_id}.log"


def pool_size() -> int:
    """How many runs may train at once: `OPTIMIZER_LAB_POOL_SIZE`; default `host_count()` x
    `runs_per_host()` with run hosts on (what the hosts hold together; the memory budget
    still bounds it), 2 with them off (one per core of a small machine: every run is then a
    TensorFlow process of ~1 GB that keeps a core busy).

    Raises:
        ValueError: the variable is not an integer in [1, 1024] (or a bad host setting).
    """
    default = host_count() * runs_per_host() if warm_enabled() else DEFAULT_POOL_SIZE
    return _env_int(POOL_SIZE_ENV, min(default, MAX_POOL_SIZE), 1, MAX_POOL_SIZE)


def host_count() -> int:
    """How many run hosts the warm pool keeps: `OPTIMIZER_LAB_HOSTS`, default the number of
    cores (`os.cpu_count()`, at most 8): a host's main thread trains on one core, so more
    hosts than cores only share them. The memory budget may allow fewer
    (`runs.store.admission.hosts_wanted`).

    Raises:
        ValueError: the variable is not an integer in [1, 64].
    """
    return _env_int(HOSTS_ENV, max(1, min(8, os.cpu_count() or 1)), 1, MAX_HOSTS)


def runs_per_host() -> int:
    """How many runs one host trains at once: `OPTIMIZER_LAB_RUNS_PER_HOST` (default 32; a
    default run adds ~40-60 MB to a host, and its steps share the host's core with the others).

    Raises:
        ValueError: the variable is not an integer in [1, 256].
    """
    return _env_int(RUNS_PER_HOST_ENV, DEFAULT_RUNS_PER_HOST, 1, MAX_RUNS_PER_HOST)


def worker_nice() -> int:
    """How much a run process lowers its CPU priority once its first step is recorded
    (`os.nice`): `OPTIMIZER_LAB_WORKER_NICE`, default 10, 0 = not at all.

    Why: a run keeps its cores busy for as long as it trains, while the page that watches it
    (the Streamlit server and the browser, on the same small machine in a class) needs CPU in
    bursts, twice a second. At nice 10 the scheduler gives those bursts the CPU first; the run
    still gets every cycle they leave idle (the same steps/s on an idle machine).

    Raises:
        ValueError: the variable is not an integer in [0, 19].
    """
    return _env_int(NICE_ENV, DEFAULT_NICE, 0, 19, " (0: the run keeps the server's priority)")


def _env_int(name: str, default: int, low: int, high: int, note: str = "") -> int:
    """The integer environment variable `name` (`default` when unset or blank).

    Raises:
        ValueError: not an integer in [low, high] (the message names the variable).
    """
    raw = os.environ.get(name, "").strip() or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ValueError(f"{name}={raw!r} refused: must be an integer in [{low}, {high}]{note}")
    return value


def worker_env() -> dict[str, str]:
    """The environment of a run process: this one's, `TF_USE_LEGACY_KERAS=1` (Keras 2 for
    `tf.keras`), the project root first on `PYTHONPATH`, TensorFlow's C++ log at warnings."""
    python_path = os.pathsep.join(
        [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=python_path)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def tab_close_policy() -> str:
    """What happens to a run when the browser session that started it closes:
    `OPTIMIZER_LAB_ON_TAB_CLOSE` = `finish` (default: it trains on, visible to any session) or
    `stop` (the run process stops itself once no page of that session has been seen for
    `runs.process.run_loop.TAB_CLOSED_AFTER_S` seconds).

    Raises:
        ValueError: another value.
    """
    return env_choice(TAB_CLOSE_ENV, "finish", TAB_CLOSE_POLICIES)


def dispatch(store: RunStore, size: int | None = None) -> list[int]:
    """Start queued runs while the pool has free places and the memory budget
    (`runs.store.admission.memory_budget_mb`, MB) has room; returns the run ids started.

    The pool's places (`size`, default `pool_size()`) are, with run hosts on, also bounded by
    what the live hosts hold or may still take plus `COLD_PLACES` cold processes (so a store
    without hosts, e.g. the CLI's, does not start dozens of 1 GB processes).

    Called by `start_run`, by a run process or host as a run ends (the queue drains with no
    page open) and by the pages on every render (a run killed with SIGKILL cannot hand its
    place over; `check_processes` marks it interrupted and its place goes to the next run).

    With the Ray executor (`runs.service.executor`) a claimed run goes to a Ray host actor or
    back to the queue: never to a local process.

    Raises:
        ValueError: an invalid pool size, hosts, runs-per-host, memory budget, warm or
            executor setting.
    """
    check_processes(store)  # a dead host's runs are interrupted with its name first
    on_ray = executor.settings().ray  # the Ray executor never falls back to a local process
    warm = warm_enabled()  # settings checked before a run is claimed, never after
    capacity = runs_per_host() if warm else 0
    worker_nice()  # a bad OPTIMIZER_LAB_WORKER_NICE is refused here, before a run is claimed
    size = pool_size() if size is None else size
    if warm:  # what the hosts hold or may take, and at most COLD_PLACES cold processes
        places = sum(h["runs"] + (capacity - h["runs"] if h["state"] != "retired" else 0)
                     for h in worker_table.hosts(store))
        size = min(size, places + (0 if on_ray else COLD_PLACES))
    # Ray's scheduler accounts the memory of its nodes (`ray_hosts.RayPool.hosts_wanted`): this
    # machine's budget is for the processes it runs itself
    started = store.claim_queued(size, None if on_ray else memory_budget_mb(), capacity)
    for run_id in started:
        if on_ray:  # a Ray host actor, or back to the queue (`runs.service.ray_table`)
            _assign_ray_host(store, run_id, capacity)
            continue
        if not (warm and _assign_host(store, run_id, capacity)):
            _launch(store, run_id)
    return started


def _assign_host(store: RunStore, run_id: int, capacity: int) -> bool:
    """Give a claimed run to a run host with room (`worker_table.assign`); True when one took
    it. The warm pool is woken (it may start another host)."""
    try:
        taken = worker_table.assign(store, run_id, capacity)
    except Exception as error:  # noqa: BLE001 - a claimed run must get a process: go cold
        print(f"host assignment of run {run_id} failed, starting it cold: {error}",
              file=sys.stderr)
        return False
    if taken is None:
        return False
    for wake in list(_ON_ASSIGN):
        wake()
    return True


def _assign_ray_host(store: RunStore, run_id: int, capacity: int) -> None:
    """Give a claimed run to a Ray host actor with room, else requeue it with the reason
    (`runs.service.ray_table.assign_or_requeue`); the pool is woken when a host took it (it
    may start another host; a requeued run is seen by its next refill)."""
    from runs.service import ray_table

    if ray_table.assign_or_requeue(store, run_id, capacity) is not None:
        for wake in list(_ON_ASSIGN):
            wake()


def shares_host(store: RunStore, run: dict[str, Any]) -> bool:
    """True when `run` (a dict of `RunStore.run`) is trained by a run host that holds other
    active runs too."""
    if worker_table.host_id_of(run.get("worker")) is None:
        return False
    with store._connect() as con:
        return con.execute(
            f"SELECT COUNT(*) FROM runs WHERE worker = ? AND id != ? AND status IN "
            f"{ACTIVE_STATUSES}", (run["worker"], run["id"])).fetchone()[0] > 0


def signal_run(store: RunStore, run: dict[str, Any], signum: int) -> None:
    """Send `signum` to the process of `run` (a dict of `RunStore.run`) when it lives.

    A cold process trains this run alone: it gets the signal. A run host trains others too: a
    SIGTERM (the stop of a starting run) is never sent - a run the host has not taken yet is
    released at once (`worker_table.release_untaken`), one it is opening is dropped when the
    host sees its status - and a SIGKILL (the stop of a stalled, frozen host) only when no other
    active run is held by that host (`shares_host`)."""
    pid = run.get("pid")
    if worker_table.host_id_of(run.get("worker")) is not None:
        if signum != signal.SIGKILL:
            worker_table.release_untaken(store, run["id"])
            return
        if shares_host(store, run):
            return
    if not pid or not pid_alive(pid):
        return
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # it ended meanwhile
        pass


def _launch(store: RunStore, run_id: int) -> None:
    """Start a cold worker process for a claimed (`starting`) run (`worker = 'cold'`).

    The process runs `python -m runs.process.worker --store <path> --run-id <id>` in the project
    root with `TF_USE_LEGACY_KERAS=1`, in its own session (it survives a Streamlit rerun and a
    restart of the server), its output appended to `log_path(store, id)`. Its pid and its
    start time (`runs.store.processes.process_start`: the identity that tells a stalled run from a
    dead one whose pid was reused) are stored with the run.
    """
    path = log_path(store, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "ab") as log:
            _PROCESSES[run_id] = subprocess.Popen(
                [sys.executable, "-m", "runs.process.worker", "--store", str(store.path),
                 "--run-id", str(run_id)],
                cwd=PROJECT_ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
    except OSError as error:  # no place lost: the run is failed, the next one may start
        store.set_status(run_id, "failed", f"the run process could not start: {error}")
        return
    pid = _PROCESSES[run_id].pid
    store.update_run(run_id, pid=pid, pid_start=process_start(pid), worker="cold")
