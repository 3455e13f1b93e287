"""A warm worker: `python -m runs.process.warm_worker --store PATH --worker-id N --parent PID`.

Started by a warm pool (`runs.service.warm_pool`) BEFORE any run needs it, it pays the slow
part of a run process up front - importing TensorFlow, tf_keras and the engine (4-5 s, ~750 MB
on the 2-core machine) and configuring the devices (`engine.devices.configure_gpus`, which must run
before TensorFlow initialises them) - then marks its row `ready` and waits, polling its row of
the store's `workers` table every `POLL_S` seconds (one indexed SELECT on a kept connection).

When a dispatcher assigns it a run (`runs.service.worker_table.assign`, one transaction), it
takes the run (`taken_at` stamped), moves its output to the run's log, and trains that ONE run
with the same code as a cold run process (`runs.process.worker.run_one`), then exits. Runs are
therefore isolated as with cold processes: every run gets a fresh process, so a run that
diverges, is stopped, crashes or is killed cannot leak state into another run; the pool starts
a new spare in the background.

While idle it exits by itself when its parent process is gone (`os.getppid()` changed: the
server exited or was killed, so it never becomes an orphan holding ~750 MB) or when its row is
`retired` (the pool shut down); SIGTERM while idle exits too. Once it holds a run it stops
watching its parent: a run outlives a restart of the server, as a cold run process does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store module is light, but the worker imports it after warming up
    from runs.store.run_store import RunStore

POLL_S = 0.05
# Exit codes of a worker that trained nothing (a run's own exit code is
# `runs.process.worker.run_one`'s).
EXIT_RETIRED = 0
EXIT_ORPHANED = 3


def warm_up() -> None:
    """Import TensorFlow and everything a run imports, configure the devices, and build and
    evaluate one throwaway engine on a tiny problem (moons, logistic): the first model build and
    the first trace in a process cost ~2 s more than later ones (measured 3.3 s vs 1.4 s on the
    loaded 2-core machine). Then prepare the Train page's default engine (`prepare_default`).

    The run's numbers do not depend on this: `engine.train_step.Engine` seeds everything from
    the run seed and every initialiser has an explicit seed (`engine.models`),
    `tf_keras.backend.clear_session()` resets the layer-name counters afterwards, and a
    prepared engine is restored bit for bit before a run adopts it."""
    import tensorflow as tf
    import tf_keras

    from engine.devices import configure_gpus
    from engine.train_step import Engine
    from runs.process import worker  # noqa: F401  (the run loop and the command table)
    from settings.run_config import RunConfig

    configure_gpus()
    tf.constant(1.0).numpy()
    Engine(RunConfig(dataset="moons", model="logistic", steps=1), "/device:CPU:0").evaluate()
    tf_keras.backend.clear_session()
    prepare_default()


def prepare_default() -> None:
    """Build, trace and rehearse the engine of the Train page's default Setup
    (`settings.fields.page_defaults()`) on the device a run would get, restored to its fresh
    state (`engine.prepared`): a run of that config adopts it and its first step comes without
    building or tracing anything. A failure here only costs the head start."""
    from engine import prepared
    from engine.devices import choose_device
    from settings import fields

    try:
        config = fields.page_defaults()
        prepared.keep(prepared.PreparedEngine(config, choose_device(config.device)))
    except Exception as error:  # noqa: BLE001 - the run builds its engine itself then
        print(f"no prepared engine: {type(error).__name__}: {error}", file=sys.stderr)


def _wait_for_run(store: RunStore, worker_id: int, parent_pid: int) -> int | None:
    """Poll this worker's row until it is assigned a run (its id) or must exit (None)."""
    con = store.open_connection()
    try:
        while True:
            row = con.execute("SELECT state, run_id FROM workers WHERE id = ?",
                              (worker_id,)).fetchone()
            if row is not None and row[0] == "assigned":  # taken even if the parent just died
                return int(row[1])
            if row is None or row[0] not in ("warming", "ready") or os.getppid() != parent_pid:
                return None
            time.sleep(POLL_S)
    finally:
        con.close()


def _log_to(path: Path) -> None:
    """Send this process's stdout and stderr (fds 1 and 2) to `path`, appended."""
    sys.stdout.flush()
    sys.stderr.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _move_warm_log(path: Path) -> None:
    """Append the warm-up output (TensorFlow's start-up lines) to the run's log, remove it."""
    try:
        text = path.read_text(errors="replace")
        path.unlink()
    except OSError:
        return
    print(f"--- warm-up output of this worker (before the run) ---\n{text.rstrip()}\n---",
          file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Warm up, wait for a run, train it; returns the exit code (`EXIT_RETIRED` or
    `EXIT_ORPHANED` when no run came, else the run's, see `runs.process.worker.run_one`)."""
    parser = argparse.ArgumentParser(description="A warm Optimizer Lab run worker.")
    parser.add_argument("--store", required=True, help="path of the run-store SQLite file")
    parser.add_argument("--worker-id", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="pid of the pool's process")
    args = parser.parse_args(argv)
    if os.getppid() != args.parent:  # the pool's process died before we even started
        return EXIT_ORPHANED

    warm_up()
    from runs.process import worker
    from runs.service import worker_table
    from runs.store.run_store import RunStore

    signal.signal(signal.SIGTERM, worker._on_sigterm)  # idle: exits; with a run: stops it
    store = RunStore(args.store)
    if not worker_table.set_state(store, args.worker_id, "ready", only_from=("warming",)):
        worker_table.set_state(store, args.worker_id, "gone")
        return EXIT_RETIRED
    try:
        return _serve(store, args.worker_id, args.parent)
    finally:  # also on SIGTERM (SystemExit) while idle or before the run took off
        try:
            worker_table.set_state(store, args.worker_id, "gone")
        except Exception:  # noqa: BLE001 - the store may be gone; the row is then moot
            pass


def _serve(store: RunStore, worker_id: int, parent: int) -> int:
    """Wait for a run and train it (see `main`); returns the exit code."""
    from runs.process import worker
    from runs.service import worker_table
    from runs.service.pool import log_path
    from runs.service.warm_pool import warm_log_path

    run_id = _wait_for_run(store, worker_id, parent)
    if run_id is None:
        orphaned = os.getppid() != parent
        if worker_table.set_state(store, worker_id, "gone",
                                  only_from=("warming", "ready", "retired")):
            return EXIT_ORPHANED if orphaned else EXIT_RETIRED
        current = worker_table.row(store, worker_id)  # assigned in the meantime: take it
        if current["state"] != "assigned":
            return EXIT_RETIRED
        run_id = int(current["run_id"])
    _log_to(log_path(store, run_id))
    _move_warm_log(warm_log_path(store, worker_id))
    env = worker_table.row(store, worker_id)["env"]
    os.environ.update(env)  # the dispatcher's plugin folder and plugin files
    print(f"warm worker {worker_id} (pid {os.getpid()}) takes run {run_id}; "
          f"env {json.dumps(sorted(env))}", file=sys.stderr, flush=True)
    worker_table.take(store, worker_id, run_id)
    return worker.run_one(store, run_id)


if __name__ == "__main__":
    sys.exit(main())
