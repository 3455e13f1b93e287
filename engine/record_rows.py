"""Named rows of the run store's record tables: what crosses the process boundary.

The run process (engine recording, the hyper-gradient stepper, the run loop) produces these
rows; `runs.store.records.Records.append` writes them, one generic INSERT per row type
built from its fields by `insert_sql`. Each type's fields are the table's columns after
`run_id`, in the order of the `CREATE TABLE` in `runs/store/schema.py`; `STORED_AFTER` names
columns the store adds after the fields (`hyper_changes.created`, Unix seconds, the batch's
time).

Steps are 1-based optimizer steps (0 = before training); losses are in nats. Light on purpose
(no TensorFlow, no pandas; NumPy for its scalar types): the pages import it through the store.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple
from collections.abc import Iterable, Sequence

import numpy as np


# The scalar series of the validation loss at the variables (y) of an optimizer evaluated at
# another point (schedule-free: `val_loss` is at its average x, `engine.eval_point`).
VAL_LOSS_AT_VARIABLES = "val_loss (at y)"


class ScalarRow(NamedTuple):
    """One scalar (`train_loss`, `val_loss`, `val_accuracy`, ...) at a step."""

    step: int
    name: str
    value: float


class SlotStatRow(NamedTuple):
    """Statistics of one (variable, slot) series at a step; `slot = "update"` is the effective
    per-parameter step `var_before - var_after`."""

    step: int
    variable: str
    slot: str
    norm: float  # L2 norm over all elements
    mean: float
    std: float  # population standard deviation


class HistogramRow(NamedTuple):
    """Equal-width histogram of one (variable, slot) series between `lo` and `hi`."""

    step: int
    variable: str
    slot: str
    lo: float
    hi: float
    counts: Sequence[int]  # one count per bin (engine.recording.BINS); stored as a JSON list


class HyperChangeRow(NamedTuple):
    """A hyperparameter value that takes effect at `step` (`old` is None for `init`)."""

    step: int
    name: str
    old: float | None
    new: float
    source: str  # `init`, `user`, `auto-tune`


class HypergradientRow(NamedTuple):
    """d(validation loss)/d(name) at `step` (after `step` updates)."""

    step: int
    name: str
    exact: float  # forward mode
    one_step: float  # one-step (Baydin et al. 2018)
    reverse: float | None  # truncated reverse mode; None when not computed at this step
    val_loss: float  # nats


class ResponseSliceRow(NamedTuple):
    """One point of a response slice: validation loss after a few more steps at `value`."""

    request_id: int  # the `response_slice` command's id
    step: int
    name: str
    value: float
    loss: float | None
    hypergradient: float | None  # reverse mode, only on the centre row
    center: int  # 1 on the row of the current value, else 0


class DiagnosticRow(NamedTuple):
    """One training-dynamics value at a step (`engine.diagnostics.catalog` names them:
    sharpness and its threshold, preconditioned sharpness, update ratio per variable, noise
    scale and its parts, the step time)."""

    step: int
    name: str
    variable: str  # the variable's label for per-variable values (update ratio), else ""
    value: float
    seconds: float  # wall time this diagnostic cost at this step (its main row), else 0
class LrRangeRow(NamedTuple):
    """One step of a learning-rate range test (`engine.lr_range`): the training loss (nats, on
    the next batch) after one update of a copy of the run at `learning_rate`."""

    request_id: int  # the `lr_range` command's id (0: a sweep run outside a run process)
    step: int  # 1-based step of the sweep
    learning_rate: float
    loss: float | None  # None (NULL) when the loss was not finite: the sweep stops there


class LandscapeRow(NamedTuple):
    """One point of the landscape along a run's path (`engine.path_landscape`).

    `kind` "grid": loss at theta_0 + x d_1 + y d_2 (step 0); "path": the run's weights at
    `step` projected onto the plane (x, y) with the loss at the real weights; "line": loss at
    theta_0 + x (theta_step - theta_0) (y = 0); "distance": x = ||theta_step - theta_0||, y = the
    share of that distance the plane shows, loss None. Losses are full-training-set means in
    nats.
    """

    step: int
    kind: str
    x: float
    y: float
    loss: float | None


# table name -> row type, in the order `append` writes them
ROW_TYPES: dict[str, type[Any]] = {  # NamedTuple classes
    "scalars": ScalarRow,
    "slot_stats": SlotStatRow,
    "histograms": HistogramRow,
    "hyper_changes": HyperChangeRow,
    "hypergradients": HypergradientRow,
    "response_slices": ResponseSliceRow,
    "diagnostics": DiagnosticRow,
    "lr_range": LrRangeRow,
    "landscape": LandscapeRow,
}
# Record tables an exported run zip may lack (exports written before these diagnostics).
OPTIONAL_IN_BUNDLES = frozenset({"diagnostics", "lr_range", "landscape"})
STORED_AFTER: dict[str, tuple[str, ...]] = {"hyper_changes": ("created",)}
# NumPy scalars (np.float32 losses, np.int64 steps) bind as the Python numbers they hold, in
# every connection of this process: rows need no per-field conversion (see `_WITH_SEQUENCES`).
for _numpy_type in (np.float16, np.float32, np.int8, np.int16, np.int32, np.int64, np.uint8,
                    np.uint16, np.uint32, np.uint64, np.bool_):
    # NumPy's stubs overload `item` (its return type depends on the index arguments); called
    # with the scalar alone it returns the Python number
    sqlite3.register_adapter(_numpy_type, np.generic.item)  # type: ignore[arg-type]

# Tables with a sequence field (stored as JSON text); the others' rows are SQLite-ready as they
# come, and skipping the per-field conversion matters on the hot path: full recording writes
# one `slot_stats` row per (variable, slot) every step.
_WITH_SEQUENCES = frozenset({"histograms"})


def insert_sql(table: str) -> str:
    """`INSERT INTO <table> (run_id, <fields>[, created]) VALUES (?, ...)` of a record table.

    Raises:
        KeyError: `table` is not in `ROW_TYPES`.
    """
    columns = ("run_id", *ROW_TYPES[table]._fields, *STORED_AFTER.get(table, ()))
    return (f"INSERT INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})")


def _sql_value(value: Any) -> Any:
    """A row field as SQLite stores it: sequences (histogram counts) as a JSON list of ints."""
    if isinstance(value, (list, tuple)):
        return json.dumps([int(v) for v in value])
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # NumPy arrays/scalars
        value = value.tolist()
        return json.dumps([int(v) for v in value]) if isinstance(value, list) else value
    return value


def stored_params(table: str, run_id: int, rows: Iterable[Sequence[Any]],
                  now: float) -> list[tuple[Any, ...]]:
    """Parameters of `insert_sql(table)` for `rows` (row types, or plain tuples in field order).

    Raises:
        TypeError: a row has the wrong number of fields (the message names the table).
    """
    row_type = ROW_TYPES[table]
    extra = (now,) * len(STORED_AFTER.get(table, ()))
    convert = table in _WITH_SEQUENCES
    out = []
    for row in rows:
        if type(row) is not row_type:  # a plain tuple (or another row type): check its length
            try:
                row = row_type._make(row)
            except TypeError:
                raise TypeError(f"{table} row {tuple(row)!r} refused: expected the fields "
                                f"{', '.join(row_type._fields)}") from None
        out.append((run_id, *(map(_sql_value, row) if convert else row), *extra))
    return out
