"""The `workers` table of the run store: warm worker processes and the runs assigned to them.
No Streamlit, no TensorFlow.

Life of a row (see `runs.store.schema`): `warming` -> `ready` -> `assigned` -> `running` -> `gone`,
or `ready` -> `retired` -> `gone` when its pool shuts down. The one step that must never happen
twice - a run given to two workers, or a worker given two runs - is `assign`: one
`immediate()` transaction (SQLite `BEGIN IMMEDIATE`; PostgreSQL the store's advisory lock and
the rows read `FOR UPDATE`) that moves ONE live `ready` worker to `assigned` and writes its
pid onto a run that is still `starting`. A worker only ever takes the run id written in its own
row, so each run has exactly one worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
import time
from typing import Any

from runs.store.connection import dict_rows, for_update
from runs.store.processes import same_process_alive
from runs.protocol import ACTIVE_STATUSES, QUEUED
from runs.store.run_store import RunStore

SPARE_STATES = ("warming", "ready")
# Variables copied from the dispatcher into the worker at assignment: the plugin folder and the
# plugin files the server imported may have changed since the worker started.
ENV_PREFIX = "OPTIMIZER_LAB_"


def register(store: RunStore, parent_pid: int) -> int:
    """Insert a `warming` row for a worker about to be started by `parent_pid`; returns its id
    (passed to the worker on its command line)."""
    with store._connect() as con:
        return int(con.execute("INSERT INTO workers (created, parent_pid) VALUES (?, ?)",
                               (time.time(), int(parent_pid))).lastrowid or 0)


def set_process(store: RunStore, worker_id: int, pid: int, pid_start: int | None) -> None:
    """Record the started worker's pid and start time (`runs.store.processes.process_start`)."""
    with store._connect() as con:
        con.execute("UPDATE workers SET pid = ?, pid_start = ? WHERE id = ?",
                    (pid, pid_start, worker_id))


def set_state(store: RunStore, worker_id: int, state: str, only_from: tuple[str, ...] = ()) -> bool:
    """Move a worker to `state` (only from one of `only_from` when given); True when changed.
    `ready` also stamps `ready_at`."""
    sql = "UPDATE workers SET state = ?" + (", ready_at = ?" if state == "ready" else "")
    params: list[Any] = [state] + ([time.time()] if state == "ready" else [])
    sql += " WHERE id = ?"
    params.append(worker_id)
    if only_from:
        sql += f" AND state IN ({','.join('?' * len(only_from))})"
        params += list(only_from)
    with store._connect() as con:
        return con.execute(sql, params).rowcount == 1


def row(store: RunStore, worker_id: int) -> dict[str, Any]:
    """The worker's row as a dict (`env` decoded).

    Raises:
        KeyError: no such worker.
    """
    with store._connect() as con:
        found = dict_rows(con.execute("SELECT * FROM workers WHERE id = ?", (worker_id,)))
    if not found:
        raise KeyError(f"worker {worker_id} is not in the store {store.backend.label}")
    out = found[0]
    out["env"] = json.loads(out["env"])
    return out


def lab_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The `OPTIMIZER_LAB_*` variables of `environ` (default this process's)."""
    source: Mapping[str, str] = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith(ENV_PREFIX)}


def assign(store: RunStore, run_id: int) -> tuple[int, int] | None:
    """Give a `starting` run that has no process yet to the oldest live `ready` worker; returns
    (worker id, pid), or None when no worker is ready, the run is no longer `starting` (e.g.
    stopped) or it already has a process (a second call for the same run gets None).

    One `store.immediate()` transaction (the run and the ready rows read `FOR UPDATE` on
    PostgreSQL): the worker row goes `ready` -> `assigned` with the run
    id and the dispatcher's `OPTIMIZER_LAB_*` variables, and the run gets the worker's pid,
    start time and `worker = 'warm'` (so a stop while it starts signals the right process and
    a SIGKILL of the worker marks the run interrupted). Ready rows whose process is gone are
    marked `gone` on the way.
    """
    with store.immediate() as con:
        found = con.execute("SELECT status, pid FROM runs WHERE id = ?" + for_update(con),
                            (run_id,)).fetchone()
        if found is None or found[0] != "starting" or found[1] is not None:
            return None  # gone, stopped, or it already has a process (warm or cold)
        for worker_id, pid, start in con.execute(
                "SELECT id, pid, pid_start FROM workers WHERE state = 'ready' ORDER BY ready_at, id"
                + for_update(con)).fetchall():
            if not same_process_alive(pid, start):
                con.execute("UPDATE workers SET state = 'gone' WHERE id = ?", (worker_id,))
                continue
            now = time.time()
            con.execute("UPDATE workers SET state = 'assigned', run_id = ?, assigned_at = ?, "
                        "env = ? WHERE id = ?",
                        (run_id, now, json.dumps(lab_env()), worker_id))
            con.execute("UPDATE runs SET pid = ?, pid_start = ?, worker = 'warm', updated = ?, "
                        "heartbeat = ? WHERE id = ?", (pid, start, now, now, run_id))
            return worker_id, int(pid)
    return None


def take(store: RunStore, worker_id: int, run_id: int) -> bool:
    """The worker takes its assigned run: row `assigned` -> `running`, the run's `taken_at`
    stamped. False when the row is no longer `assigned` to this run (nothing changed)."""
    now = time.time()
    with store._connect() as con:
        moved = con.execute("UPDATE workers SET state = 'running' WHERE id = ? AND "
                            "state = 'assigned' AND run_id = ?", (worker_id, run_id)).rowcount
        if moved:
            con.execute("UPDATE runs SET taken_at = ?, updated = ? WHERE id = ?",
                        (now, now, run_id))
    return moved == 1


def retire(store: RunStore, parent_pid: int) -> list[tuple[int, int]]:
    """Ask the idle (`warming`/`ready`) workers started by `parent_pid` to exit: state
    `retired`, in one transaction (an `assign` racing with it gets the worker or not, never a
    retired one). Returns their (worker id, pid) to signal; pid 0 when not yet known."""
    with store.immediate() as con:
        rows = con.execute(
            f"SELECT id, pid FROM workers WHERE parent_pid = ? AND state IN {SPARE_STATES}"
            + for_update(con), (parent_pid,)).fetchall()
        con.executemany("UPDATE workers SET state = 'retired' WHERE id = ?",
                        [(worker_id,) for worker_id, _ in rows])
    return [(worker_id, pid or 0) for worker_id, pid in rows]


def spares(store: RunStore) -> list[dict[str, Any]]:
    """The live idle workers (`warming` or `ready`) of the store, any parent: dicts `id, pid,
    state, parent_pid`. A row whose process is gone is marked `gone` (a `warming` row with no
    pid yet is counted: its process is being started)."""
    out, dead = [], []
    with store._connect() as con:
        for worker_id, pid, start, state, parent in con.execute(
                f"SELECT id, pid, pid_start, state, parent_pid FROM workers WHERE state IN "
                f"{SPARE_STATES} ORDER BY id").fetchall():
            if pid is not None and not same_process_alive(pid, start):
                dead.append((worker_id,))
            else:
                out.append({"id": worker_id, "pid": pid, "state": state, "parent_pid": parent})
        con.executemany("UPDATE workers SET state = 'gone' WHERE id = ?", dead)
    return out


def places(store: RunStore, starting_within_s: float) -> tuple[list[dict[str, Any]], int, int]:
    """(configs of the active runs as JSON dicts, number of queued runs, number of runs still
    `starting` that were created less than `starting_within_s` seconds ago): what the pool
    sizes its spares against (`runs.store.admission.warm_spares`)."""
    with store._connect() as con:
        active = [json.loads(c) for (c,) in con.execute(
            f"SELECT config FROM runs WHERE status IN {ACTIVE_STATUSES}")]
        queued = con.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (QUEUED,)).fetchone()[0]
        starting = con.execute("SELECT COUNT(*) FROM runs WHERE status = 'starting' AND "
                               "created > ?", (time.time() - starting_within_s,)).fetchone()[0]
    return active, int(queued), int(starting)


def runs_of(store: RunStore, worker_ids: list[int]) -> dict[int, int]:
    """{worker id: run id} of these workers that have been assigned a run."""
    if not worker_ids:
        return {}
    with store._connect() as con:
        return {w: r for w, r in con.execute(
            f"SELECT id, run_id FROM workers WHERE run_id IS NOT NULL AND id IN "
            f"({','.join('?' * len(worker_ids))})", worker_ids)}
