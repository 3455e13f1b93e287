"""A run host: `python -m runs.process.run_host --store PATH --host-id N --parent PID`.

One process, TensorFlow imported once, that trains MANY runs. Started by the warm pool
(`runs.service.warm_pool`) before any run needs it, it pays the slow part up front - importing
TensorFlow, tf_keras and the engine (4-5 s, ~750 MB on the 2-core machine), configuring the
devices and preparing the engine of the Train page's default Setup (`engine.prepared`; not when
a run given to it while it imported already waits: that run builds its own engine first) -
then marks its row `ready`.

Runs are given to it by the dispatcher (`runs.service.worker_table.assign`: `runs.worker =
'host <id>'`, one transaction) while it holds fewer than its capacity
(`runs.service.pool.runs_per_host`); it polls for them every `POLL_S` seconds (one indexed
SELECT on a kept connection), takes each (`taken_at` stamped, a line in the run's log) and
opens it as a `runs.process.run_session.RunSession` with its own engine (model, optimizer and
slots, data order, traced step), its own `RunLoop` and its own commands. A run of the default
Setup adopts the prepared engine (no build, no trace after its Start); the host prepares the
next one between two rounds of its other runs once no run it holds (paused ones aside) waits
for its first step: a preparation pauses them all for ~1 s, and done before a run's first step
it made Start -> first step 1.8-2.2 s instead of 0.1 s on a warm host here. The runs are
interleaved step by step in this process's main thread by `runs.process.host_scheduler`
(round-robin, paced runs at their pace, paused runs only polled). A run that raises, diverges,
is stopped or paused leaves the others training (tests/test_run_hosts.py).

One heartbeat thread beats every held run (one UPDATE per `run_loop.HEARTBEAT_S`), also while
the main thread builds a new run's engine, and notices a run a page ended from outside (a
stalled run's stop). When a run ends the host releases it (`worker_table.release`) and hands
its pool place over (`runs.service.pool.dispatch`), so the queue drains with no page open.
Once its first run's first step is recorded the host lowers its CPU priority for good
(`runs.process.worker._lower_priority`), so the pages that watch get the CPU first.

It exits when it holds no run and its parent process is gone (the server exited or was killed:
no orphan holding ~750 MB), its row is `retired` (the pool shut down) or it got SIGTERM;
SIGTERM with runs stops them (`stopped by signal 15 after step N`) first. Runs it holds outlive
a restart of the server, as a cold run process does. A host killed with SIGKILL: every run it
held is marked `interrupted` by the next stale check (`RunStore.mark_interrupted`), naming the
host and the last committed step.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the store module is light, but the host imports it after warming up
    from runs.process.run_session import RunSession
    from runs.store.run_store import RunStore

POLL_S = 0.05
# Exit codes of a host.
EXIT_DONE = 0
EXIT_ORPHANED = 3


def warm_up() -> None:
    """Import TensorFlow and everything a run imports, and configure the devices (the first
    model build and first trace come after: `prepare_default`, or the first run's own engine).

    The runs' numbers do not depend on what is built first: `engine.train_step.Engine` seeds
    everything from the run seed and every initialiser has an explicit seed (`engine.models`),
    and a prepared engine is restored bit for bit before a run adopts it."""
    import tensorflow as tf

    from engine.devices import configure_gpus
    from engine.train_step import Engine  # noqa: F401  (what every run imports)
    from runs.process import worker  # noqa: F401  (the run loop and the command table)

    configure_gpus()
    tf.constant(1.0).numpy()


def publish_devices(data_dir: Path) -> None:
    """Write the logical devices this host sees for the server's device list
    (`runs.store.host_devices`): the server then starts no TensorFlow child to list them."""
    from engine.devices import list_devices
    from runs.store import host_devices

    host_devices.write(data_dir, [device["name"] for device in list_devices()])


def prepare_default() -> Any:
    """A `engine.prepared.PreparedEngine` of the Train page's default Setup
    (`settings.fields.page_defaults()`) on the device a run would get: a run of that config
    adopts it and its first step comes without building or tracing anything. None on a failure
    (it only costs the head start; the reason is logged)."""
    from engine import prepared
    from engine.devices import choose_device
    from settings import fields

    try:
        config = fields.page_defaults()
        return prepared.PreparedEngine(config, choose_device(config.device))
    except Exception as error:  # noqa: BLE001 - the run builds its engine itself then
        print(f"no prepared engine: {type(error).__name__}: {error}", file=sys.stderr)
        return None


def _append_line(path: Path, line: str) -> None:
    """Append one line to a run's log file (its output lives in the host's log)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(line.rstrip() + "\n")
    except OSError:  # the data directory may be the full disk
        pass


class RunHost:
    """The serving loop of one host process (see the module docstring).

    Args:
        store: the run store; host_id: this host's `workers` row; parent: the pool's pid.
        prepared: a `PreparedEngine` to adopt for the first run of its config, or None.
        keep_prepared: prepare the default Setup's engine whenever none is kept and no held
            run waits for its first step (None: when `prepared` was given; a failed
            preparation is not tried again).
        record_pid: write this process's pid on the runs it takes (`host_main`).
    """

    def __init__(self, store: RunStore, host_id: int, parent: int, prepared: Any = None,
                 record_pid: bool = True, keep_prepared: bool | None = None):
        from runs.process.host_scheduler import HostScheduler

        self.store, self.host_id, self.parent = store, host_id, parent
        self.prepared = prepared
        self.record_pid = record_pid
        # keep a prepared default engine at all times (by default: when one was given)
        self._prepare = prepared is not None if keep_prepared is None else keep_prepared
        self.scheduler = HostScheduler(on_end=self._ended)
        self.signalled: int | None = None
        self._lowered = False
        self._opening: int | None = None  # the run whose engine is being built
        self._ended_outside: set[int] = set()  # runs a page ended (seen by the heartbeat)
        self._stop_beat = threading.Event()
        self._beat_thread = threading.Thread(target=self._beat, name="host-heartbeat",
                                             daemon=True)

    # ----- engines -------------------------------------------------------------------------
    def engine_source(self, config: Any, device: str) -> Any:
        """The prepared engine when it can serve `config` (it serves once), else a new
        `Engine`. Never `clear_session`: other runs of this host live in the same Keras state."""
        from engine.train_step import Engine

        if self.prepared is not None and self.prepared.can_serve(config, device):
            engine, self.prepared = self.prepared.adopt(config), None
            return engine
        return Engine(config, device)

    def _first_step(self) -> None:
        if not self._lowered:
            self._lowered = True
            from runs.process.worker import _lower_priority

            _lower_priority()

    # ----- runs ----------------------------------------------------------------------------
    def take_new_runs(self, con: Any) -> int:
        """Take and open the runs given to this host since the last poll; returns how many."""
        from runs.process.run_session import RunSession
        from runs.service import worker_table
        from runs.service.pool import log_path

        taken = 0
        for run_id in worker_table.new_runs(self.store, self.host_id, con):
            if not worker_table.take(self.store, self.host_id, run_id):
                continue
            env = worker_table.row(self.store, self.host_id)["env"]
            os.environ.update(env)  # the dispatcher's plugin folder and plugin files
            _append_line(log_path(self.store, run_id),
                         f"run host {self.host_id} (pid {os.getpid()}) takes run {run_id} "
                         f"beside {len(self.scheduler)} other run(s); the host's output is in "
                         f"{host_log_name(self.host_id)}")
            session = RunSession(self.store, run_id, engine_source=self.engine_source,
                                 after_first_step=self._first_step, record_pid=self.record_pid)
            self._opening = run_id
            try:
                self.scheduler.open_and_add(session)
            finally:
                self._opening = None
            taken += 1
        return taken

    def _ended(self, session: RunSession) -> None:
        from runs.process.worker import _hand_over
        from runs.service import worker_table
        from runs.service.pool import log_path

        try:
            worker_table.release(self.store, session.run_id)
        except Exception as error:  # noqa: BLE001 - a busy store: the stale check frees it
            print(f"run {session.run_id}: release failed: {error}", file=sys.stderr, flush=True)
        step = session.run.step if session.run is not None else 0
        _append_line(log_path(self.store, session.run_id),
                     f"run host {self.host_id}: run {session.run_id} ended {session.status} "
                     f"at step {step}")
        self._ended_outside.discard(session.run_id)
        _hand_over(self.store)

    def _beat(self) -> None:
        from runs.protocol import FINAL_STATUSES
        from runs.process.run_loop import HEARTBEAT_S
        from runs.store.connection import database_errors

        con = self.store.open_connection()
        try:
            while not self._stop_beat.wait(HEARTBEAT_S):
                held = self.scheduler.run_ids() + (
                    [self._opening] if self._opening is not None else [])
                if not held:
                    continue
                marks = ",".join("?" * len(held))
                try:
                    con.execute(f"UPDATE runs SET heartbeat = ? WHERE id IN ({marks})",
                                [time.time(), *held])
                    ended = [r for r, s in con.execute(
                        f"SELECT id, status FROM runs WHERE id IN ({marks})", held)
                        if s in FINAL_STATUSES]
                    self._ended_outside.update(ended)
                except database_errors():  # a busy store: beat again next time
                    pass
        finally:
            con.close()

    # ----- the loop ------------------------------------------------------------------------
    def serve(self) -> int:
        """Train the runs given to this host until it must exit; returns the exit code."""

        self._beat_thread.start()
        con = self.store.open_connection()
        scheduler, stopping = self.scheduler, False
        last_check = 0.0
        try:
            while True:
                now = time.monotonic()
                if now - last_check >= POLL_S:
                    last_check = now
                    found = con.execute("SELECT state FROM workers WHERE id = ?",
                                        (self.host_id,)).fetchone()
                    state = found[0] if found is not None else "gone"
                    for run_id in list(self._ended_outside):
                        scheduler.stop_run(run_id, "ended from outside the host")
                    if self.signalled is not None and not stopping:
                        stopping = True
                        scheduler.stop_all(f"stopped by signal {self.signalled} after step "
                                           "{step}")
                    if state != "gone" and not stopping:
                        self.take_new_runs(con)
                    if not scheduler.sessions:
                        orphaned = os.getppid() != self.parent
                        if stopping or orphaned or state not in ("warming", "ready"):
                            if self._leave(con, state, stopping):
                                return EXIT_ORPHANED if orphaned else EXIT_DONE
                            continue
                    if self.prepared is None and self._prepare and not self._first_step_due():
                        # the next default run's head start, paid now rather than after its
                        # Start (a pause of the held runs, as a new run's build would be), but
                        # after the first step of a run just taken: that run's user is waiting
                        held = ", ".join(f"run {s.run_id} at step {s.run.step}"
                                         for s in scheduler.sessions if s.run is not None)
                        print(f"preparing the default Setup's engine (held: {held or 'none'})",
                              file=sys.stderr, flush=True)
                        self.prepared = prepare_default()
                        self._prepare = self.prepared is not None  # a failure: never again
                        continue
                if not scheduler.round():
                    wake = scheduler.next_wake(now + POLL_S)
                    time.sleep(max(0.0, min(POLL_S, wake - time.monotonic())))
        finally:
            self._stop_beat.set()
            con.close()

    def _first_step_due(self) -> bool:
        """True while a held run has not trained its first step and is not paused (its
        Start's user watches a page that waits for that step)."""
        return any(s.run is not None and s.run.step == 0 and not s.run.paused
                   for s in self.scheduler.sessions)

    def _leave(self, con: Any, state: str, stopping: bool) -> bool:
        """Leave the table (`gone`: no run can be given to it any more); True when no run was
        given to it meanwhile and it may exit. A run given in the race is taken (or, after a
        SIGTERM, stopped before its first step) and the host stays."""
        from runs.service import worker_table

        worker_table.set_state(self.store, self.host_id, "gone")
        left = worker_table.new_runs(self.store, self.host_id, con)
        if not left:
            return True
        if stopping:
            for run_id in left:
                self.store.set_status(run_id, "stopped", f"stopped by signal {self.signalled} "
                                      "before its first step", only_from=("starting",))
                worker_table.release(self.store, run_id)
            return True
        back = state if state in ("warming", "ready", "retired") else "retired"
        worker_table.set_state(self.store, self.host_id, back, only_from=("gone",))
        self.take_new_runs(con)
        return False

    def on_sigterm(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        """SIGTERM: stop the held runs at their next step, then exit."""
        self.signalled = signum


def host_log_name(host_id: int) -> str:
    """The file name of a host's log in `<store dir>/logs` (`runs.service.pool.host_log_path`)."""
    return f"host-{host_id}.log"


def main(argv: list[str] | None = None) -> int:
    """Warm up, mark the row `ready`, serve runs; returns the exit code (`EXIT_DONE`, or
    `EXIT_ORPHANED` when the parent died)."""
    parser = argparse.ArgumentParser(description="An Optimizer Lab run host.")
    parser.add_argument("--store", required=True, help="path of the run-store SQLite file")
    parser.add_argument("--host-id", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="pid of the pool's process")
    args = parser.parse_args(argv)
    if os.getppid() != args.parent:  # the pool's process died before we even started
        return EXIT_ORPHANED
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(EXIT_DONE))  # while warming
    return host_main(args.store, args.host_id, args.parent,
                     on_host=lambda host: signal.signal(signal.SIGTERM, host.on_sigterm))


def host_main(store_location: str, host_id: int, parent: int, record_pid: bool = True,
              on_host: Callable[[RunHost], Any] | None = None) -> int:
    """The life of a host after its start: warm up (`warm_up`), prepare the default Setup's
    engine unless a run given to it already waits (`prepare_default`), mark its `workers` row
    `ready`, serve runs (`RunHost.serve`), leave the row `gone`; returns the exit code. Shared
    by the host process (`main`) and the Ray host actor (`runs.service.ray_hosts`).

    Args:
        store_location: the run store (SQLite path or PostgreSQL URL); host_id: its row.
        parent: the pid whose end orphans the host (it exits once idle).
        record_pid: write this process's pid on the runs it takes (False on Ray: the pid of a
            process on another node means nothing to the server's liveness checks).
        on_host: called with the `RunHost` before it serves (the process installs its SIGTERM
            handler there).
    """
    warm_up()
    from runs.service import worker_table
    from runs.store.run_store import RunStore

    store = RunStore(store_location)
    if record_pid:  # a local host: the server offers the devices it sees (not a Ray actor's)
        publish_devices(store.data_dir)
    # A Start given while the host imported is waiting: its run builds its own engine at once
    # (~0.5 s, its later recording levels traced on their first use) rather than after a
    # preparation of the default one with its rehearsal; the host prepares that afterwards.
    waiting = worker_table.new_runs(store, host_id)
    if waiting:
        print(f"warmed up with run(s) {', '.join(map(str, waiting))} waiting: their engines are "
              "built before the default Setup's is prepared", file=sys.stderr, flush=True)
    prepared = None if waiting else prepare_default()
    host = RunHost(store, host_id, parent, prepared, record_pid=record_pid,
                   keep_prepared=bool(waiting) or prepared is not None)
    if on_host is not None:
        on_host(host)
    if not worker_table.set_state(store, host_id, "ready", only_from=("warming",)):
        if not worker_table.new_runs(store, host_id):  # retired while warming
            worker_table.set_state(store, host_id, "gone")
            return EXIT_DONE
    try:
        return host.serve()
    finally:  # also on an unexpected error: the row must not say `ready`
        try:
            worker_table.set_state(store, host_id, "gone")
        except Exception:  # noqa: BLE001 - the store may be gone; the row is then moot
            pass


if __name__ == "__main__":
    sys.exit(main())
