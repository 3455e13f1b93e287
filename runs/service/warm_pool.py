"""The warm pool: spare run processes that already imported TensorFlow, kept by a long-lived
process (the Streamlit server; a test). No Streamlit, no TensorFlow.

Why: a cold run process imports TensorFlow (4-5 s, ~750 MB on the 2-core machine) before its
first step: Start -> first step costs 5-8 s cold, 15-78 s under load. A warm worker
(`runs.process.warm_worker`) pays that before any run needs it; `runs.service.pool.dispatch`
gives a claimed run to a ready one in one transaction (`runs.service.worker_table.assign`) and
falls back to a cold process when none is ready. Each warm worker trains exactly one run and
exits, so runs stay isolated from each other exactly as with cold processes (a fresh process per
run).

`keep_warm(store)` starts (once per process) a refill thread that every `REFILL_EVERY_S`
seconds, and at once after an assignment: moves the workers given a run into
`runs.service.pool._PROCESSES` (reaped like cold ones), forgets the ones that exited, and starts
new spares up to `runs.store.admission.warm_spares` (one per free pool place,
`OPTIMIZER_LAB_POOL_SIZE`, within the memory budget) - once no run is starting
(`STARTING_PRIORITY_S`). `shutdown()` (also at exit) retires and terminates this process's idle
workers; a worker whose parent dies without a shutdown exits by itself (see
`runs.process.warm_worker`), so the server never leaves orphans.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from runs.service import worker_table
from runs.store import admission
from runs.service.pool import (_ON_ASSIGN, _PROCESSES, _WARM_CHILDREN, PROJECT_ROOT, pool_size,
                       warm_enabled, worker_env)
from runs.store.processes import process_start
from runs.store.run_store import RunStore

REFILL_EVERY_S = 0.5
# A spare is not started while a run started less than this many seconds ago is still
# `starting` (building its model, compiling its first step): on 2 cores a TensorFlow import
# beside it would delay its first step, which is what the user waits for.
STARTING_PRIORITY_S = 30.0
SHUTDOWN_WAIT_S = 10.0
MAX_FAILURES = 3


def warm_log_path(store: RunStore, worker_id: int) -> Path:
    """`<store dir>/logs/warm-<id>.log`: a warm worker's output until it takes a run (then it
    writes to the run's log, `runs.service.pool.log_path`); removed once the worker is gone."""
    return store.data_dir / "logs" / f"warm-{worker_id}.log"


class WarmPool:
    """The spare warm workers of one store, kept by this process (see the module docstring).

    Args:
        store: the run store the workers poll and whose runs they train.
    """

    def __init__(self, store: RunStore):
        self.store = store
        self._key = str(store.path)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="warm-pool", daemon=True)
        self.last_error = ""
        self.failures = 0  # warm workers in a row that died before they were ready

    def start(self) -> None:
        """Start the refill thread (a daemon: it never keeps the process alive)."""
        self._thread.start()

    def alive(self) -> bool:
        """True while the refill thread runs and `shutdown` was not called."""
        return self._thread.is_alive() and not self._stop.is_set()

    def wake(self) -> None:
        """Refill now instead of at the next tick (called after a worker was given a run)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refill()
            except Exception as error:  # noqa: BLE001 - a busy store or a bad setting: retry
                if str(error) != self.last_error:
                    print(f"warm pool: {error}", file=sys.stderr, flush=True)
                self.last_error = str(error)
            self._wake.wait(REFILL_EVERY_S)
            self._wake.clear()

    def _mine(self) -> dict[int, subprocess.Popen]:
        return {wid: proc for (key, wid), proc in list(_WARM_CHILDREN.items())
                if key == self._key}

    def collect(self) -> None:
        """Hand workers that were given a run to `runs.service.pool._PROCESSES` (by run id), forget
        exited ones and remove their warm logs."""
        mine = self._mine()
        for wid, run_id in worker_table.runs_of(self.store, list(mine)).items():
            proc = _WARM_CHILDREN.pop((self._key, wid), None)
            if proc is not None:
                _PROCESSES[run_id] = proc
        for wid, proc in self._mine().items():
            if proc.poll() is not None:
                _WARM_CHILDREN.pop((self._key, wid), None)
                log = warm_log_path(self.store, wid)
                if worker_table.row(self.store, wid)["ready_at"] is None:
                    # died while warming up (TensorFlow cannot be imported, out of memory):
                    # keep its log and do not respawn forever
                    self.failures += 1
                    self.last_error = (f"warm worker {wid} exited with code {proc.returncode} "
                                       f"before it was ready; see {log}")
                else:
                    self.failures = 0
                    log.unlink(missing_ok=True)

    def refill(self) -> list[int]:
        """Collect, then start the spares `runs.store.admission.warm_spares` asks for; returns
        their worker ids.

        Raises:
            ValueError: an invalid pool size, memory budget or warm-workers setting.
            StoreUnavailable: the store cannot be read or written.
        """
        with self._lock:
            self.collect()
            if self._stop.is_set() or not warm_enabled() or self.failures >= MAX_FAILURES:
                return []  # after MAX_FAILURES failed warm-ups every run goes cold
            active, queued, starting = worker_table.places(self.store, STARTING_PRIORITY_S)
            if starting:  # a run builds and compiles its first step: leave it the cores
                return []
            wanted = admission.warm_spares(active, len(worker_table.spares(self.store)), queued,
                                           pool_size(), admission.memory_budget_mb())
            return [wid for wid in (self._spawn() for _ in range(wanted)) if wid is not None]

    def _spawn(self) -> int | None:
        """Start one warm worker (its row first: the worker needs its id); None on OSError."""
        wid = worker_table.register(self.store, os.getpid())
        log = warm_log_path(self.store, wid)
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "runs.process.warm_worker", "--store", self._key,
                     "--worker-id", str(wid), "--parent", str(os.getpid())],
                    cwd=PROJECT_ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
        except OSError as error:
            worker_table.set_state(self.store, wid, "gone")
            print(f"warm pool: could not start a worker: {error}", file=sys.stderr, flush=True)
            return None
        worker_table.set_process(self.store, wid, proc.pid, process_start(proc.pid))
        _WARM_CHILDREN[(self._key, wid)] = proc
        return wid

    def wait_ready(self, count: int, timeout_s: float = 120.0) -> int:
        """Wait until at least `count` spares are `ready`; returns how many are.

        Raises:
            TimeoutError: fewer after `timeout_s` seconds (message gives the states).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            spares = worker_table.spares(self.store)
            ready = sum(1 for s in spares if s["state"] == "ready")
            if ready >= count:
                return ready
            if time.monotonic() > deadline:
                raise TimeoutError(f"{ready} warm workers ready after {timeout_s} s, waited for "
                                   f"{count}: {spares} {self.last_error}")
            time.sleep(0.05)

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> None:
        """Stop refilling; retire this process's idle workers and terminate them (SIGTERM,
        SIGKILL after `wait_s` seconds). Workers training a run are left alone."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait_s)
        with self._lock:
            self.collect()
            try:
                retired = {wid for wid, _ in worker_table.retire(self.store, os.getpid())}
            except Exception:  # noqa: BLE001 - store gone: our idle children still must go
                retired = set(self._mine())
            procs = [(wid, proc) for wid, proc in self._mine().items() if wid in retired]
            for _, proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for wid, proc in procs:
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                _WARM_CHILDREN.pop((self._key, wid), None)
                warm_log_path(self.store, wid).unlink(missing_ok=True)


_POOL: list[WarmPool] = []  # at most one per process
_POOL_LOCK = threading.Lock()


def keep_warm(store: RunStore) -> WarmPool | None:
    """Keep spare warm workers for `store` in this process (idempotent; a pool kept for
    another store is shut down first). Returns the pool, or None when warm workers are off
    (`OPTIMIZER_LAB_WARM_WORKERS=off`).

    Call it from the long-lived process that serves the pages (its children die with it).

    Raises:
        ValueError: an invalid `OPTIMIZER_LAB_WARM_WORKERS`.
    """
    if not warm_enabled():
        return None
    with _POOL_LOCK:
        if _POOL and _POOL[0].alive() and _POOL[0].store.path == store.path:
            return _POOL[0]
        if _POOL:
            _POOL.pop().shutdown()
        pool = WarmPool(RunStore(store.path))
        _POOL.append(pool)
        _ON_ASSIGN[:] = [pool.wake]
        pool.start()
        return pool


def shutdown() -> None:
    """Shut down this process's warm pool, if any (registered to run at exit)."""
    with _POOL_LOCK:
        if _POOL:
            pool = _POOL.pop()
            _ON_ASSIGN[:] = []
            pool.shutdown()


atexit.register(shutdown)
