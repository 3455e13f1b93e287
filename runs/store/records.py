"""The record tables of the run store: appended by the run process, read by the pages.

`Records` is composed into `runs.store.run_store.RunStore` (its `records`), which owns the
connection and the schema (`runs.store.schema`); kept apart so that the run lifecycle and the
records each fit in a module that can be read in one go. Every table's INSERT is built from the
row types of `engine.record_rows`.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any
from collections.abc import Callable, Iterable, Sequence

import pandas as pd

from engine import record_rows
from engine.record_rows import (
    DiagnosticRow,
    HistogramRow,
    HyperChangeRow,
    HypergradientRow,
    LandscapeRow,
    LrRangeRow,
    ResponseSliceRow,
    ScalarRow,
    SlotStatRow,
)
from runs.protocol import IMPORTED, checked_name

# a sqlite3.Connection or a runs.store.connection.PgConnection (the same calls)
Connect = Callable[[], contextlib.AbstractContextManager[Any]]


def display_width(last_step: int, max_points: int) -> int:
    """The step width `Records.scalars(max_points=...)` keeps: the smallest of 1, 2, 5, 10,
    20, 50, ... with `last_step / width <= max_points` (steps, both ints >= 0)."""
    width = 1
    while max_points and last_step / width > max_points:
        width = width * 5 // 2 if str(width).startswith("2") else width * 2
    return width


class Records:
    """`append` (one transaction per batch), `import_run` and the DataFrame readers of the
    record tables.

    Args:
        connect: opens one connection and one transaction (`RunStore._connect`).
        immediate: opens one `BEGIN IMMEDIATE` transaction (`RunStore.immediate`).
    """

    # What the store offers under its own name (`RunStore.__getattr__`).
    PUBLIC = ("append", "import_run", "scalars", "hyper_changes", "slot_stats", "histograms",
              "last_scalars", "hypergradients", "response_slices", "diagnostics", "frame",
              "scalars_since", "lr_range", "landscape")

    def __init__(self, connect: Connect, immediate: Connect):
        self._connect = connect
        self.immediate = immediate

    # ----- records (written by the run process) -----------------------------------------------
    def append(
        self,
        run_id: int,
        *,
        scalars: Iterable[ScalarRow] = (),
        slot_stats: Iterable[SlotStatRow] = (),
        histograms: Iterable[HistogramRow] = (),
        hyper_changes: Iterable[HyperChangeRow] = (),
        hypergradients: Iterable[HypergradientRow] = (),
        response_slices: Iterable[ResponseSliceRow] = (),
        diagnostics: Iterable[DiagnosticRow] = (),
        lr_range: Iterable[LrRangeRow] = (),
        landscape: Iterable[LandscapeRow] = (),
        step: int | None = None,
    ) -> None:
        """Append one batch of records in a single transaction and refresh the heartbeat.

        Args:
            scalars ... diagnostics: rows of the table of that name, as the row types of
                `engine.record_rows` (or plain tuples in their field order); each table is
                written by the one INSERT `record_rows.insert_sql` builds from the fields.
            step: the last step reached, stored in `runs.step`.

        Raises:
            TypeError: a row with the wrong number of fields (names the table).
            runs.store.files.StoreUnavailable: the data directory is read-only or the disk is full.
        """
        now = time.time()
        batches = {"scalars": scalars, "slot_stats": slot_stats, "histograms": histograms,
                   "hyper_changes": hyper_changes, "hypergradients": hypergradients,
                   "response_slices": response_slices, "diagnostics": diagnostics,
                   "lr_range": lr_range, "landscape": landscape}
        params = {table: record_rows.stored_params(table, run_id, rows, now)
                  for table, rows in batches.items()}
        with self._connect() as con:
            for table, values in params.items():
                if values:
                    con.executemany(record_rows.insert_sql(table), values)
            if step is None:
                con.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (now, run_id))
            else:
                con.execute(
                    "UPDATE runs SET heartbeat = ?, step = ? WHERE id = ?", (now, step, run_id)
                )

    def import_run(self, config: dict[str, Any], tables: dict[str, list[Sequence[Any]]],
                   name: str = "", owner: str | None = None, message: str = "",
                   details: dict[str, Any] | None = None) -> int:
        """Store a run read from an exported zip and all its records in ONE transaction.

        Args:
            config: the validated `RunConfig` dict (`RunConfig.to_json_dict()`).
            tables: record table -> rows in the field order of `record_rows.ROW_TYPES`
                (checked by `runs.io.bundle_import.read_run_bundle`).
            name: the run's name (at most `runs.protocol.MAX_NAME` characters).
            owner: the importing session's owner id (None: no session, e.g. the CLI).
            message: shown with the run (where it came from).
            details: `device`, `versions`, `optimizer_config` of the exported run.

        Returns:
            The new run's id; its status is `imported` (final: never steered) and its `step`
            the largest recorded step.

        Raises:
            TypeError: a row with the wrong number of fields (names the table).
            ValueError: a name that is too long.
            runs.store.files.StoreUnavailable: the store cannot be written.
            Any error inside the transaction rolls it back: the store is unchanged.
        """
        name = checked_name(name)
        details = details or {}
        now = time.time()
        step = max((int(row[fields.index("step")]) for table, rows in tables.items()
                    for fields in [record_rows.ROW_TYPES[table]._fields] for row in rows),
                   default=0)
        with self.immediate() as con:
            cur = con.execute(
                "INSERT INTO runs (name, created, updated, status, message, optimizer, dataset,"
                " model, seed, device, total_steps, step, config, optimizer_config, versions,"
                " owner, heartbeat) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (name, now, now, IMPORTED, message[:2000], config["optimizer"],
                 config["dataset"], config["model"], int(config["seed"]),
                 str(details.get("device", ""))[:64], int(config["steps"]), step,
                 json.dumps(config), json.dumps(details.get("optimizer_config") or {}),
                 json.dumps(details.get("versions") or {}), owner, now))
            run_id = int(cur.lastrowid or 0)  # an INSERT always sets it
            for table, rows in tables.items():
                values = record_rows.stored_params(table, run_id, rows, now)
                if values:
                    con.executemany(record_rows.insert_sql(table), values)
        return run_id

    # ----- reads (pages) --------------------------------------------------------------------
    def frame(self, sql: str, params: Sequence[Any]) -> pd.DataFrame:
        """The rows of one query as a DataFrame (columns named as the query names them;
        numbers as pandas' `read_sql_query` would give them, with either driver).

        Raises:
            runs.store.files.StoreUnavailable: a full or read-only disk, or an unreachable
                PostgreSQL server.
        """
        with self._connect() as con:
            cursor = con.execute(sql, params)
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        return pd.DataFrame.from_records(rows, columns=columns, coerce_float=True)

    def _display_filter(self, run_id: int, max_points: int | None) -> tuple[str, list[Any]]:
        """SQL condition (and its parameters) keeping about `max_points` steps of a series.

        Kept: steps that are multiples of a width `w` in {1, 2, 5} x 10^k with
        `last / w <= max_points`, steps 0 and 1, and the run's last step (`runs.step`, written
        in the same transaction as the records: the live head of the curves).
        Because the recording strides are powers of 10 (`engine.recording.stride`), every kept
        step of a decimated run is one that was recorded. A filter rather than a GROUP BY: it
        needs no sort of the whole run (a 200,000-step run recorded at every step has 2.4 million
        slot rows), and the rows are exact recorded values.
        """
        if not max_points:
            return "", []
        with self._connect() as con:
            row = con.execute("SELECT step FROM runs WHERE id = ?", (run_id,)).fetchone()
        last = row[0] if row else 0
        width = 1
        while last / width > max_points:
            width = width * 5 // 2 if str(width).startswith("2") else width * 2
        if width == 1:
            return "", []
        return " AND (step % ? = 0 OR step <= 1 OR step = ?)", [width, last]

    def scalars(self, run_id: int, names: Sequence[str] | None = None,
                max_points: int | None = None) -> pd.DataFrame:
        """Long table `step, name, value` of a run's scalars, ordered by step.

        Args:
            names: only these scalars (default all).
            max_points: about this many steps per scalar at most (see `_display_filter`), for
                the charts of long runs; None = every row.
        """
        where = "run_id = ?"
        params: list[Any] = [run_id]
        if names:
            where += f" AND name IN ({','.join('?' * len(names))})"
            params += list(names)
        extra, extra_params = self._display_filter(run_id, max_points)
        return self.frame(f"SELECT step, name, value FROM scalars WHERE {where}{extra}"
                           " ORDER BY step", [*params, *extra_params])

    def scalars_since(self, run_id: int, cursor: int = 0,
                      names: Sequence[str] | None = None) -> tuple[pd.DataFrame, int]:
        """The scalar rows a run stored after `cursor`, and the cursor to pass next time.

        The cursor is the table's row id (SQLite's `rowid`), which grows with every INSERT:
        the rows of one batch and of later batches all come after it, so a reader that passes
        each returned cursor back sees every row exactly once, however the run's batches split
        its steps. A step cursor would not: a scalar of step s written in a later batch than
        another scalar of step s would be skipped.

        Args:
            run_id: the store's run id.
            cursor: 0 for every row, else a cursor this method returned.
            names: only these scalars (default all).

        Returns:
            (`step, name, value` rows in the order they were stored, the largest row id read,
            or `cursor` itself when there is no new row).

        Raises:
            runs.store.files.StoreUnavailable: as `frame`.
        """
        where = "run_id = ? AND rowid > ?"
        params: list[Any] = [run_id, int(cursor)]
        if names:
            where += f" AND name IN ({','.join('?' * len(names))})"
            params += list(names)
        rows = self.frame(f"SELECT rowid AS row, step, name, value FROM scalars WHERE {where}"
                          " ORDER BY rowid", params)
        last = int(rows["row"].iloc[-1]) if not rows.empty else int(cursor)
        return rows.drop(columns="row"), last

    def hyper_changes(self, run_id: int) -> pd.DataFrame:
        """`step, name, old, new, source, created` rows of a run, in the order they took effect."""
        return self.frame(
            "SELECT step, name, old, new, source, created FROM hyper_changes WHERE run_id = ?"
            " ORDER BY step, rowid", (run_id,),
        )

    def slot_stats(self, run_id: int, max_points: int | None = None) -> pd.DataFrame:
        """`step, variable, slot, norm, mean, std` rows of a run, ordered by step
        (`max_points`: see `scalars`)."""
        extra, params = self._display_filter(run_id, max_points)
        return self.frame(
            "SELECT step, variable, slot, norm, mean, std FROM slot_stats WHERE run_id = ?"
            f"{extra} ORDER BY step", (run_id, *params),
        )

    def histograms(self, run_id: int, variable: str, slot: str,
                   max_points: int | None = None) -> pd.DataFrame:
        """`step, lo, hi, counts` (counts decoded to lists) of one (variable, slot)
        (`max_points`: see `scalars`; histograms are recorded every 20 strides)."""
        extra, params = self._display_filter(run_id, max_points)
        frame = self.frame(
            "SELECT step, lo, hi, counts FROM histograms WHERE run_id = ? AND variable = ?"
            f" AND slot = ?{extra} ORDER BY step", (run_id, variable, slot, *params),
        )
        frame["counts"] = frame["counts"].map(json.loads)
        return frame

    def last_scalars(self, names: Sequence[str] = ("val_loss", "val_accuracy")) -> pd.DataFrame:
        """`run_id, name, step, value` of every run's last recorded value of each scalar."""
        marks = ",".join("?" * len(names))
        return self.frame(
            "SELECT s.run_id, s.name, s.step, s.value FROM scalars s JOIN ("
            f" SELECT run_id, name, MAX(step) AS step FROM scalars WHERE name IN ({marks})"
            " GROUP BY run_id, name) m ON s.run_id = m.run_id AND s.name = m.name"
            " AND s.step = m.step", tuple(names),
        )

    def hypergradients(self, run_id: int) -> pd.DataFrame:
        """`step, name, exact, one_step, reverse, val_loss` rows of a run, by step then name
        (`RunStore.__init__` creates the table in any store file it opens, `runs.store.schema`)."""
        return self.frame(
            "SELECT step, name, exact, one_step, reverse, val_loss FROM hypergradients"
            " WHERE run_id = ? ORDER BY step, rowid", (run_id,),
        )

    def response_slices(self, run_id: int, request_id: int | None = None) -> pd.DataFrame:
        """`request_id, step, name, value, loss, hypergradient, center` rows of a run (one
        request, or all), ordered by request then value."""
        if request_id is None:
            return self.frame(
                "SELECT request_id, step, name, value, loss, hypergradient, center FROM"
                " response_slices WHERE run_id = ? ORDER BY request_id, value", (run_id,),
            )
        return self.frame(
            "SELECT request_id, step, name, value, loss, hypergradient, center FROM"
            " response_slices WHERE run_id = ? AND request_id = ? ORDER BY value",
            (run_id, request_id),
        )

    def diagnostics(self, run_id: int, names: Sequence[str] | None = None) -> pd.DataFrame:
        """`step, name, variable, value, seconds` rows of a run's training-dynamics
        diagnostics (`engine.diagnostics.catalog` names them), ordered by step.

        Args:
            names: only these names (default all).
        """
        where, params = "run_id = ?", list[Any]([run_id])
        if names:
            where += f" AND name IN ({','.join('?' * len(names))})"
            params += list(names)
        return self.frame("SELECT step, name, variable, value, seconds FROM diagnostics"
                          f" WHERE {where} ORDER BY step, rowid", params)

    def lr_range(self, run_id: int, request_id: int | None = None) -> pd.DataFrame:
        """`request_id, step, learning_rate, loss` rows of a run's learning-rate range tests
        (one request, or all), by request then step (`engine.lr_range` analyses them)."""
        where, params = ("", (run_id,)) if request_id is None else (
            " AND request_id = ?", (run_id, request_id))
        return self.frame("SELECT request_id, step, learning_rate, loss FROM lr_range"
                          f" WHERE run_id = ?{where} ORDER BY request_id, step", params)

    def landscape(self, run_id: int, kind: str | None = None) -> pd.DataFrame:
        """`step, kind, x, y, loss` rows of the landscape along a run's path (`kind` "grid",
        "path", "line", "distance", or all; `engine.record_rows.LandscapeRow`), by kind, step,
        x, y."""
        where, params = ("", (run_id,)) if kind is None else (" AND kind = ?", (run_id, kind))
        return self.frame("SELECT step, kind, x, y, loss FROM landscape"
                          f" WHERE run_id = ?{where} ORDER BY kind, step, x, y", params)
