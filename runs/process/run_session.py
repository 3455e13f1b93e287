"""One run's life inside a process that holds TensorFlow: open it, advance it, end it.

`RunSession` is the part of a run that does not depend on how many runs the process holds: read
the run's `RunConfig` from the store, build (or adopt) its engine, write its first records
(step-0 validation, the initial hyperparameters, the optimizer config), take the commands queued
with it, then `advance` one step at a time (`runs.process.run_loop.RunLoop.advance`) and finally
write its end. A cold process trains one session to its end (`runs.process.worker.train`); a
run host interleaves many (`runs.process.host_scheduler`). Every session owns its engine
(model, optimizer and slots, data order, traced functions), its `RunLoop` (buffers, writer
thread, polling connection) and its command handlers: nothing but the process is shared.

Ends: `finished`, `stopped`, `diverged` (`RunLoop.advance`), `failed` (`fail`, any exception
of the run's own code; a host's other runs go on). A run stopped by a page while it was still
`starting` is not taken (`open` returns its status).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from engine import recording
from engine.record_rows import HyperChangeRow
from optimizer_plugins import plugin_discovery as plugins
from runs.process.handlers import HANDLERS
from runs.process.run_loop import Diverged, RunLoop
from runs.process import checkpoint
from runs.store.files import StoreUnavailable, keep_last_words
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

# Final statuses are written only over these (never over a `stopped` set by a page that
# stopped the run before its first step); `interrupted` is included because a run that was
# only slow to beat (e.g. a long XLA compile) may still finish.
OWN_STATUSES = ("starting", "running", "paused", "interrupted")
# How long a run whose store became unwritable keeps trying to record why it ended (seconds;
# below `runs.store.run_store.STALE_AFTER`, after which the pages take a silent run for dead).
STORE_RETRY_S = 30.0
STORE_RETRY_EVERY_S = 1.0

# (config, logical device) -> the run's engine (`engine.train_step.Engine` or a prepared one).
EngineSource = Callable[[RunConfig, str], Any]


def versions() -> dict[str, str]:
    """Versions of tensorflow, tf_keras, numpy and python."""
    import tensorflow as tf
    import tf_keras

    return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


def log(message: str) -> None:
    """One line on stderr (the run's or the host's log file when started by a pool)."""
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:  # the log sits in the data directory, which may be the full disk
        pass


def record_end(store: RunStore, run_id: int, status: str, message: str,
               retry_s: float = 0.0) -> bool:
    """Write the run's final status and message; True when written.

    A `StoreUnavailable` is retried every `STORE_RETRY_EVERY_S` for `retry_s` seconds, then
    logged and kept outside the data directory (`runs.store.files.keep_last_words`), where the
    next stale check finds it; never raised: the error that ended the run matters more.
    """
    deadline = time.monotonic() + retry_s
    while True:
        try:
            store.set_status(run_id, status, message, only_from=OWN_STATUSES)
            return True
        except StoreUnavailable as error:
            if time.monotonic() >= deadline:
                kept = keep_last_words(store.path, run_id, status, message)
                log(f"run {run_id}: could not record its end in the store ({status}: "
                    f"{message}): {error}; kept in {kept or 'nowhere (temp not writable)'}")
                return False
            time.sleep(STORE_RETRY_EVERY_S)


def _default_engine(config: RunConfig, device: str) -> Any:
    from engine import prepared

    return prepared.take(config, device)  # a warm process's prepared engine, or a new one


class RunSession:
    """One run of `store` trained in this process (see the module docstring).

    Args:
        store: the run store; run_id: a run created `starting` (claimed by the pool).
        full_recording: record train loss and slot statistics at EVERY step (decimation off;
            histograms every `recording.HISTOGRAM_FACTOR` steps) - for benchmarks.
        max_wall_s: `stopped` after this many seconds of training (None: no limit).
        engine_source: builds the run's engine; default `engine.prepared.take`.
        after_first_step: called once the first step is recorded (e.g. lower the priority).
        record_pid: write this process's pid on the run (False in a Ray host actor: liveness
            is judged by Ray and the heartbeat there, `runs.service.ray_hosts`).

    Attributes:
        run: the run's `RunLoop` once `open` built it, else None.
        status: the final status once the session ended (`end`, `fail`), else None.
    """

    def __init__(self, store: RunStore, run_id: int, full_recording: bool = False,
                 max_wall_s: float | None = None, engine_source: EngineSource | None = None,
                 after_first_step: Callable[[], None] | None = None, record_pid: bool = True):
        self.store, self.run_id = store, run_id
        self.record_pid = record_pid
        self.full_recording, self.max_wall_s = full_recording, max_wall_s
        self.engine_source = engine_source or _default_engine
        self.after_first_step = after_first_step
        self.run: RunLoop | None = None
        self.status: str | None = None

    def open(self) -> str | None:
        """Build the run and write its first records; None when it is ready to `advance`, else
        the status it already has (stopped by a page while it was starting).

        Raises:
            Exception: whatever the config, plugin or engine raised (the caller calls `fail`).
        """
        from engine.devices import choose_device, configure_gpus

        store, run_id = self.store, self.run_id
        stored = store.run(run_id)["config"]
        plugins.ensure_registered(stored.get("optimizer", ""))  # before validation names it
        config = RunConfig(**stored)
        configure_gpus()
        device = choose_device(config.device)
        engine = self.engine_source(config, device)
        hyper = None
        if config.hypergradients:
            from hypergrad.stepper import HyperStepper

            hyper = HyperStepper(engine)
        own = {"pid": os.getpid()} if self.record_pid else {}
        store.update_run(run_id, device=device, versions=versions(), **own)
        if not store.set_status(run_id, "running", only_from=("starting",)):
            self.status = store.run(run_id)["status"]  # stopped by a page while starting
            return self.status
        if self.full_recording:
            record = lambda s: True  # noqa: E731
            histogram = lambda s: s % recording.HISTOGRAM_FACTOR == 0 or s == 1  # noqa: E731
        else:
            record, histogram = recording.should_record, recording.should_histogram
        run = RunLoop(run_id, store, engine, config.steps, config.eval_every, record, histogram,
                      handlers=HANDLERS, hyper=hyper)
        self.run = run
        run.max_wall_s = self.max_wall_s
        run.after_first_step = self.after_first_step
        run.buffers["hyper_changes"] = [
            HyperChangeRow(1, name, None, value, "init")
            for name, value in engine.optimizer.hyper_values().items()
        ]
        run.evaluate(0)
        checkpoint.attach(run)  # a continued run restores its checkpoint here
        run.flush()
        run.save_optimizer()
        run.poll()  # commands queued with the run (its starting pace) act before step 1
        return None

    def advance(self) -> tuple[str, str] | None:
        """`RunLoop.advance`, with a divergence turned into its end ("diverged", message).

        Raises:
            Exception: anything else the step raised (the caller calls `fail`).
        """
        assert self.run is not None, "open() first"
        try:
            return self.run.advance()
        except Diverged as diverged:
            return "diverged", str(diverged)

    def next_wake(self) -> float:
        """Monotonic time (s) the run next has something to do (`RunLoop.next_wake`)."""
        assert self.run is not None, "open() first"
        return self.run.next_wake()

    def stop(self, message: str) -> None:
        """Ask the run to stop at its next `advance` with this message (e.g. a signal)."""
        if self.run is not None:
            self.run.stop_requested = True
            self.run.stop_message = message

    def end(self, status: str, message: str) -> str:
        """Write the run's end: its last records, its cost meter, every pending command
        refused, the final status (only over its own statuses). Returns `status`.

        Raises:
            StoreUnavailable: the store cannot be written (the caller calls `fail`).
        """
        run, store = self.run, self.store
        assert run is not None, "open() first"
        run.flush(wait=True)
        checkpoint.at_end(run, status)
        run.save_meta()
        for command in store.pending(self.run_id):
            store.finish_command(command["id"], "refused", f"the run {status} at step {run.step}")
        store.set_status(self.run_id, status, message, only_from=OWN_STATUSES)
        self.status = status
        return status

    def fail(self, error: BaseException) -> str:
        """Record that `error` ended the run (`failed`, its type and message; a store that
        cannot be written is logged at once and retried for `STORE_RETRY_S`). The buffered
        records are flushed first. Returns the message."""
        if self.run is not None:
            try:
                self.run.flush(wait=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        message = f"{type(error).__name__}: {error}"[:2000]
        if isinstance(error, StoreUnavailable):
            step = (f" after step {self.run.step}" if self.run is not None
                    else " before the first step")
            message = f"failed{step}: {message}"[:2000]
            log(f"run {self.run_id} {message}")  # the log first: the store may never take it
        record_end(self.store, self.run_id, "failed", message,
                   STORE_RETRY_S if isinstance(error, StoreUnavailable) else 0.0)
        self.status = "failed"
        return message

    def close(self) -> None:
        """End the run's writer thread and polling connection (after `end` or `fail`)."""
        if self.run is not None:
            self.run.close()
