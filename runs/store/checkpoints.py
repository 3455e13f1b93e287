"""Where a run's checkpoint and its continue request are kept: beside a SQLite store, or in a
PostgreSQL store. No TensorFlow (the server reads a checkpoint's step to validate a Continue).

`of_run(store, run_id)` chooses:

* a SQLite store (a file): `FileCheckpoints`, the files `checkpoints/run-<id>/latest.npz` and
  `continue.json` beside the store file (`runs.store.checkpoint_files`). Every process that
  opens a SQLite store reads its directory (SQLite needs the file on a disk the process
  mounts), so the server reads what any run host wrote, and a ~1 MB checkpoint every few
  seconds per run stays out of the store's one write lock, which every page and run shares;
* a PostgreSQL store (a URL): `StoreCheckpoints`, one row per run in the tables `checkpoints`
  (the same `.npz` bytes) and `continue_requests` (`runs.store.schema.CHECKPOINT_SCHEMA`).
  Run hosts on other machines (Ray actors) reach the store but need not share a disk with the
  server: a checkpoint in the store is readable by every web server and every node that can
  continue the run. A row is replaced in one transaction, so a process killed mid-write leaves
  the previous checkpoint whole.

Both raise the same errors: `OSError` when a checkpoint cannot be written (the previous one
stays), `CheckpointError` when one is missing or cannot be read.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

import numpy as np

from runs.store import checkpoint_files as files
from runs.store.checkpoint_files import CheckpointError
from runs.store.connection import database_errors

if TYPE_CHECKING:  # the store's schema module imports this one
    from runs.store.run_store import RunStore

class FileCheckpoints:
    """The checkpoint of run `run_id` as files beside the SQLite store at `store_path`."""

    def __init__(self, store_path: str | os.PathLike, run_id: int):
        self.store_path, self.run_id = store_path, int(run_id)
        self.path = files.latest_path(store_path, run_id)

    @property
    def where(self) -> str:
        """The checkpoint's file, for messages."""
        return str(self.path)

    def write(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> int:
        """Replace the checkpoint atomically (`checkpoint_files.write_atomic`); bytes written.

        Raises:
            OSError: it could not be written (the previous checkpoint stays).
        """
        return files.write_atomic(self.path, arrays, meta)

    def read_meta(self) -> dict[str, Any]:
        """The checkpoint's JSON document. Raises `CheckpointError` (none, unreadable)."""
        return files.read_meta(self.path)

    def read(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(meta, arrays). Raises `CheckpointError` (none, unreadable)."""
        return files.read(self.path)

    def write_request(self, info: Mapping[str, Any]) -> None:
        """Leave a continue request (JSON `info`). Raises `OSError`."""
        files.write_marker(self.store_path, self.run_id, info)

    def read_request(self) -> dict[str, Any] | None:
        """The continue request, or None. Raises `CheckpointError` (unreadable)."""
        return files.read_marker(self.store_path, self.run_id)

    def drop_request(self) -> None:
        """Remove the continue request (none is fine)."""
        files.drop_marker(self.store_path, self.run_id)

    def discard(self) -> None:
        """Remove the checkpoint and the request (the run can no longer be continued)."""
        files.discard(self.store_path, self.run_id)


class StoreCheckpoints:
    """The checkpoint of run `run_id` as rows of a PostgreSQL store."""

    def __init__(self, store: RunStore, run_id: int):
        self.store, self.run_id = store, int(run_id)

    @property
    def where(self) -> str:
        """The checkpoint's row, for messages."""
        return f"of run {self.run_id} in the store {self.store.backend.label}"

    def write(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> int:
        """Replace the checkpoint row in one transaction; bytes written.

        Raises:
            OSError: the store refused or could not be reached (the previous row stays).
        """
        data = files.encode(arrays, meta)
        try:
            with self.store.immediate() as con:
                con.execute(
                    "INSERT INTO checkpoints (run_id, written, step, meta, data) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                    "written = excluded.written, step = excluded.step, meta = excluded.meta, "
                    "data = excluded.data",
                    (self.run_id, time.time(), int(meta.get("step", 0)), json.dumps(dict(meta)),
                     data))
        except database_errors() as error:
            raise OSError(f"the checkpoint {self.where} was not written ({error})") from error
        return len(data)

    def _column(self, column: str) -> Any:
        try:
            rows = self.store.frame(f"SELECT {column} FROM checkpoints WHERE run_id = ?",
                                    (self.run_id,))
        except database_errors() as error:
            raise CheckpointError(f"the checkpoint {self.where} cannot be read "
                                  f"({error})") from None
        if rows.empty:
            raise CheckpointError(f"no checkpoint {self.where}")
        return rows[column].iloc[0]

    def read_meta(self) -> dict[str, Any]:
        """The checkpoint's JSON document, without its arrays (the `meta` column).

        Raises:
            CheckpointError: none, unreadable, or another format version.
        """
        raw = self._column("meta")
        if not isinstance(raw, str):  # a row written before the `meta` column
            return files.read_meta(bytes(self._column("data")), self.where)
        try:
            meta = json.loads(raw)
        except ValueError as error:
            raise CheckpointError(f"the checkpoint {self.where} cannot be read "
                                  f"({error})") from None
        return files.checked_meta(meta, self.where)

    def read(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(meta, arrays). Raises `CheckpointError` (none, unreadable)."""
        return files.read(bytes(self._column("data")), self.where)

    def write_request(self, info: Mapping[str, Any]) -> None:
        """Leave a continue request (JSON `info`).

        Raises:
            OSError: the store refused or could not be reached.
        """
        try:
            with self.store.immediate() as con:
                con.execute("INSERT INTO continue_requests (run_id, info) VALUES (?, ?) "
                            "ON CONFLICT (run_id) DO UPDATE SET info = excluded.info",
                            (self.run_id, json.dumps(dict(info))))
        except database_errors() as error:
            raise OSError(f"the continue request of run {self.run_id} was not written "
                          f"({error})") from error

    def read_request(self) -> dict[str, Any] | None:
        """The continue request, or None. Raises `CheckpointError` (unreadable)."""
        unreadable: tuple[type[BaseException], ...] = (*database_errors(), ValueError)
        try:
            rows = self.store.frame("SELECT info FROM continue_requests WHERE run_id = ?",
                                    (self.run_id,))
            return None if rows.empty else json.loads(rows["info"].iloc[0])
        except unreadable as error:
            raise CheckpointError(f"the continue request of run {self.run_id} cannot be read "
                                  f"({error})") from None

    def drop_request(self) -> None:
        """Remove the continue request (none is fine)."""
        with self.store.immediate() as con:
            con.execute("DELETE FROM continue_requests WHERE run_id = ?", (self.run_id,))

    def discard(self) -> None:
        """Remove the checkpoint and the request (the run can no longer be continued)."""
        with self.store.immediate() as con:
            con.execute("DELETE FROM checkpoints WHERE run_id = ?", (self.run_id,))
            con.execute("DELETE FROM continue_requests WHERE run_id = ?", (self.run_id,))


def of_run(store: RunStore, run_id: int) -> FileCheckpoints | StoreCheckpoints:
    """Where run `run_id`'s checkpoint is kept for `store` (see the module docstring): files
    beside a SQLite store, rows of a PostgreSQL store."""
    if store.backend.dialect == "postgresql":
        return StoreCheckpoints(store, run_id)
    return FileCheckpoints(store.path, run_id)
