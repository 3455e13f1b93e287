"""The run store: one database that is both the bus and the memory of the lab: a SQLite file
(WAL mode; the embedded default) or a PostgreSQL database shared by several web servers
(`$OPTIMIZER_LAB_STORE=postgresql://...`; the dialect differences live in
`runs.store.connection`).

Run processes append records in batches (one transaction per batch, so a run killed with SIGKILL
loses at most the batch it was writing and never corrupts the file); the Streamlit pages read
it and write commands (`set_hyper`, `pause`, `resume`, `stop`) that the run process polls.

Tables (all steps are 1-based optimizer steps, times are Unix seconds):

* `runs`: one row per run: status, the full config JSON, optimizer config, versions, device,
  the run process's pid and heartbeat, the last step reached, which process trained it
  (`worker`: `host <id>`/`cold`) and when that process took it (`taken_at`).
* `workers`: the run host processes (`runs.service.worker_table`).
* `scalars(run_id, step, name, value)`: `train_loss`, `val_loss`, `val_accuracy`, ...
* `hyper_changes(run_id, step, name, old, new, source)`: every hyperparameter value that took
  effect at `step` (`source` = `init`, `user`, `auto-tune`); the trace of a hyperparameter is
  the step function through these rows.
* `slot_stats(run_id, step, variable, slot, norm, mean, std)`: per (variable, slot) statistics;
  `slot = "update"` is the effective per-parameter step `var_before - var_after`.
* `histograms(run_id, step, variable, slot, lo, hi, counts)`: equal-width histogram of the values
  between `lo` and `hi` (counts as a JSON list of ints).
* `commands(id, run_id, kind, payload, status, message, step)`: `pending` -> `done`/`refused`.
* `hypergradients(run_id, step, name, exact, one_step, reverse, val_loss)`: d(val loss)/d(name)
  at `step` (after `step` updates): forward-mode exact, one-step (Baydin et al. 2018) and the
  truncated reverse-mode value (NULL when not computed at that step); `val_loss` in nats.
* `response_slices(run_id, request_id, step, name, value, loss, hypergradient, center)`: the
  validation loss after a few more steps as a function of one hyperparameter (request_id = the
  `response_slice` command's id); `hypergradient` (reverse mode over the same steps) and
  `center = 1` only on the row of the current value.
* `runs.hypergradient_meta` (JSON): followed names, live auto-tune etas and the cost meter
  (`plain_step_ms`, `hyper_step_ms`, `ratio`, `tangent_bytes`, `window_bytes`).

The data directory defaults to `~/.optimizer-lab` and is overridden by `OPTIMIZER_LAB_HOME`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

import pandas as pd

from runs.protocol import ACTIVE_STATUSES, FINAL_STATUSES, LIVE_STATUSES, QUEUED, checked_name
from runs.store import admission
from runs.store.commands import CommandQueue
from runs.store.connection import Backend, column_names, data_dir_of, dict_rows, for_update
from runs.store.files import _unavailable, default_store, take_last_words
from runs.store.processes import pid_alive, same_process_alive
from runs.store.records import Records
from runs.store.schema import (
    added_columns,
    JSON_RUN_COLUMNS,
    add_column_sql,
    schema_sql,
)

# A run process writes a heartbeat at least this often (seconds); a silent active run whose pid
# is gone or whose heartbeat is older than STALE_AFTER is marked interrupted by
# `mark_interrupted` - unless its process provably lives (same pid AND same start time,
# `runs.store.processes`): then it is STALLED, stays active (keeps its pool place, can be
# stopped, cannot be deleted) and the pages show "no heartbeat for N s" (`stalled_for`).
STALE_AFTER = 60.0

def _interrupted_message(pid: int | None, beat: float, now: float, worker: str | None,
                         step: int) -> str:
    """Why an active run is marked interrupted: its process ended (or went silent and cannot be
    proven alive); for a run in a run host (`worker` = `host <id>`), which host, its pid and the
    last committed step (`runs.step`, the step of the last batch in the store)."""
    if not (worker or "").startswith("host "):
        return "the run process ended without finishing"
    what = ("died" if pid is not None and not pid_alive(pid)
            else f"was silent for {now - beat:.0f} s")
    return (f"its run {worker} (pid {pid}) {what}: interrupted after step {step}, the last "
            "committed step; every record up to it is kept")


class RunStore:
    """Access to one run-store file. Cheap to create; every call opens its own connection,
    so one instance can be shared by Streamlit's script threads and a run process alike.

    Holds the runs table; the command queue is `queue` (`runs.store.commands.CommandQueue`) and
    the record tables are `records` (`runs.store.records.Records`), whose public methods are
    also the store's own (`store.pending(...)` is `store.queue.pending(...)`,
    `store.scalars(...)` is `store.records.scalars(...)`).

    Args:
        path: the SQLite file (created with its schema when missing), or a PostgreSQL URL
            `postgresql://user@host:port/database` (its tables created when missing); default
            `runs.store.files.default_store()` (`$OPTIMIZER_LAB_STORE`, else
            `$OPTIMIZER_LAB_HOME/runs.sqlite`). Every statement goes through one connection
            layer (`runs.store.connection`), which holds the dialect differences.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        location = path if path else default_store()
        self.backend = Backend(location)
        # `path`: the SQLite file, or the PostgreSQL URL (what another process is given)
        self.path: Path | str = self.backend.location
        if isinstance(self.path, Path):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise _unavailable(self.path, error) or error  # noqa: B904 (same error)
        with self._connect() as con:
            self.backend.before_schema(con)
            con.executescript(schema_sql(self.backend.dialect))
            present: dict[str, set[str]] = {}
            for table, column, sql_type in added_columns(self.backend.dialect):
                if table not in present:
                    present[table] = column_names(con, table)
                if column not in present[table]:
                    try:
                        con.execute(add_column_sql(table, column, sql_type,
                                                   self.backend.dialect))
                    except sqlite3.OperationalError as error:  # added meanwhile elsewhere
                        if "duplicate column" not in str(error):
                            raise
        self.records = Records(self._connect, self.immediate)
        self.queue = CommandQueue(self._connect, self.records.frame, self.backend.label)

    @property
    def data_dir(self) -> Path:
        """The folder of this server's files (logs, exports): the SQLite file's folder, or
        `$OPTIMIZER_LAB_HOME` for a PostgreSQL store."""
        return data_dir_of(self.path)

    def __getattr__(self, name: str) -> Any:
        # called only for names the class lacks: the public methods of its parts
        if name in Records.PUBLIC and "records" in self.__dict__:
            return getattr(self.records, name)
        if name in CommandQueue.PUBLIC and "queue" in self.__dict__:
            return getattr(self.queue, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def immediate(self) -> contextlib.AbstractContextManager[Any]:
        """One transaction holding the store's write lock from its first statement (a
        read-then-write cannot be overtaken by another writer); committed on success, rolled
        back on error. SQLite `BEGIN IMMEDIATE`, PostgreSQL an advisory lock
        (`runs.store.connection.Backend.immediate`).

        Raises:
            StoreUnavailable: the store cannot be written.
        """
        return self.backend.immediate()

    def _connect(self) -> contextlib.AbstractContextManager[Any]:
        """One connection and one transaction (committed on success, rolled back on error):
        a `sqlite3.Connection`, or a `runs.store.connection.PgConnection` that runs the same
        SQL on PostgreSQL.

        Raises:
            StoreUnavailable: the data directory is read-only or full, the file cannot be
                opened, or the PostgreSQL server cannot be reached.
        """
        return self.backend.connect()

    def open_connection(self) -> Any:
        """A connection in autocommit mode for the caller to hold and close (a run's command
        poll; `runs.store.connection.Backend.open`)."""
        return self.backend.open()

    # ----- runs -----------------------------------------------------------------------------
    def create_run(self, config: dict[str, Any], name: str = "", status: str = "starting",
                   owner: str | None = None) -> int:
        """Insert a run from a validated run config; return its id.

        `config` must hold `optimizer`, `dataset`, `model`, `seed`, `steps`; it is stored whole.
        `status` is `starting` (a process is launched for it at once) or `queued` (it waits for
        `claim_queued`). `owner` is the owner id of the session that starts it (None: no
        session, e.g. the CLI; see `runs.service.ownership`).

        Raises:
            ValueError: another `status`, or a `name` longer than `MAX_NAME` characters.
        """
        if status not in ("starting", QUEUED):
            raise ValueError(f"status={status!r} refused: a new run is 'starting' or 'queued'")
        name = checked_name(name)
        now = time.time()
        with self._connect() as con:
            cur = con.execute(
                "INSERT INTO runs (name, created, updated, status, optimizer, dataset, model, seed,"
                " device, total_steps, config, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    name, now, now, status, config["optimizer"], config["dataset"],
                    config["model"], int(config["seed"]), config.get("device", ""),
                    int(config["steps"]), json.dumps(config), owner,
                ),
            )
            return int(cur.lastrowid or 0)  # an INSERT always sets it

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set columns of a run (dicts/lists are stored as JSON); also bumps `updated`."""
        if not fields:
            return
        fields = {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in fields.items()}
        fields["updated"] = time.time()
        columns = ", ".join(f"{k} = ?" for k in fields)
        with self._connect() as con:
            con.execute(f"UPDATE runs SET {columns} WHERE id = ?", (*fields.values(), run_id))

    def set_status(self, run_id: int, status: str, message: str = "",
                   only_from: Sequence[str] | None = None) -> bool:
        """Set a run's status (`LIVE_STATUSES` or `FINAL_STATUSES`) and message.

        Args:
            only_from: change the status only when it is one of these (one atomic UPDATE: the
                run process and a page stopping a starting run cannot both win).

        Returns:
            True when the row was changed.

        Raises:
            ValueError: an unknown `status`.
        """
        allowed = LIVE_STATUSES + FINAL_STATUSES
        if status not in allowed:
            raise ValueError(f"status={status!r} refused: must be one of {allowed}")
        sql = "UPDATE runs SET status = ?, message = ?, updated = ? WHERE id = ?"
        params: tuple[Any, ...] = (status, message, time.time(), run_id)
        if only_from is not None:
            sql += f" AND status IN ({','.join('?' * len(only_from))})"
            params += tuple(only_from)
        with self._connect() as con:
            return con.execute(sql, params).rowcount == 1

    def claim_queued(self, pool_size: int, budget_mb: float | None = None,
                     host_capacity: int = 0) -> list[int]:
        """Move the oldest queued runs to `starting` while fewer than `pool_size` runs are
        active and their memory fits in `budget_mb` (MB, None = no budget; see
        `runs.store.admission.admit`); returns the ids claimed (the caller launches their
        processes). A run held back by the budget gets the reason as its `message`. The memory
        account is `runs.store.admission.Account`: run hosts are counted once each, and the
        first queued runs that fit in the hosts' free places (`host_capacity` runs per host,
        0 = no hosts) are charged as runs in a host.

        One `immediate()` transaction: two processes dispatching at once (a page and a run
        process that just ended, or two web servers on one PostgreSQL) cannot both fill the
        same free place; the queued rows are read `FOR UPDATE` on PostgreSQL. Stale active runs are
        marked interrupted first (`mark_interrupted`: the dispatcher is where stale runs are
        found), so a run killed with SIGKILL frees its place (a stalled run whose process lives
        keeps it).
        """
        self.mark_interrupted()
        with self.immediate() as con:
            account = admission.Account(con, host_capacity)
            queued = account.needs([(run_id, json.loads(config)) for run_id, config in con.execute(
                "SELECT id, config FROM runs WHERE status = ? ORDER BY id" + for_update(con),
                (QUEUED,))])
            ids, waiting = admission.admit(queued, account.active_mb, pool_size, budget_mb,
                                           account.ending_mb, account.hosts_mb, account.hosts)
            con.execute("UPDATE runs SET message = '' WHERE status = ? AND message LIKE "
                        "'waits for memory%'", (QUEUED,))
            con.executemany("UPDATE runs SET message = ? WHERE id = ?",
                            [(why, run_id) for run_id, why in waiting.items()])
            now = time.time()  # heartbeat = now: not stale before the process writes its own
            con.executemany(
                "UPDATE runs SET status = 'starting', updated = ?, heartbeat = ?, message = ''"
                " WHERE id = ?",
                [(now, now, run_id) for run_id in ids],
            )
        return ids

    def queue_positions(self) -> dict[int, int]:
        """{run id: 1-based place in the queue} of every queued run (first = next to start)."""
        with self._connect() as con:
            rows = con.execute("SELECT id FROM runs WHERE status = ? ORDER BY id", (QUEUED,))
            return {run_id: place for place, (run_id,) in enumerate(rows, start=1)}

    def active_count(self) -> int:
        """How many runs are `starting`, `running` or `paused` (places taken in the pool)."""
        with self._connect() as con:
            return con.execute(
                f"SELECT COUNT(*) FROM runs WHERE status IN {ACTIVE_STATUSES}").fetchone()[0]

    def touch_viewers(self, run_ids: Iterable[int], now: float | None = None) -> None:
        """Record that the browser session owning these runs is still open (`viewer_heartbeat`)."""
        now = time.time() if now is None else now
        with self._connect() as con:
            con.executemany("UPDATE runs SET viewer_heartbeat = ? WHERE id = ?",
                            [(now, int(run_id)) for run_id in run_ids])

    def run(self, run_id: int) -> dict[str, Any]:
        """One run as a dict, JSON columns decoded. A read only: a run whose process died
        reads as active until `mark_interrupted` runs (the dispatcher, the pages' heartbeat
        and the service's commands call it).

        Raises:
            KeyError: no run with this id.
        """
        with self._connect() as con:
            rows = dict_rows(con.execute("SELECT * FROM runs WHERE id = ?", (run_id,)))
        if not rows:
            raise KeyError(f"run {run_id} is not in the store {self.backend.label}")
        out = rows[0]
        for key in JSON_RUN_COLUMNS:
            out[key] = json.loads(out[key]) if key in out else {}
        return out

    def runs(self) -> pd.DataFrame:
        """Every run (newest first) without its JSON columns decoded (a read only, see `run`)."""
        return self.records.frame(
            "SELECT id, name, created, updated, status, message, optimizer, dataset, model,"
            " seed, device, step, total_steps, config FROM runs ORDER BY id DESC", ())

    def mark_interrupted(self, now: float | None = None) -> list[int]:
        """Mark active runs whose process is gone (or silent for `STALE_AFTER` s) interrupted:
        the explicit stale-detection step, called by the dispatcher (`claim_queued`), the pages'
        heartbeat and the service before it acts on a run (`runs.service.control`).

        A silent run whose process provably lives (same pid and start time, see
        `runs.store.processes.same_process_alive`) is stalled, not dead: it stays active.
        A run that could not write its own end (its store was unwritable longer than its
        retry window) left it outside the data directory (`runs.store.files.keep_last_words`):
        that status and message are written instead of "ended without finishing".

        Returns:
            The ids of the runs newly marked.
        """
        now = time.time() if now is None else now
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, pid, heartbeat, created, pid_start, worker, step FROM runs"
                f" WHERE status IN {ACTIVE_STATUSES}"
            ).fetchall()
            dead = {
                run_id: _interrupted_message(pid, beat or created, now, worker, step)
                for run_id, pid, beat, created, start, worker, step in rows
                if (pid is not None and not pid_alive(pid))
                or (now - (beat or created) > STALE_AFTER and not same_process_alive(pid, start))
            }
            for run_id, message in dead.items():
                # a run that could not write its end (the store was unwritable) kept it
                words = take_last_words(self.path, run_id) or {
                    "status": "interrupted", "message": message}
                con.execute(  # still active: a run that just finished keeps its status
                    "UPDATE runs SET status = ?, updated = ?, message = ? WHERE id = ?"
                    f" AND status IN {ACTIVE_STATUSES}",
                    (words["status"], now, words["message"], run_id),
                )
        return list(dead)

    def stalled_for(self, run: dict[str, Any], now: float | None = None) -> float | None:
        """Seconds since the heartbeat of an active run that is silent beyond `STALE_AFTER`
        while its process lives (stalled: e.g. `kill -STOP`, swapping), else None."""
        if run.get("status") not in ACTIVE_STATUSES:
            return None
        now = time.time() if now is None else now
        silent = now - (run.get("heartbeat") or run["created"])
        return silent if silent > STALE_AFTER else None

    def owned_runs(self, owner: str) -> list[int]:
        """Ids of the runs whose `owner` is this owner id, oldest first."""
        with self._connect() as con:
            return [row[0] for row in con.execute(
                "SELECT id FROM runs WHERE owner = ? ORDER BY id", (owner,))]

    def add_event(self, run_id: int, kind: str, actor: str = "", detail: str = "") -> None:
        """Record something done to a run by someone other than its owner (`run_events`:
        `take_control`, `teacher_stop`, `teacher_rename`, `teacher_delete`, `stalled_stop`).
        Events outlive the run (a teacher's delete stays on record)."""
        with self._connect() as con:
            con.execute("INSERT INTO run_events (run_id, created, kind, actor, detail)"
                        " VALUES (?,?,?,?,?)", (run_id, time.time(), kind, actor, detail))

    def events(self, run_id: int) -> pd.DataFrame:
        """The run's events: `id, created, kind, actor, detail`, oldest first."""
        return self.records.frame("SELECT id, created, kind, actor, detail FROM run_events"
                           " WHERE run_id = ? ORDER BY id", (run_id,))

    def delete_run(self, run_id: int) -> None:
        """Remove a run and all its records (not its `run_events`)."""
        with self._connect() as con:
            for table in ("scalars", "hyper_changes", "slot_stats", "histograms", "commands",
                          "hypergradients", "response_slices", "diagnostics", "lr_range",
                          "landscape"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            con.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    def take_owner(self, run_id: int, owner: str, previous: str | None) -> bool:
        """Make `owner` the run's owner (and mark its session seen now) if its owner is still
        `previous`: one UPDATE, so of two sessions taking a run over, one wins. True when this
        call changed it."""
        with self._connect() as con:
            return con.execute(
                "UPDATE runs SET owner = ?, viewer_heartbeat = ? WHERE id = ? AND owner IS ?",
                (owner, time.time(), run_id, previous)).rowcount == 1

    def size_bytes(self) -> int:
        """Size of the database file plus its WAL (PostgreSQL: `pg_database_size`), in bytes."""
        if not isinstance(self.path, Path):
            with self._connect() as con:
                return int(con.execute(
                    "SELECT pg_database_size(current_database())").fetchone()[0])
        return sum(
            p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists()
        )

    # ----- helpers of the Runs page (compare, rename, export) --------------------------------
    def rename_run(self, run_id: int, name: str) -> None:
        """Set a run's display name (stripped, at most 120 characters).

        Raises:
            KeyError: no run with this id.
            ValueError: `name` longer than 120 characters.
        """
        name = checked_name(name)
        with self._connect() as con:
            cur = con.execute(
                "UPDATE runs SET name = ?, updated = ? WHERE id = ?", (name, time.time(), run_id)
            )
            if cur.rowcount == 0:
                raise KeyError(f"run {run_id} is not in the store {self.backend.label}")
