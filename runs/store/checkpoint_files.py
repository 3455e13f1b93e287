"""A run's checkpoint as NumPy `.npz` bytes, and as files beside a SQLite store. No TensorFlow.

Beside a SQLite store a run's checkpoint is ONE file, `<store dir>/checkpoints/run-<id>/latest.npz`
(a PostgreSQL store keeps the same bytes in a row: `runs.store.checkpoints` chooses), holding named arrays (the values of every model and optimizer variable,
the data order's RNG state and pending batch indices) and one JSON document `meta` (the step,
the hyperparameter values, the schedule, the variables' names/shapes/dtypes, ...; see
`runs.process.checkpoint`). A continue request is a second small file, `continue.json`, in the
same directory (`write_marker`): the run process that takes the run next finds it and restores
the checkpoint before its first step.

Why `.npz` and not `tf.train.Checkpoint`:

* the server (pages, the CLI, `runs.service.continuing`) must read a checkpoint's step to
  validate a Continue, and it never imports TensorFlow (tests/test_tf_free_server.py); NumPy
  reads the `meta` member of an `.npz` alone, in about a millisecond;
* one file per checkpoint makes an atomic replace one `os.replace` (POSIX rename): a
  `tf.train.Checkpoint` is an index, data shards and a `checkpoint` state file, which cannot be
  swapped in one step, so a kill between them could leave a half-new checkpoint;
* restoring by position with a shape/dtype check of each variable is explicit and does not
  depend on the Python attribute graph `tf.train.Checkpoint` matches by, which changes when a
  live schedule change swaps the optimizer's `learning_rate` object.

`write_atomic` writes a temporary file in the same directory, flushes it to disk (`fsync`) and
renames it over `latest.npz`: a process killed (SIGKILL) mid-write leaves the previous
checkpoint whole (and a stray temporary file, ignored and replaced by the next write). A full
or read-only disk raises `OSError` from the write, the temporary file is removed and the
previous checkpoint stays; the run process reports it and trains on.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import numpy as np


EVERY_ENV = "OPTIMIZER_LAB_CHECKPOINT_EVERY_S"
# Seconds between two checkpoints of a run. 5 s: a server restart or a killed process costs at
# most ~5 s of training, while the write (~1 MB for the default digits MLP with Adam; a few ms,
# see `runs.process.checkpoint`) stays far below 1 % of the run's time.
DEFAULT_EVERY_S = 5.0
EVERY_RANGE_S = (0.1, 3600.0)
LATEST = "latest.npz"
MARKER = "continue.json"
META = "meta"  # the member of the .npz that holds the JSON document
FORMAT = 1  # `meta["format"]`: a reader refuses other versions
FAILED_EVENT = "checkpoint_failed"  # the `run_events` kind of a checkpoint that was not written


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or does not fit the run (the message names the
    run, the file and what is wrong)."""


def every_s() -> float | None:
    """Seconds between two checkpoints of a run: `OPTIMIZER_LAB_CHECKPOINT_EVERY_S` (default
    `DEFAULT_EVERY_S` = 5), in [0.1, 3600]; `0` or `off` turns checkpoints off (None).

    Raises:
        ValueError: another value (the message names the variable and the range).
    """
    raw = os.environ.get(EVERY_ENV, "").strip().lower()
    if raw in ("0", "off"):
        return None
    if not raw:
        return DEFAULT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    low, high = EVERY_RANGE_S
    if not low <= value <= high:
        raise ValueError(f"{EVERY_ENV}={raw!r} refused: must be a number of seconds in "
                         f"[{low:g}, {high:g}], or 0 / off for no checkpoints")
    return value


def run_dir(store_path: str | os.PathLike, run_id: int) -> Path:
    """`<directory of the SQLite store file>/checkpoints/run-<id>` (not created)."""
    return Path(store_path).parent / "checkpoints" / f"run-{int(run_id)}"


def latest_path(store_path: str | os.PathLike, run_id: int) -> Path:
    """The run's checkpoint file, `run_dir(...)/latest.npz` (it may not exist)."""
    return run_dir(store_path, run_id) / LATEST


def encode(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> bytes:
    """One checkpoint as the bytes of an uncompressed `.npz`: `arrays` and the JSON document
    `meta` (member `META`).

    Raises:
        ValueError: an array is named `META` (reserved for the document).
    """
    if META in arrays:
        raise ValueError(f"array name {META!r} refused: it is reserved for the JSON document")
    buffer = io.BytesIO()
    # uncompressed: the weights of a small model do not compress much and zlib would cost more
    # time than the write it saves
    members = {META: np.array(json.dumps(dict(meta))), **arrays}
    # NumPy's stubs type `**kwds` like its `allow_pickle: bool` keyword
    np.savez(buffer, **members)  # type: ignore[arg-type]
    return buffer.getvalue()


def write_atomic(path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> int:
    """Write one checkpoint (`encode`), replacing the file `path` atomically.

    Args:
        path: the checkpoint file (`latest_path`); its directory is created.
        arrays: name -> array (any dtype NumPy saves without pickling); `META` is reserved.
        meta: a JSON-serialisable document.

    Returns:
        The size of the file written, in bytes.

    Raises:
        OSError: the directory or the file could not be written (e.g. ENOSPC on a full disk):
            the temporary file is removed and the previous checkpoint at `path` is unchanged.
    """
    data = encode(arrays, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename makes it the latest
        os.replace(temporary, path)
    except BaseException:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise
    try:  # the rename itself reaches the disk (a power cut would otherwise undo it)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:
        pass  # a file system without directory fsync: the rename is still atomic
    return len(data)


def read_meta(source: Path | bytes, where: str = "") -> dict[str, Any]:
    """The JSON document of a checkpoint (its arrays are not read).

    Args:
        source: the checkpoint file, or its bytes (`encode`).
        where: how messages name a checkpoint given as bytes (default: the path).

    Raises:
        CheckpointError: no such file, not a checkpoint, or another format version.
    """
    where = where or str(source)
    try:
        with np.load(_readable(source), allow_pickle=False) as data:
            meta = json.loads(str(data[META]))
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {where}") from None
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"the checkpoint {where} cannot be read ({error})") from None
    return checked_meta(meta, where)


def checked_meta(meta: dict[str, Any], where: str) -> dict[str, Any]:
    """`meta` when its format is the one this version reads.

    Raises:
        CheckpointError: another format version (names `where`).
    """
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"the checkpoint {where} has format {meta.get('format')!r}; this "
                              f"version reads format {FORMAT}")
    return meta


def read(source: Path | bytes, where: str = "") -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) of a checkpoint (a file or its bytes; `where` as for `read_meta`).

    Raises:
        CheckpointError: as `read_meta`, or an array cannot be read.
    """
    where = where or str(source)
    meta = read_meta(source, where)
    try:
        with np.load(_readable(source), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if name != META}
    except (OSError, ValueError) as error:
        raise CheckpointError(f"the checkpoint {where} cannot be read ({error})") from None
    return meta, arrays


def _readable(source: Path | bytes) -> Path | io.BytesIO:
    return io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else source


def write_marker(store_path: str | os.PathLike, run_id: int, info: Mapping[str, Any]) -> Path:
    """Ask the next process that takes run `run_id` to restore its checkpoint first: writes
    `continue.json` (`info`, JSON) atomically; returns its path.

    Raises:
        OSError: it could not be written.
    """
    path = run_dir(store_path, run_id) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{MARKER}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(dict(info)))
    os.replace(temporary, path)
    return path


def read_marker(store_path: str | os.PathLike, run_id: int) -> dict[str, Any] | None:
    """The continue request of run `run_id`, or None when there is none."""
    try:
        return json.loads((run_dir(store_path, run_id) / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"the continue request of run {run_id} cannot be read "
                              f"({error})") from None


def drop_marker(store_path: str | os.PathLike, run_id: int) -> None:
    """Remove the continue request of run `run_id` (none is fine)."""
    try:
        (run_dir(store_path, run_id) / MARKER).unlink()
    except FileNotFoundError:
        pass


def discard(store_path: str | os.PathLike, run_id: int) -> None:
    """Remove every checkpoint file of run `run_id` (a finished, diverged or deleted run can no
    longer be continued; ~1 MB each for the default run)."""
    shutil.rmtree(run_dir(store_path, run_id), ignore_errors=True)
