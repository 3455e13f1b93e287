"""The run hosts of one store as local processes (`WarmPool`), and the one pool this process
keeps (`current`). No Streamlit, no TensorFlow. Which kind of pool a process keeps, and its
start and shutdown, are `runs.service.warm_pool`'s; the Ray pool (`runs.service.ray_hosts`)
extends this one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from runs.service import worker_table
from runs.store import admission
from runs.service.pool import (_HOST_CHILDREN, PROJECT_ROOT, host_count, host_log_path,
                               warm_enabled, worker_env)
from runs.store.processes import process_start
from runs.store.run_store import RunStore

REFILL_EVERY_S = 0.5
# A second host is not started while a run started less than this many seconds ago has no
# step yet (building its model, compiling its first step): on 2 cores a TensorFlow import
# beside it would delay its first step, which is what the user waits for.
STARTING_PRIORITY_S = 30.0
SHUTDOWN_WAIT_S = 10.0
MAX_FAILURES = 3


class WarmPool:
    """The run hosts of one store, kept by this process (see the module docstring).

    Args:
        store: the run store the hosts poll and whose runs they train.
    """

    # Hosts importing TensorFlow at once: one. They share this machine's cores, and the first
    # Start of a fresh server waits for the first host: on 2 cores, with the first page, its
    # plugin check and device probe open, the first host was ready 31 s after its start with a
    # second host importing beside it, 17-20 s alone (~8 s on a quiet machine).
    max_warming = 1

    def __init__(self, store: RunStore):
        self.store = store
        self._key = str(store.path)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="warm-pool", daemon=True)
        self.last_error = ""
        self.failures = 0  # hosts in a row that died before they were ready

    def start(self) -> None:
        """Start the refill thread (a daemon: it never keeps the process alive)."""
        self._thread.start()

    def alive(self) -> bool:
        """True while the refill thread runs and `shutdown` was not called."""
        return self._thread.is_alive() and not self._stop.is_set()

    def wake(self) -> None:
        """Refill now instead of at the next tick (called after a host was given a run)."""
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
        return {hid: proc for (key, hid), proc in list(_HOST_CHILDREN.items())
                if key == self._key}

    def collect(self) -> None:
        """Forget the hosts that exited (a clean one's log removed; one that died before it
        was ready counts as a failure and keeps its log)."""
        for hid, proc in self._mine().items():
            if proc.poll() is not None:
                _HOST_CHILDREN.pop((self._key, hid), None)
                log = host_log_path(self.store, hid)
                if worker_table.row(self.store, hid)["ready_at"] is None:
                    # died while warming up (TensorFlow cannot be imported, out of memory):
                    # keep its log and do not respawn forever
                    self.failures += 1
                    self.last_error = (f"run host {hid} exited with code {proc.returncode} "
                                       f"before it was ready; see {log}")
                else:
                    self.failures = 0
                    if proc.returncode == 0:
                        log.unlink(missing_ok=True)

    def refill(self) -> list[int]:
        """Collect, then start the hosts `runs.store.admission.hosts_wanted` asks for; returns
        their host ids.

        Raises:
            ValueError: an invalid hosts, memory budget or warm-workers setting.
            StoreUnavailable: the store cannot be read or written.
        """
        with self._lock:
            self.collect()
            if self._stop.is_set() or not warm_enabled() or self.failures >= MAX_FAILURES:
                return []  # after MAX_FAILURES failed warm-ups every run goes cold
            live = [h for h in worker_table.hosts(self.store) if h["state"] in
                    worker_table.SPARE_STATES]
            _, _, starting = worker_table.places(self.store, STARTING_PRIORITY_S)
            if starting and live:  # a run builds and compiles its first step: leave it the cores
                return []
            warming = sum(h["state"] == "warming" for h in live)
            wanted = min(self.hosts_wanted(len(live)), self.max_warming - warming)
            return [hid for hid in (self._spawn() for _ in range(wanted)) if hid is not None]

    def hosts_wanted(self, live: int) -> int:
        """How many hosts to start beside the `live` ones: `admission.hosts_wanted` with this
        machine's memory budget and what its processes hold.

        Raises:
            ValueError: an invalid hosts or memory budget setting.
        """
        with self.store._connect() as con:
            held = admission.Account(con).held_mb()
        return admission.hosts_wanted(live, host_count(), admission.memory_budget_mb(), held)

    def _spawn(self) -> int | None:
        """Start one run host (its row first: the host needs its id); None on OSError."""
        wid = worker_table.register(self.store, os.getpid())
        log = host_log_path(self.store, wid)
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "runs.process.run_host", "--store", self._key,
                     "--host-id", str(wid), "--parent", str(os.getpid())],
                    cwd=PROJECT_ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
        except OSError as error:
            worker_table.set_state(self.store, wid, "gone")
            print(f"warm pool: could not start a run host: {error}", file=sys.stderr, flush=True)
            return None
        worker_table.set_process(self.store, wid, proc.pid, process_start(proc.pid))
        _HOST_CHILDREN[(self._key, wid)] = proc
        return wid

    def wait_ready(self, count: int, timeout_s: float = 120.0) -> int:
        """Wait until at least `count` run hosts are `ready`; returns how many are.

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
                raise TimeoutError(f"{ready} run hosts ready after {timeout_s} s, waited for "
                                   f"{count}: {spares} {self.last_error}")
            time.sleep(0.05)

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> None:
        """Stop refilling; retire this process's hosts (they take no new run). Idle ones are
        terminated (SIGTERM, SIGKILL after `wait_s` seconds); ones holding runs train them to
        their end and then exit by themselves."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait_s)
        with self._lock:
            self.collect()
            try:
                worker_table.retire(self.store, os.getpid())
                busy = {h["id"] for h in worker_table.hosts(self.store) if h["runs"]}
            except Exception:  # noqa: BLE001 - store gone: our idle children still must go
                busy = set()
            procs = [(hid, proc) for hid, proc in self._mine().items() if hid not in busy]
            for _, proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for hid, proc in procs:
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                _HOST_CHILDREN.pop((self._key, hid), None)
                host_log_path(self.store, hid).unlink(missing_ok=True)


_POOL: list[WarmPool] = []  # at most one per process
_POOL_LOCK = threading.Lock()


def current() -> WarmPool | None:
    """The pool this process keeps (`keep_warm`), or None."""
    with _POOL_LOCK:
        return _POOL[0] if _POOL else None
