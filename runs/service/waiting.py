"""Waiting on the run store: a command's outcome, a run's status or step
(polling every `POLL_S` seconds; what the CLI and the tests use). No Streamlit, no TensorFlow.
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Iterable

from runs.service.pool import check_processes
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore

POLL_S = 0.05


def wait_for_command(store: RunStore, command_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """Wait until a command is `done` or `refused`; returns its row (`RunStore.command`).

    Raises:
        TimeoutError: still pending after `timeout_s` seconds.
        RuntimeError: the run ended while the command was pending.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        check_processes(store)
        row = store.command(command_id)
        if row["status"] != "pending":
            return row
        status = store.run(row["run_id"])["status"]
        if status in FINAL_STATUSES:
            # a run marks its last command done, then ends: read the command after the end
            row = store.command(command_id)
            if row["status"] != "pending":
                return row
            raise RuntimeError(f"run {row['run_id']} is {status}; command {command_id} pending")
        if time.monotonic() > deadline:
            raise TimeoutError(f"command {command_id} still pending after {timeout_s} s")
        time.sleep(POLL_S)


def wait_for_status(store: RunStore, run_id: int, statuses: Iterable[str] | str,
                    timeout_s: float = 60.0) -> dict[str, Any]:
    """Wait until the run's status is one of `statuses`; returns the run (`store.run`).

    Raises:
        TimeoutError: not reached after `timeout_s` seconds (message gives the status).
    """
    wanted = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    deadline = time.monotonic() + timeout_s
    while True:
        check_processes(store)
        run = store.run(run_id)
        if run["status"] in wanted:
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} is {run['status']} ({run['message']}) after "
                               f"{timeout_s} s; waited for {', '.join(wanted)}")
        time.sleep(POLL_S)


def wait_for_step(
    store: RunStore, run_id: int, step: int, timeout_s: float = 60.0
) -> dict[str, Any]:
    """Wait until the run has reached `step` (its `runs.step`); returns the run.

    Raises:
        TimeoutError: not reached in time.
        RuntimeError: the run ended before reaching `step`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        check_processes(store)
        run = store.run(run_id)
        if run["step"] >= step:
            return run
        if run["status"] in FINAL_STATUSES:
            raise RuntimeError(f"run {run_id} ended ({run['status']}: {run['message']}) at "
                               f"step {run['step']} before step {step}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} at step {run['step']} after {timeout_s} s; "
                               f"waited for step {step}")
        time.sleep(POLL_S)
