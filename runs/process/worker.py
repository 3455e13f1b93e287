"""The cold run process: `python -m runs.process.worker --store PATH --run-id N`, started for one
run when no run host has room (or run hosts are off); it trains exactly that run (`run_one`) and
exits. A run host (`runs.process.run_host`) trains many runs with the same per-run code
(`runs.process.run_session.RunSession`, stepped by `RunLoop.advance`).

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
import signal
import sys
import time

from runs.process.run_loop import Diverged, Heartbeat, RunLoop
from runs.process.run_session import (OWN_STATUSES, STORE_RETRY_EVERY_S, STORE_RETRY_S,
                                      RunSession, log, record_end, versions)
from runs.store.files import StoreUnavailable
from runs.store.run_store import RunStore

__all__ = ["OWN_STATUSES", "STORE_RETRY_EVERY_S", "STORE_RETRY_S", "main", "run_one", "train",
           "versions"]


def train(run_id: int, store: RunStore, max_wall_s: float | None = None,
          full_recording: bool = False) -> str:
    """Run `run_id` of `store` to its end in this process; returns the final status.

    The run is one `runs.process.run_session.RunSession` advanced to its end by
    `RunLoop.loop`, the same steps a run host interleaves with other runs.

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
    # Once the first step is recorded, train at a lower CPU priority (for good: the process
    # exits after this run). Not before: the start (engine, first trace, first step) keeps
    # the server's priority, so Start -> first step is not delayed by the page or a run host
    # warming up beside it.
    session = RunSession(store, run_id, full_recording=full_recording, max_wall_s=max_wall_s,
                         after_first_step=_lower_priority)
    heartbeat = Heartbeat(store, run_id)
    try:
        ended = session.open()
        if ended is not None:
            return ended  # stopped by a page while starting
        _STOP_HOOK[0] = session.run
        assert session.run is not None
        try:
            status, message = session.run.loop(max_wall_s)
        except Diverged as diverged:
            status, message = "diverged", str(diverged)
        return session.end(status, message)
    except BaseException as error:
        if _SIGNALLED[0] is not None and session.run is None:  # SIGTERM while starting: a stop
            record_end(store, run_id, "stopped",
                       f"stopped by signal {_SIGNALLED[0]} before the first step")
            return "stopped"
        session.fail(error)
        raise
    finally:
        _STOP_HOOK[0] = None
        heartbeat.close()
        session.close()


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
        log(f"run {args.run_id} cannot start: {error}")
        return 1
    return run_one(store, args.run_id, max_wall_s=args.max_wall_s,
                   full_recording=args.full_recording)


def run_one(store: RunStore, run_id: int, max_wall_s: float | None = None,
            full_recording: bool = False) -> int:
    """Train one run in this process (`train`), report a failure on stderr, then hand the pool
    place over (`_hand_over`); returns the exit code of the process (0 unless the run failed)."""
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
        log(f"the run keeps its CPU priority: {error}")


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
