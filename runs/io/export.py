"""Export one run of the store: config JSON, metric tables (CSV + Parquet), TensorBoard events, zip.

Layout written by `export_run(store, run_id, out_dir)` (`<out>` = `out_dir/run-<id>`):

* `<out>/config.json`: `export_config(run)`: format tag, the `RunConfig`, the optimizer's
  registry name, class name and `get_config()`, dataset, model, batch size, steps, seed, device,
  library versions. `settings.config_file.parse_config` reads it back into the same `RunConfig`.
* `<out>/metrics.csv|.parquet`: the wide table, one row per recorded step (step 0 = before
  training), one column per scalar (`train_loss`, `val_loss`, `val_accuracy`, ...) and one
  `hyper/<name>` column per hyperparameter holding the value in effect at that step.
* `<out>/scalars|slot_stats|hyper_changes|histograms|hypergradients|response_slices|
  diagnostics|lr_range|landscape.csv|.parquet`: the long tables as stored (`lr_range`: the
  learning-rate range tests' rows; `landscape`: the grid, path and line of the landscape along
  the path; histogram `counts` are a JSON list in the CSV, a list column in Parquet).
* `<out>/tensorboard/run-<id>-<optimizer>/events.out.tfevents...`: the events `tf.summary`
  writes, built as TensorBoard protos and written as one TFRecord file (no op per row): scalar
  `metrics/<name>` for every scalar, `hyper/<name>` for every hyperparameter (its step
  function sampled at every recorded step and every change),
  `slots/<variable>/<slot>/<norm|mean|std>`, `hypergrad/<name>/<exact|one_step|reverse>`,
  `diagnostics/<name>[/<variable>]` (sharpness, thresholds, update ratios, noise scale),
  histogram `hist/<variable>/<slot>` for every
  stored (variable, slot) snapshot (the stored equal-width buckets written as they are, with the
  histogram plugin's metadata), and the config as text `config`.
  `tensorboard --logdir <out_dir>` shows every exported run side by side.
* `<out_dir>/run-<id>.zip`: all of the above.

Import: `parse_import(data)` / `load_import(path)` take a config JSON or such a zip ("bundle");
of a bundle only its one `run-<id>/config.json` is read, size-checked before decompressing and
CRC-checked, then parsed by `settings.config_file` (nothing in it is executed or unpickled).

Never imports Streamlit or TensorFlow (`RecordFile` writes the TensorBoard events).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import socket
import struct
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pandas as pd

from optimizers import registry
from settings.run_config import RunConfig
from settings.config_file import MAX_BYTES, ConfigImportError, parse_config
from runs.store.run_store import RunStore

FORMAT = "optimizer-lab/run-config"
FORMAT_VERSION = 1
# An exported zip holds tables and TensorBoard events besides the config: a larger limit than
# a config JSON's `MAX_BYTES`, still checked before the archive is opened.
BUNDLE_MAX_BYTES = 16 * 1024 * 1024
BUNDLE_CONFIG = re.compile(r"run-[0-9]+/config\.json")  # the one member an import reads
ZIP_MAGIC = b"PK"
SCALAR_ORDER = ("train_loss", "val_loss", "val_accuracy")  # first in the wide table, in this order


@dataclass(frozen=True)
class ExportPaths:
    """Where `export_run` wrote a run (all absolute paths)."""

    directory: Path  # <out_dir>/run-<id>
    config: Path  # config.json
    tables: dict[str, Path]  # "metrics", "scalars", ... -> the .csv (a .parquet sits beside it)
    logdir: Path  # the TensorBoard run directory holding the event file
    zip: Path  # <out_dir>/run-<id>.zip


def export_config(run: dict[str, Any]) -> dict[str, Any]:
    """The config document of a run (`store.run(id)`), JSON-ready.

    Keys: `format`, `format_version`, `run_id`, `name`, `run_config` (the `RunConfig` dict, the
    part an import uses), `optimizer` {`name`, `class_name`, `config` = `get_config()`},
    `dataset`, `model`, `batch_size`, `steps`, `seed`, `device`, `versions`, `status`,
    `exported` (Unix seconds).
    """
    config = run["config"]
    name = config["optimizer"]
    try:
        class_name = registry.class_name(name)  # from the catalog: no class import
    except KeyError:
        class_name = ""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run_id": int(run["id"]),
        "name": run.get("name", ""),
        "run_config": config,
        "optimizer": {"name": name, "class_name": class_name,
                      "config": run.get("optimizer_config") or {}},
        "dataset": config["dataset"],
        "model": config["model"],
        "batch_size": config.get("batch_size"),
        "steps": config["steps"],
        "seed": config["seed"],
        "device": run.get("device", ""),
        "versions": run.get("versions") or {},
        "status": run.get("status", ""),
        "exported": time.time(),
    }


def hyper_values_at(changes: pd.DataFrame, steps: Any) -> pd.DataFrame:
    """The value of every hyperparameter in effect at each of `steps` (a step-function lookup).

    Args:
        changes: `step, name, new` rows (`store.hyper_changes`); a row at step s takes effect
            at step s. Steps before a hyperparameter's first row take its first value.
        steps: 1-D int steps (any order).

    Returns:
        DataFrame indexed by `steps`, one float column `hyper/<name>` per hyperparameter.
    """
    steps = np.asarray(list(steps), dtype=np.int64)
    out = pd.DataFrame(index=pd.Index(steps, name="step"))
    if changes is None or changes.empty:
        return out
    for name, rows in changes.groupby("name", sort=False):
        at = rows["step"].to_numpy(dtype=np.int64)
        values = rows["new"].to_numpy(dtype=float)
        # the last change with change.step <= step (stable: later rows at one step win)
        index = np.searchsorted(at, steps, side="right") - 1
        out[f"hyper/{name}"] = values[np.clip(index, 0, len(values) - 1)]
    return out


def wide_metrics(scalars: pd.DataFrame, changes: pd.DataFrame) -> pd.DataFrame:
    """One row per recorded step: the scalars as columns plus `hyper/<name>` columns.

    Args:
        scalars: `step, name, value` long table.
        changes: `step, name, new` hyperparameter changes.

    Returns:
        DataFrame with a `step` column (ascending, unique), then `SCALAR_ORDER`, then other
        scalars in order of first appearance, then `hyper/<name>`; NaN where a scalar was not
        recorded at a step.
    """
    if scalars.empty:
        return pd.DataFrame({"step": pd.Series([], dtype="int64")})
    seen = list(dict.fromkeys(scalars["name"]))
    names = [n for n in SCALAR_ORDER if n in seen] + [n for n in seen if n not in SCALAR_ORDER]
    wide = scalars.pivot_table(index="step", columns="name", values="value", aggfunc="last")
    wide = wide.reindex(columns=names).sort_index()
    wide.columns.name = None
    wide = wide.join(hyper_values_at(changes, wide.index))
    return wide.reset_index().astype({"step": "int64"})


def _write_table(frame: pd.DataFrame, path: Path) -> Path:
    csv = path.with_suffix(".csv")
    flat = frame.copy()
    if "counts" in flat:
        flat["counts"] = flat["counts"].map(json.dumps)
    flat.to_csv(csv, index=False)
    frame.to_parquet(path.with_suffix(".parquet"), index=False)
    return csv


def all_histograms(store: RunStore, run_id: int, stats: pd.DataFrame) -> pd.DataFrame:
    """Every histogram row of a run: `step, variable, slot, lo, hi, counts` (counts as lists)."""
    frames = []
    for variable, slot in dict.fromkeys(zip(stats["variable"], stats["slot"])):
        frame = store.histograms(run_id, variable, slot)
        if not frame.empty:
            frame.insert(1, "variable", variable)
            frame.insert(2, "slot", slot)
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["step", "variable", "slot", "lo", "hi", "counts"])
    return pd.concat(frames, ignore_index=True).sort_values(["step", "variable", "slot"],
                                                            kind="stable", ignore_index=True)


def histogram_buckets(lo: float, hi: float, counts: list[int] | np.ndarray) -> np.ndarray:
    """TensorBoard buckets `[k, 3]` = (left edge, right edge, count) of one stored histogram.

    The stored histogram has `len(counts)` equal-width bins between `lo` and `hi`; a flat
    snapshot (`lo == hi`) becomes one bucket `[lo, hi, total]` (TensorBoard's own convention for
    a constant tensor).
    """
    counts = np.asarray(counts, dtype=np.float64)
    if not hi > lo:
        return np.array([[lo, hi, counts.sum()]], dtype=np.float64)
    edges = np.linspace(lo, hi, len(counts) + 1)
    return np.column_stack([edges[:-1], edges[1:], counts])


def _tag(*parts: str) -> str:
    return "/".join(p.replace(" ", "_") for p in parts)


class RecordFile:
    """A TFRecord file, as `tf.io.TFRecordWriter` writes it, without TensorFlow (the server
    exports from the Runs page and must not import it: ~4-5 s and ~750 MB on the first export).

    Each record (TFRecord format, tensorflow/core/lib/io/record_writer.h): the data's length as
    a little-endian uint64, that header's masked CRC-32C, the data, the data's masked CRC-32C
    (uint32 each). The CRC is google-crc32c's C code: TensorBoard's own `RecordWriter` frames
    the same way but computes CRC-32C in pure Python (~24 us per 80-byte event here, 4.7 s for
    the ~200,000 events of a 50,000-step run, against 0.06 s).

    Args:
        path: the file, created or truncated.
    """

    def __init__(self, path: Path):
        self._file = open(path, "wb")

    @staticmethod
    def masked_crc(data: bytes) -> int:
        """CRC-32C of `data`, rotated right by 15 bits plus 0xa282ead8 (mod 2**32): TFRecord's
        masking (tensorflow/core/lib/hash/crc32c.h, `Mask`)."""
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    def write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", self.masked_crc(header)) + data
                         + struct.pack("<I", self.masked_crc(data)))

    def close(self) -> None:
        self._file.close()


def write_tensorboard(
    logdir: Path, config: dict[str, Any], scalars: pd.DataFrame, changes: pd.DataFrame,
    stats: pd.DataFrame, histograms: pd.DataFrame,
    hypergradients: pd.DataFrame | None = None, diagnostics: pd.DataFrame | None = None,
) -> Path:
    """Write one run's TensorBoard event file into `logdir` (created); returns `logdir`.

    Tags: see the module docstring. The events are the ones `tf.summary` writes (scalars as
    float32 tensors with the scalars plugin's metadata, histograms as `[k, 3]` float64 tensors
    (left, right, count) with the histogram plugin's, the config as text), but built as protos
    and written with TensorBoard's own `EventFileWriter`: no TensorFlow op per row (one eager
    `tf.summary.scalar` per row made a 50,000-step run's export take minutes;
    `bench/bench_export.py`).
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.plugins.histogram import metadata as histogram_metadata
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.plugins.text import metadata as text_metadata
    from tensorboard.util import tensor_util

    logdir.mkdir(parents=True, exist_ok=True)
    wall_time = time.time()
    path = logdir / f"events.out.tfevents.{int(wall_time)}.{socket.gethostname()}.{os.getpid()}"
    writer = RecordFile(path)
    writer.write(event_pb2.Event(wall_time=wall_time,
                                 file_version="brain.Event:2").SerializeToString())
    first_of: set[str] = set()

    def emit(tag: str, step: int, tensor, metadata) -> None:
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
        if tag not in first_of:  # like tf.summary: the metadata rides on a tag's first event
            first_of.add(tag)
            value.metadata.CopyFrom(metadata)
        writer.write(event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(
            value=[value])).SerializeToString())

    scalar_shape = tensor_shape_pb2.TensorShapeProto()  # rank 0, as tf.summary.scalar writes

    def series(tag: str, steps, values) -> None:
        metadata = scalar_metadata.create_summary_metadata(display_name=tag, description="")
        for step, value in zip(steps, np.asarray(values, dtype=np.float32).tolist()):
            tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=scalar_shape,
                                            float_val=[value])
            emit(tag, int(step), tensor, metadata)

    emit("config", 0, tensor_util.make_tensor_proto(json.dumps(config, indent=2)),
         text_metadata.create_summary_metadata(display_name="config", description=""))
    for name, rows in scalars.groupby("name", sort=False):
        series(_tag("metrics", name), rows["step"], rows["value"])
    hyper_steps = sorted(set(scalars["step"]) | set(changes["step"]))
    hypers = hyper_values_at(changes, hyper_steps if not changes.empty else [])
    for column in hypers.columns:
        series(column, hypers.index, hypers[column])
    for (variable, slot), rows in stats.groupby(["variable", "slot"], sort=False):
        for column in ("norm", "mean", "std"):
            series(_tag("slots", variable, slot, column), rows["step"], rows[column])
    if hypergradients is not None and not hypergradients.empty:
        for name, rows in hypergradients.groupby("name", sort=False):
            for column in ("exact", "one_step", "reverse"):
                kept = rows.dropna(subset=[column])
                series(_tag("hypergrad", name, column), kept["step"], kept[column])
    if diagnostics is not None and not diagnostics.empty:
        for (name, variable), rows in diagnostics.groupby(["name", "variable"], sort=False):
            kept = rows.dropna(subset=["value"])
            series(_tag("diagnostics", name, *([variable] if variable else [])), kept["step"],
                   kept["value"])
    for (variable, slot), rows in histograms.groupby(["variable", "slot"], sort=False):
        metadata = histogram_metadata.create_summary_metadata(
            display_name=f"{slot} of {variable}", description="stored run-store histogram")
        for step, lo, hi, counts in zip(rows["step"], rows["lo"], rows["hi"], rows["counts"]):
            emit(_tag("hist", variable, slot), int(step),
                 tensor_util.make_tensor_proto(histogram_buckets(lo, hi, counts)), metadata)
    writer.close()
    return logdir


def export_run(store: RunStore, run_id: int, out_dir: str | os.PathLike,
               tensorboard: bool = True) -> ExportPaths:
    """Export run `run_id` into `out_dir/run-<id>` and zip it to `out_dir/run-<id>.zip`.

    An earlier export of the same run in `out_dir` is replaced (its TensorBoard run directory
    too, so `tensorboard --logdir out_dir` shows one curve per run). Everything is written into
    a private staging directory in `out_dir` first and then moved into place (the zip with one
    atomic `os.replace`, the directory by `_move_into_place`), so exports of the same run
    running at once (two sessions, two threads) never see each other's half-written files.

    Raises:
        KeyError: no run `run_id` in the store.
        OSError: `out_dir` cannot be written.
    """
    run = store.run(run_id)
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".export-run-{run_id}-", dir=out_dir))
    try:
        written = _write_export(store, run, run_id, staging, tensorboard)
        directory = out_dir / f"run-{run_id}"
        zip_path = out_dir / f"run-{run_id}.zip"
        _move_into_place(written.directory, directory)
        os.replace(written.zip, zip_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tables = {k: directory / v.relative_to(written.directory) for k, v in written.tables.items()}
    return ExportPaths(directory, directory / "config.json", tables,
                       directory / written.logdir.relative_to(written.directory), zip_path)


def _move_into_place(staged: Path, target: Path, attempts: int = 20) -> None:
    """Rename the directory `staged` to `target`, first renaming any existing `target` aside
    (to a unique name in the same directory, then deleted); retried when another export put
    its own directory there in between.

    Raises:
        OSError: still not in place after `attempts` tries.
    """
    for _ in range(attempts):
        aside = target.with_name(f".{target.name}-old-{os.getpid()}-{time.monotonic_ns()}")
        old: Path | None = aside
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            old = None
        try:
            os.rename(staged, target)  # atomic; fails when another export got there first
            return
        except OSError as error:
            if not isinstance(error, (FileExistsError, IsADirectoryError)) and \
                    error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    raise OSError(f"could not move the export into {target}: other exports kept replacing it")


def _write_export(store: RunStore, run: dict[str, Any], run_id: int, out_dir: Path,
                  tensorboard: bool) -> ExportPaths:
    """Write the export of `run` into `out_dir` (a fresh directory): see the module docstring."""
    directory = out_dir / f"run-{run_id}"
    directory.mkdir(parents=True)
    document = export_config(run)
    config_path = directory / "config.json"
    config_path.write_text(json.dumps(document, indent=2, sort_keys=False))

    scalars = store.scalars(run_id)
    changes = store.hyper_changes(run_id)
    stats = store.slot_stats(run_id)
    histograms = all_histograms(store, run_id, stats)
    hypergradients = store.hypergradients(run_id)
    diagnostics = store.diagnostics(run_id)
    tables = {
        "metrics": _write_table(wide_metrics(scalars, changes), directory / "metrics"),
        "scalars": _write_table(scalars, directory / "scalars"),
        "slot_stats": _write_table(stats, directory / "slot_stats"),
        "hyper_changes": _write_table(changes, directory / "hyper_changes"),
        "histograms": _write_table(histograms, directory / "histograms"),
        "hypergradients": _write_table(hypergradients, directory / "hypergradients"),
        "response_slices": _write_table(store.response_slices(run_id),
                                        directory / "response_slices"),
        "diagnostics": _write_table(diagnostics, directory / "diagnostics"),
        "lr_range": _write_table(store.lr_range(run_id), directory / "lr_range"),
        "landscape": _write_table(store.landscape(run_id), directory / "landscape"),
    }
    logdir = directory / "tensorboard" / f"run-{run_id}-{run['config']['optimizer']}"
    if tensorboard:
        write_tensorboard(logdir, document, scalars, changes, stats, histograms, hypergradients,
                          diagnostics)
    zip_path = out_dir / f"run-{run_id}.zip"
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(out_dir).as_posix())
    return ExportPaths(directory, config_path, tables, logdir, zip_path)


# ----- import ----------------------------------------------------------------------------------
def _bundle_error(message: str) -> ConfigImportError:
    return ConfigImportError("bundle", message)


def read_bundle(data: bytes) -> RunConfig:
    """The `RunConfig` of an exported run zip (`run-<id>.zip` as `export_run` writes it).

    Raises:
        ConfigImportError: field `bundle`: larger than `BUNDLE_MAX_BYTES`, not a zip or
            truncated, no or several `run-<id>/config.json`, that member larger than
            `config_io.MAX_BYTES` once decompressed, or corrupted (CRC or deflate error);
            otherwise as `config_io.parse_config` for the config itself.
    """
    if len(data) > BUNDLE_MAX_BYTES:
        raise _bundle_error(f"file refused: {len(data):,} bytes, an exported run zip may hold "
                            f"at most {BUNDLE_MAX_BYTES:,} bytes")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError,
            NotImplementedError) as error:  # NotImplementedError: an unknown zip version
        raise _bundle_error(f"not a readable zip archive, truncated or corrupted ({error})") \
            from None
    with archive:
        members = [m for m in archive.infolist() if BUNDLE_CONFIG.fullmatch(m.filename)]
        if len(members) != 1:
            raise _bundle_error(f"an exported run zip holds exactly one run-<id>/config.json; "
                                f"this one holds {len(members)}")
        (member,) = members
        if member.file_size > MAX_BYTES:  # the header's size, before decompressing anything
            raise _bundle_error(f"{member.filename} refused: {member.file_size:,} bytes, a "
                                f"config file may hold at most {MAX_BYTES:,} bytes")
        try:
            with archive.open(member) as handle:
                text = handle.read(MAX_BYTES + 1)  # never more, whatever the header claims
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError,
                RuntimeError) as error:  # CRC, deflate stream, cut member, encryption
            raise _bundle_error(f"{member.filename} is corrupted ({error})") from None
    return parse_config(text)


def parse_import(data: bytes) -> RunConfig:
    """A `RunConfig` from an uploaded or given file: an exported run zip or a config JSON.

    Raises:
        ConfigImportError: as `read_bundle` (zip) or `config_io.parse_config` (anything else).
    """
    return read_bundle(data) if data[:2] == ZIP_MAGIC else parse_config(data)


def load_import(path: str | os.PathLike) -> RunConfig:
    """Read and import a file (`parse_import`); at most `BUNDLE_MAX_BYTES` + 1 bytes are read.

    Raises:
        ConfigImportError: as `parse_import`.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(BUNDLE_MAX_BYTES + 1)
    return parse_import(data)
