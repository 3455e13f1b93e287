"""The `workers` table of the run store: the run host processes, and which host trains which run.
No Streamlit, no TensorFlow.

Life of a host row (see `runs.store.schema`): `warming` (importing TensorFlow) -> `ready`
(training the runs given to it, taking more while it has room) -> `retired` (its pool shut
down: it takes no new run, trains the ones it holds to their end, then exits) -> `gone`. A run
is given to a host by `assign`: one `immediate()` transaction that picks ONE live host with
room and writes its pid and `worker = 'host <id>'` onto a run that is still `starting` and has
no process; a host only takes the runs whose `worker` names it (`new_runs`, `take`), so each run
has exactly one host, and a host never holds more than its capacity.
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
HOST_PREFIX = "host "
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
        rows = dict_rows(con.execute("SELECT * FROM workers WHERE id = ?", (worker_id,)))
        found = rows[0] if rows else None
    if found is None:
        raise KeyError(f"worker {worker_id} is not in the store {store.path}")
    out = dict(found)
    out["env"] = json.loads(out["env"])
    return out


def lab_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The `OPTIMIZER_LAB_*` variables of `environ` (default this process's)."""
    source: Mapping[str, str] = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith(ENV_PREFIX)}


def host_label(host_id: int) -> str:
    """The `runs.worker` value of a run trained by host `host_id`: `host <id>`."""
    return f"{HOST_PREFIX}{int(host_id)}"


def host_id_of(worker: str | None) -> int | None:
    """The host id in a `runs.worker` value (`host 3` -> 3), None for `cold`, `warm` or ''."""
    if not worker or not worker.startswith(HOST_PREFIX):
        return None
    try:
        return int(worker[len(HOST_PREFIX):])
    except ValueError:
        return None


def assign(store: RunStore, run_id: int, capacity: int) -> tuple[int, int] | None:
    """Give a `starting` run that has no process yet to a live run host with room: fewer than
    `capacity` active runs. Ready hosts come before warming ones (a warming host takes its runs
    once TensorFlow is imported), then the least loaded (the cores share the runs), then the
    oldest. Returns (host id, pid), or None when no host has room, the run is no longer
    `starting` (e.g. stopped) or it already has a process (a second call gets None).

    One `store.immediate()` transaction (SQLite `BEGIN IMMEDIATE`; PostgreSQL the store's
    advisory lock, the rows read `FOR UPDATE`): the run gets the host's pid, start time and
    `worker = 'host <id>'` (so a SIGKILL of the host marks the run interrupted, and the pages
    say which host trains it); the host row gets the dispatcher's `OPTIMIZER_LAB_*` variables.
    Rows whose process is gone are marked `gone` on the way.
    """
    with store.immediate() as con:
        found = con.execute("SELECT status, pid FROM runs WHERE id = ?" + for_update(con),
                            (run_id,)).fetchone()
        if found is None or found[0] != "starting" or found[1] is not None:
            return None  # gone, stopped, or it already has a process (host or cold)
        load = dict(con.execute(
            f"SELECT worker, COUNT(*) FROM runs WHERE status IN {ACTIVE_STATUSES} AND worker "
            f"LIKE '{HOST_PREFIX}%' GROUP BY worker").fetchall())
        candidates = []
        for host_id, pid, start, state in con.execute(
                f"SELECT id, pid, pid_start, state FROM workers WHERE state IN {SPARE_STATES}"
                + for_update(con)).fetchall():
            if pid is not None and not same_process_alive(pid, start):
                con.execute("UPDATE workers SET state = 'gone' WHERE id = ?", (host_id,))
                continue
            held = int(load.get(host_label(host_id), 0))
            if pid is not None and held < capacity:
                candidates.append((state != "ready", held, host_id, pid, start))
        if not candidates:
            return None
        _, _, host_id, pid, start = min(candidates)
        now = time.time()
        con.execute("UPDATE workers SET run_id = ?, assigned_at = ?, env = ? WHERE id = ?",
                    (run_id, now, json.dumps(lab_env()), host_id))
        con.execute("UPDATE runs SET pid = ?, pid_start = ?, worker = ?, updated = ?, "
                    "heartbeat = ? WHERE id = ?",
                    (pid, start, host_label(host_id), now, now, run_id))
        return host_id, int(pid)


def new_runs(store: RunStore, host_id: int, con: Any = None) -> list[int]:
    """Ids of the `starting` runs given to this host that it has not taken yet, oldest first
    (the host polls this; `con` a kept connection)."""
    sql = ("SELECT id FROM runs WHERE worker = ? AND status = 'starting' AND taken_at IS NULL "
           "ORDER BY id")
    if con is not None:
        return [r for (r,) in con.execute(sql, (host_label(host_id),))]
    with store._connect() as own:
        return [r for (r,) in own.execute(sql, (host_label(host_id),))]


def take(store: RunStore, host_id: int, run_id: int) -> bool:
    """The host takes a run given to it: the run's `taken_at` stamped. False when the run is
    not this host's, was taken already or is no longer `starting` (nothing changed)."""
    now = time.time()
    with store._connect() as con:
        return con.execute("UPDATE runs SET taken_at = ?, updated = ? WHERE id = ? AND worker = ? "
                           "AND taken_at IS NULL AND status = 'starting'",
                           (now, now, run_id, host_label(host_id))).rowcount == 1


def release(store: RunStore, run_id: int) -> None:
    """The host is done with a run (it wrote its end): the run's pid is cleared, so that the
    run no longer counts as held by a live process (it may be deleted; its memory is the host's,
    counted once per host). `worker` keeps saying which host trained it."""
    with store._connect() as con:
        con.execute("UPDATE runs SET pid = NULL, pid_start = NULL WHERE id = ?", (run_id,))


def release_untaken(store: RunStore, run_id: int) -> bool:
    """Release a run its host has not taken yet (e.g. stopped while starting): its pid cleared
    unless `take` stamped it first (one UPDATE: the host then drops it itself). True when
    released."""
    with store._connect() as con:
        return con.execute("UPDATE runs SET pid = NULL, pid_start = NULL WHERE id = ? AND "
                           "taken_at IS NULL", (run_id,)).rowcount == 1


def held_runs(store: RunStore, host_id: int) -> list[int]:
    """Ids of the active runs given to this host."""
    with store._connect() as con:
        return [r for (r,) in con.execute(
            f"SELECT id FROM runs WHERE worker = ? AND status IN {ACTIVE_STATUSES} ORDER BY id",
            (host_label(host_id),))]


def hosts(store: RunStore) -> list[dict[str, Any]]:
    """The live hosts of the store (`warming`, `ready` or `retired` still draining), any
    parent: dicts `id, pid, pid_start, state, parent_pid, runs` (`runs`: how many active runs
    it holds). A row whose process is gone is marked `gone`."""
    out, dead = [], []
    with store._connect() as con:
        load = dict(con.execute(
            f"SELECT worker, COUNT(*) FROM runs WHERE status IN {ACTIVE_STATUSES} AND worker "
            f"LIKE '{HOST_PREFIX}%' GROUP BY worker").fetchall())
        for host_id, pid, start, state, parent in con.execute(
                "SELECT id, pid, pid_start, state, parent_pid FROM workers WHERE state IN "
                "('warming', 'ready', 'retired') ORDER BY id").fetchall():
            if pid is not None and not same_process_alive(pid, start):
                dead.append((host_id,))
                continue
            out.append({"id": host_id, "pid": pid, "pid_start": start, "state": state,
                        "parent_pid": parent, "runs": int(load.get(host_label(host_id), 0))})
        con.executemany("UPDATE workers SET state = 'gone' WHERE id = ?", dead)
    return out


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
    """(configs of the active runs as JSON dicts, number of queued runs, number of runs created
    less than `starting_within_s` seconds ago that have no step in the store yet - `starting`,
    or `running` in a host that is building its engine and tracing its first step): what the
    pool sizes its spares against (`runs.store.admission.hosts_wanted`)."""
    with store._connect() as con:
        active = [json.loads(c) for (c,) in con.execute(
            f"SELECT config FROM runs WHERE status IN {ACTIVE_STATUSES}")]
        queued = con.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (QUEUED,)).fetchone()[0]
        starting = con.execute("SELECT COUNT(*) FROM runs WHERE (status = 'starting' OR "
                               "(status = 'running' AND step = 0)) AND created > ?",
                               (time.time() - starting_within_s,)).fetchone()[0]
    return active, int(queued), int(starting)
