"""The command queue of the run store: the `commands` table, written by the service (send),
read by the run process (`pending`) and closed by it (`finish_command`).

`CommandQueue` is composed into `runs.store.run_store.RunStore` (its `queue`), which owns the
connection; its public methods are also the store's own (`store.pending(...)`). A payload is
stored as the JSON text it was sent as and decoded by `runs.protocol.parse` in the run process,
so that one malformed row cannot stop the others.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import pandas as pd

from runs.protocol import COMMAND_KINDS
from runs.store.connection import database_errors, for_update

# a sqlite3.Connection or a runs.store.connection.PgConnection (the same calls)
Connect = Callable[[], contextlib.AbstractContextManager[Any]]
_PENDING = ("SELECT id, kind, payload FROM commands WHERE run_id = ? AND status = 'pending'"
            " ORDER BY id")


class CommandQueue:
    """Send, read and close commands.

    Args:
        connect: opens one connection and one transaction (`RunStore._connect`).
        frame: the rows of a query as a DataFrame (`Records.frame`).
        path: where the store is, as errors name it (`Backend.label`).
    """

    # What the store offers under its own name (`RunStore.__getattr__`).
    PUBLIC = ("send_command", "send_command_once", "pending", "finish_command", "command",
              "last_payload", "pending_count", "command_status", "commands")

    def __init__(self, connect: Connect, frame: Callable[[str, Sequence[Any]], pd.DataFrame],
                 path: Path | str):
        self._connect, self._frame, self.path = connect, frame, path

    def send_command(self, run_id: int, kind: str, payload: dict[str, Any] | None = None) -> int:
        """Queue a command for a run process; returns the command id.

        Raises:
            ValueError: `kind` is not one of `COMMAND_KINDS`.
        """
        if kind not in COMMAND_KINDS:
            raise ValueError(f"command kind={kind!r} refused: must be one of {COMMAND_KINDS}")
        with self._connect() as con:
            cur = con.execute(
                "INSERT INTO commands (run_id, created, kind, payload) VALUES (?,?,?,?)",
                (run_id, time.time(), kind, json.dumps(payload or {})),
            )
            return int(cur.lastrowid or 0)  # an INSERT always sets it

    def send_command_once(self, run_id: int, kind: str,
                          payload: dict[str, Any] | None = None) -> tuple[int, bool]:
        """Queue a command unless an identical one (same kind and payload) is still pending:
        one INSERT ... WHERE NOT EXISTS, so two clicks racing cannot both queue it. SQLite
        runs it under its one writer; PostgreSQL (where two READ COMMITTED transactions would
        not see each other's row) first locks the run's row (`SELECT ... FOR UPDATE`), so the
        sends to one run take turns, on any number of web servers.

        Returns:
            (command id, True when this call queued it; False: the pending twin's id).

        Raises:
            ValueError: `kind` is not one of `COMMAND_KINDS`.
        """
        if kind not in COMMAND_KINDS:
            raise ValueError(f"command kind={kind!r} refused: must be one of {COMMAND_KINDS}")
        text = json.dumps(payload or {})
        with self._connect() as con:
            con.execute("SELECT id FROM runs WHERE id = ?" + for_update(con), (run_id,))
            cur = con.execute(
                "INSERT INTO commands (run_id, created, kind, payload) SELECT ?,?,?,? WHERE NOT "
                "EXISTS (SELECT 1 FROM commands WHERE run_id = ? AND kind = ? AND payload = ? "
                "AND status = 'pending')", (run_id, time.time(), kind, text, run_id, kind, text))
            if cur.rowcount == 1:
                return int(cur.lastrowid or 0), True  # an INSERT always sets it
            row = con.execute("SELECT id FROM commands WHERE run_id = ? AND kind = ? AND "
                              "payload = ? AND status = 'pending' ORDER BY id LIMIT 1",
                              (run_id, kind, text)).fetchone()
        return int(row[0]), False

    def pending(self, run_id: int, con: Any = None) -> list[dict[str, Any]]:
        """The run's pending command rows, oldest first: `id, kind, payload` with the payload as
        stored (JSON text, decoded by `runs.protocol.parse`), so that one malformed row cannot
        stop the others.

        Args:
            con: an open connection to this store to read through (`RunStore.open_connection`;
                the run loop polls ten times a second: a new SQLite connection per poll costs
                ~0.3 ms, a held one ~4 us); on any driver error the read is retried on a new
                connection, which raises the store's own errors (`StoreUnavailable`).
        """
        if con is not None:
            try:
                rows = con.execute(_PENDING, (run_id,)).fetchall()
                return [{"id": i, "kind": k, "payload": p} for i, k, p in rows]
            except database_errors():
                pass
        with self._connect() as fresh:
            rows = fresh.execute(_PENDING, (run_id,)).fetchall()
        return [{"id": i, "kind": k, "payload": p} for i, k, p in rows]

    def finish_command(self, command_id: int, status: str, message: str = "",
                       step: int | None = None) -> None:
        """Mark a command `done` or `refused` (with the reason) at the step it took effect."""
        with self._connect() as con:
            con.execute(
                "UPDATE commands SET status = ?, message = ?, step = ? WHERE id = ?",
                (status, message, step, command_id),
            )

    def command(self, command_id: int) -> dict[str, Any]:
        """One command row: `id, run_id, kind, payload, status, message, step` (payload as
        stored, JSON text).

        Raises:
            KeyError: no such command.
        """
        keys = ("id", "run_id", "kind", "payload", "status", "message", "step")
        with self._connect() as con:
            row = con.execute(f"SELECT {', '.join(keys)} FROM commands WHERE id = ?",
                              (command_id,)).fetchone()
        if row is None:
            raise KeyError(f"command {command_id} is not in the store {self.path}")
        return dict(zip(keys, row))

    def last_payload(self, run_id: int, kind: str) -> dict[str, Any] | None:
        """The decoded payload of the run's newest command of `kind` that was not refused
        (pending or done), or None when there is none."""
        with self._connect() as con:
            row = con.execute("SELECT payload FROM commands WHERE run_id = ? AND kind = ? AND "
                              "status != 'refused' ORDER BY id DESC LIMIT 1",
                              (run_id, kind)).fetchone()
        return None if row is None else json.loads(row[0])

    def pending_count(self, kind: str, run_id: int | None = None,
                      owner: str | None = None) -> int:
        """How many commands of `kind` are pending for one run (`run_id`) or over all the runs
        of an owner id (`owner`); exactly one of the two is given."""
        with self._connect() as con:
            if run_id is not None:
                return con.execute("SELECT COUNT(*) FROM commands WHERE run_id = ? AND kind = ? "
                                   "AND status = 'pending'", (run_id, kind)).fetchone()[0]
            return con.execute(
                "SELECT COUNT(*) FROM commands JOIN runs ON runs.id = commands.run_id WHERE "
                "runs.owner = ? AND commands.kind = ? AND commands.status = 'pending'",
                (owner, kind)).fetchone()[0]

    def command_status(self, command_id: int) -> str | None:
        """`pending`, `done` or `refused`; None for an unknown command id."""
        with self._connect() as con:
            row = con.execute("SELECT status FROM commands WHERE id = ?",
                              (command_id,)).fetchone()
        return row[0] if row else None

    def commands(self, run_id: int) -> pd.DataFrame:
        """Every command of a run: `id, created, kind, payload, status, message, step`."""
        return self._frame(
            "SELECT id, created, kind, payload, status, message, step FROM commands"
            " WHERE run_id = ? ORDER BY id", (run_id,),
        )
