"""An exported run zip read back WITH its records, so an import shows the run's curves.

`runs.io.export.export_run` writes `run-<id>/config.json` and one CSV (and one Parquet file) per
record table. `read_run_bundle` reads the config exactly as a config import does
(`runs.io.export.read_bundle`) and every record table from its CSV, checking each cell against the
named row of `engine.record_rows` before anything reaches the store; `RunStore.import_run` then
stores the run (status `imported`: final, never steered) and all its rows in ONE transaction.

What is never done with an uploaded file: reading Parquet (its reader can deserialize
extension types; the CSVs hold the same tables), evaluating anything, following a member name
(only `run-<id>/<table>.csv` names are read), or inflating more than the zip's headers announce
within `MAX_TABLE_BYTES` per table and `MAX_TOTAL_BYTES` in all (checked from the headers
before a byte is inflated, and again while reading). Refusals are `ConfigImportError`s naming
the file, the column and the CSV line.
"""

from __future__ import annotations

import io
import json
import re
import typing
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engine.record_rows import OPTIONAL_IN_BUNDLES, ROW_TYPES
from runs.io.export import BUNDLE_MAX_BYTES, read_bundle
from settings.config_file import ConfigImportError
from settings.run_config import RunConfig

MAX_MEMBERS = 2_000  # an export holds ~20 files (CSV, Parquet, TensorBoard events, config)
MAX_TABLE_BYTES = 128 * 2**20  # one CSV, inflated
MAX_TOTAL_BYTES = 256 * 2**20  # every CSV read, inflated
MAX_TEXT = 200  # characters of a name / source / variable cell
MAX_STEP = 10**9
MAX_BINS = 1_000
TABLE_MEMBER = re.compile(r"run-[0-9]+/(?P<table>[a-z_]+)\.csv")
# columns that identify a row: two rows with the same key are a corrupted table
KEYS = {"scalars": ("step", "name"), "slot_stats": ("step", "variable", "slot"),
        "histograms": ("step", "variable", "slot"), "hypergradients": ("step", "name"),
        "diagnostics": ("step", "name", "variable")}
# exported columns the store sets itself (`record_rows.STORED_AFTER`): read, checked, dropped
STORE_SET = {"hyper_changes": ("created",)}


@dataclass(frozen=True)
class ImportedRun:
    """What an exported run zip holds.

    Attributes:
        config: the run's `RunConfig` (validated as any config import).
        document: the export's `config.json` (run name, status, step, optimizer config...).
        tables: table name -> rows (tuples in the field order of `ROW_TYPES[table]`).
    """

    config: RunConfig
    document: dict[str, Any]
    tables: dict[str, list[tuple]]

    @property
    def rows(self) -> int:
        return sum(len(rows) for rows in self.tables.values())


def _error(message: str) -> ConfigImportError:
    return ConfigImportError("bundle", message)


def _kind(annotation: Any) -> tuple[str, bool]:
    """(`int` | `float` | `str` | `counts`, optional) of a row field's annotation."""
    if typing.get_origin(annotation) not in (typing.Union, None) and \
            type(None) not in typing.get_args(annotation):
        return "counts", False  # Sequence[int]: a histogram's counts
    optional = type(None) in typing.get_args(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    base = args[0]
    if base is int or base is bool:
        return "int", optional
    if base is float:
        return "float", optional
    if base is str:
        return "str", optional
    return "counts", optional


def _columns(table: str) -> dict[str, tuple[str, bool]]:
    row = ROW_TYPES[table]
    hints = typing.get_type_hints(row)
    out = {name: _kind(hints[name]) for name in row._fields}
    out.update({name: ("float", False) for name in STORE_SET.get(table, ())})
    return out


def _check_column(member: str, column: str, raw: pd.Series, kind: str, optional: bool
                  ) -> pd.Series:
    """`raw` (CSV text, NaN for an empty cell) converted to `kind`; raises naming the line."""
    def refuse(index: int, why: str) -> ConfigImportError:
        return _error(f"{member}, column {column!r}, line {index + 2}: {why}")

    empty = raw.isna()
    if empty.any() and not optional:
        raise refuse(int(np.flatnonzero(empty.to_numpy())[0]), "empty cell (a value is required)")
    if kind == "str":
        text = raw.fillna("").astype(str)
        long = text.str.len() > MAX_TEXT
        if long.any():
            raise refuse(int(np.flatnonzero(long.to_numpy())[0]),
                         f"text longer than {MAX_TEXT} characters")
        return text
    if kind == "counts":
        values = []
        for index, cell in enumerate(raw):
            try:
                counts = json.loads(cell)
            except (TypeError, ValueError):
                raise refuse(index, "not a JSON list of counts") from None
            if not isinstance(counts, list) or not 0 < len(counts) <= MAX_BINS or not all(
                    isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
                raise refuse(index, f"counts must be a JSON list of 1..{MAX_BINS} integers >= 0")
            values.append(counts)
        return pd.Series(values, index=raw.index, dtype=object)
    number = pd.to_numeric(raw, errors="coerce")
    bad = number.isna() & ~empty
    if bad.any():
        index = int(np.flatnonzero(bad.to_numpy())[0])
        raise refuse(index, f"{raw.iloc[index]!r} is not a number")
    finite = np.isfinite(number.to_numpy(dtype=float, na_value=0.0))
    if not finite.all():
        raise refuse(int(np.flatnonzero(~finite)[0]), "not a finite number")
    if kind == "int":
        whole = (number.fillna(0) % 1 == 0).to_numpy()
        if not whole.all():
            raise refuse(int(np.flatnonzero(~whole)[0]), "not an integer")
        low, high = (0, 1) if column == "center" else (0, MAX_STEP)
        outside = ((number < low) | (number > high)).to_numpy()
        if outside.any():
            raise refuse(int(np.flatnonzero(outside)[0]), f"outside [{low}, {high:,}]")
        return number.astype("int64")
    return number.astype("float64")


def _read_table(archive: zipfile.ZipFile, info: zipfile.ZipInfo, table: str) -> list[tuple]:
    member = info.filename
    try:
        with archive.open(info) as handle:
            text = handle.read(MAX_TABLE_BYTES + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError,
            RuntimeError) as error:
        raise _error(f"{member} is corrupted ({error})") from None
    if len(text) > MAX_TABLE_BYTES:
        raise _error(f"{member} refused: more than {MAX_TABLE_BYTES:,} bytes once inflated")
    try:
        frame = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False,
                            na_values=[""], encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise _error(f"{member}: empty file (a header line is required)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as error:
        raise _error(f"{member}: not a readable CSV table ({error})") from None
    expected = _columns(table)
    if list(frame.columns) != list(expected):
        missing = [c for c in expected if c not in frame.columns]
        extra = [c for c in frame.columns if c not in expected]
        raise _error(f"{member}: columns {list(frame.columns)} refused: expected "
                     f"{list(expected)}" + (f" (missing {missing})" if missing else "")
                     + (f" (unknown {extra})" if extra else ""))
    checked = {column: _check_column(member, column, frame[column], *expected[column])
               for column in expected}
    key = KEYS.get(table)
    if key is not None and len(frame):
        keys = pd.DataFrame({c: checked[c] for c in key})
        dup = keys.duplicated(keep="first").to_numpy()
        if dup.any():
            index = int(np.flatnonzero(dup)[0])
            raise _error(f"{member}, line {index + 2}: duplicate row for "
                         + ", ".join(f"{c}={keys[c].iloc[index]}" for c in key))
    fields = ROW_TYPES[table]._fields
    columns = [checked[f].astype(object).where(checked[f].notna(), None).tolist()
               for f in fields]
    return [tuple(values) for values in zip(*columns)]


def read_run_bundle(data: bytes) -> ImportedRun:
    """Config, export document and every record table of an exported run zip.

    Raises:
        ConfigImportError: field `bundle`, naming file, column and line: what `read_bundle`
            refuses; more than `MAX_MEMBERS` members; a table announced larger than
            `MAX_TABLE_BYTES` (or all of them larger than `MAX_TOTAL_BYTES`); a table missing;
            a CSV with other columns than the export writes, a cell that is not of its column's
            kind (an integer, a finite number, text up to 200 characters, a JSON list of
            counts), a required cell empty, a step outside [0, 10**9], a duplicate row.
    """
    config = read_bundle(data)  # size, zip, the one config.json: refused as a config import
    archive = zipfile.ZipFile(io.BytesIO(data))
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise _error(f"{len(infos):,} members refused: an exported run holds at most "
                         f"{MAX_MEMBERS:,}")
        (config_member,) = [i for i in infos if i.filename.endswith("/config.json")
                            and i.filename.count("/") == 1]
        prefix = config_member.filename.split("/")[0] + "/"
        document = json.loads(archive.read(config_member))
        found: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            match = TABLE_MEMBER.fullmatch(info.filename)
            if match and info.filename.startswith(prefix) and match["table"] in ROW_TYPES:
                found[match["table"]] = info
        missing = [t for t in ROW_TYPES if t not in found and t not in OPTIONAL_IN_BUNDLES]
        if missing:
            raise _error(f"{prefix}: no {', '.join(t + '.csv' for t in missing)} (an export "
                         "from before this version? import it as a config instead)")
        for info in found.values():  # from the headers, before inflating anything
            if info.file_size > MAX_TABLE_BYTES:
                raise _error(f"{info.filename} refused: {info.file_size:,} bytes once inflated, "
                             f"at most {MAX_TABLE_BYTES:,}")
        total = sum(info.file_size for info in found.values())
        if total > MAX_TOTAL_BYTES:
            raise _error(f"the tables refused: {total:,} bytes once inflated, at most "
                         f"{MAX_TOTAL_BYTES:,} in all")
        tables = {table: _read_table(archive, found[table], table) for table in ROW_TYPES
                  if table in found}
    return ImportedRun(config, document if isinstance(document, dict) else {}, tables)


__all__ = ["BUNDLE_MAX_BYTES", "ImportedRun", "read_run_bundle"]

