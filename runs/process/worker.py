"""The run process: `python -m runs.process.worker --store PATH --run-id N` (a cold process
started for one run), or a warm worker (`runs.process.warm_worker`) that had TensorFlow imported
before the run was assigned to it; both train exactly one run (`run_one`) and exit.

Reads the run's `RunConfig` from the store, trains, and writes everything back to the store;
the pages only ever talk to it through the store (records out, commands in). `train()` runs a
whole run and can be driven in-process (tests, benchmarks); `main(argv)` is the CLI. The loop
itself (recording, flushing, polling, the heartbeat) is `runs.process.run_loop.RunLoop`; the
commands it carries out are parsed by `runs.protocol.parse` and handled by
`runs.process.handlers.HANDLERS`: a malformed command row is refused naming the field and the
run trains on.

Ends: `finished`; `stopped` (command, SIGTERM or `max_wall_s`); `diverged` (non-finite loss,
validation loss or slot statistic; message names the step and the quantity; the records
before stay); `failed` (exception; message, then re-raised / exit code 1). When the store
itself cannot be written (`StoreUnavailable`: read-only data directory, full disk) the reason
is printed to the run's log at once and written as the `failed` message as soon as the store
accepts it again, retried for up to `STORE_RETRY_S` seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time

import numpy as np

from engine import recording
from engine.record_rows import HyperChangeRow
from optimizer_plugins import plugin_discovery as plugins
from runs.process.handlers import HANDLERS
from runs.process.run_loop import Diverged, Heartbeat, RunLoop
from runs.store.files import StoreUnavailable
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

# Final statuses are written only over these (never over a `stopped` set by a page that
# stopped the run before its first step); `interrupted` is included because a run that was
# only slow to beat (e.g. a long XLA compile) may still finish.
_OWN_STATUSES = ("starting", "running", "paused", "interrupted")
# How long a run whose store became unwritable keeps trying to record why it ended (seconds;
# below `runs.store.run_store.STALE_AFTER`, after which the pages take a silent run for dead).
STORE_RETRY_S = 30.0
STORE_RETRY_EVERY_S = 1.0


def versions() -> dict[str, str]:
    """Versions of tensorflow, tf_keras, numpy and python."""
    import tensorflow as tf
    import tf_keras

    return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


def _log(message: str) -> None:
    """One line on stderr: the run's log file (`runs.service.pool.log_path`) when started by a
    page."""
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:  # the log sits in the data directory, which may be the full disk
        pass


def _record_end(store: RunStore, run_id: int, status: str, message: str,
                retry_s: float = 0.0) -> bool:
    """Write the run's final status and message; True when written.

    A `StoreUnavailable` is retried every `STORE_RETRY_EVERY_S` for `retry_s` seconds, then
    logged (never raised: the error that ended the run matters more).
    """
    deadline = time.monotonic() + retry_s
    while True:
        try:
            store.set_status(run_id, status, message, only_from=_OWN_STATUSES)
            return True
        except StoreUnavailable as error:
            if time.monotonic() >= deadline:
                _log(f"run {run_id}: could not record its end in the store ({status}: "
                     f"{message}): {error}")
                return False
            time.sleep(STORE_RETRY_EVERY_S)


def train(run_id: int, store: RunStore, max_wall_s: float | None = None,
          full_recording: bool = False) -> str:
    """Run `run_id` of `store` to its end in this process; returns the final status.

    Args:
        run_id: a run created with `store.create_run(config)` (status `starting`).
        store: the run store.
        max_wall_s: stop (status `stopped`) after this many seconds of training.
        full_recording: record train loss and slot statistics at EVERY step (decimation off;
            histograms every 20 steps) - for benchmarks.

    Raises:
        Exception: anything that made the run fail, after the run was marked `failed`.
        StoreUnavailable: the store became unwritable; logged in one line first, and the
            `failed` status with that reason retried for up to `STORE_RETRY_S` seconds.
    """
    from engine import prepared
    from engine.devices import choose_device, configure_gpus

    run: RunLoop | None = None
    heartbeat = Heartbeat(store, run_id)
    try:
        stored = store.run(run_id)["config"]
        plugins.ensure_registered(stored.get("optimizer", ""))  # before validation names it
        config = RunConfig(**stored)
        configure_gpus()
        device = choose_device(config.device)
        engine = prepared.take(config, device)  # a warm worker's prepared engine, or a new one
        hyper = None
        if config.hypergradients:
            from hypergrad.stepper import HyperStepper

            hyper = HyperStepper(engine)
        store.update_run(run_id, device=device, versions=versions(), pid=os.getpid())
        if not store.set_status(run_id, "running", only_from=("starting",)):
            return store.run(run_id)["status"]  # stopped by a page while starting
        record = (lambda s: True) if full_recording else recording.should_record
        histogram = (lambda s: s % recording.HISTOGRAM_FACTOR == 0 or s == 1) \
            if full_recording else recording.should_histogram
        run = RunLoop(run_id, store, engine, config.steps, config.eval_every, record, histogram,
                      handlers=HANDLERS, hyper=hyper)
        # Once the first step is recorded, train at a lower CPU priority (for good: the process
        # exits after this run). Not before: the start (engine, first trace, first step) keeps
        # the server's priority, so Start -> first step is not delayed by the page or a warm
        # worker warming up beside it.
        run.after_first_step = _lower_priority
        run.buffers["hyper_changes"] = [
            HyperChangeRow(1, name, None, value, "init")
            for name, value in engine.optimizer.hyper_values().items()
        ]
        run.evaluate(0)
        run.flush()
        run.save_optimizer()
        run.poll()  # commands queued with the run (its starting pace) act before step 1
        _STOP_HOOK[0] = run
        try:
            status, message = run.loop(max_wall_s)
        except Diverged as diverged:
            status, message = "diverged", str(diverged)
        run.flush(wait=True)
        run.save_meta()
        for command in store.pending(run_id):
            store.finish_command(command["id"], "refused", f"the run {status} at step {run.step}")
        store.set_status(run_id, status, message, only_from=_OWN_STATUSES)
        return status
    except BaseException as error:
        if run is not None:
            try:
                run.flush(wait=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        if _SIGNALLED[0] is not None and run is None:  # SIGTERM while starting: a stop
            _record_end(store, run_id, "stopped",
                        f"stopped by signal {_SIGNALLED[0]} before the first step")
            return "stopped"
        message = f"{type(error).__name__}: {error}"[:2000]
        if isinstance(error, StoreUnavailable):
            step = f" after step {run.step}" if run is not None else " before the first step"
            message = f"failed{step}: {message}"[:2000]
            _log(f"run {run_id} {message}")  # the log first: the store may never take it
        _record_end(store, run_id, "failed", message,
                    STORE_RETRY_S if isinstance(error, StoreUnavailable) else 0.0)
        raise
    finally:
        _STOP_HOOK[0] = None
        heartbeat.close()
        if run is not None:
            run.close()


_STOP_HOOK: list[RunLoop | None] = [None]
_SIGNALLED: list[int | None] = [None]


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001
    run = _STOP_HOOK[0]
    _SIGNALLED[0] = signum
    if run is not None:
        run.stop_requested = True
        run.stop_message = f"stopped by signal {signum} after step {run.step}"
    else:
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point of a cold run process (started for one run, `runs.service.pool._launch`);
    returns the process exit code (0 unless the run failed)."""
    parser = argparse.ArgumentParser(description="Run one Optimizer Lab training run.")
    parser.add_argument("--store", required=True, help="path of the run-store SQLite file")
    parser.add_argument("--run-id", type=int, required=True)
    parser.add_argument("--max-wall-s", type=float, default=None)
    parser.add_argument("--full-recording", action="store_true",
                        help="record every step (decimation off; for benchmarks)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        store = RunStore(args.store)
        # TensorFlow is imported (this module's imports): the process can take the run now
        store.update_run(args.run_id, taken_at=time.time())
    except StoreUnavailable as error:
        _log(f"run {args.run_id} cannot start: {error}")
        return 1
    return run_one(store, args.run_id, max_wall_s=args.max_wall_s,
                   full_recording=args.full_recording)


def run_one(store: RunStore, run_id: int, max_wall_s: float | None = None,
            full_recording: bool = False) -> int:
    """Train one run in this process (`train`), report a failure on stderr, then hand the pool
    place over (`_hand_over`); returns the exit code of the process (0 unless the run failed).
    Shared by the cold process (`main`) and the warm worker (`runs.process.warm_worker`)."""
    try:
        train(run_id, store, max_wall_s=max_wall_s, full_recording=full_recording)
    except StoreUnavailable:  # already logged in one line by `train`: no traceback
        return 1
    except Exception as error:  # noqa: BLE001 - reported in the store and on stderr
        print(f"run {run_id} failed: {type(error).__name__}: {error}", file=sys.stderr)
        import traceback

        traceback.print_exc()
        return 1
    finally:
        _hand_over(store)
    return 0


def _lower_priority() -> None:
    """`os.nice(runs.service.pool.worker_nice())`; a refusal (a bad setting, a platform without
    `os.nice`) is logged and the run trains at the priority it has."""
    from runs.service.pool import worker_nice

    try:
        nice = worker_nice()
        if nice:
            os.nice(nice)
    except (ValueError, OSError, AttributeError) as error:
        _log(f"the run keeps its CPU priority: {error}")


def _hand_over(store: RunStore) -> None:
    """Give this run's place in the pool to the next queued run (so the queue drains even
    when no page is open); never turns a finished run into a failed exit."""
    from runs.service.pool import dispatch

    try:
        dispatch(store)
    except Exception as error:  # noqa: BLE001 - the pages dispatch again on their next render
        print(f"could not start the next queued run: {error}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
