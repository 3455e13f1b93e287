"""The logical devices a local run host sees, written for the server beside the store.

A run host imports TensorFlow and configures the GPUs as every run does; it writes the names of
the logical devices it then lists to `<data dir>/devices.json`, with its pid and start time, so
that the server (which never imports TensorFlow) can offer them without a TensorFlow child of
its own (`components.device_list`). The file counts only while its writer lives: a file left
by a host of an earlier boot or server is ignored. No TensorFlow imported here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from runs.store import files
from runs.store.connection import data_dir_of
from runs.store.processes import process_start, same_process_alive

FILE_NAME = "devices.json"


def write(data_dir: Path, names: list[str]) -> None:
    """Write this process's device `names` (e.g. `/device:CPU:0`) to `data_dir / FILE_NAME`,
    replaced whole (a reader never sees half a file). A data directory that cannot be written
    is skipped: the server then starts its own probe."""
    pid = os.getpid()
    body = json.dumps({"names": list(names), "pid": pid, "pid_start": process_start(pid)})
    target = Path(data_dir) / FILE_NAME
    partial = target.with_name(f".{FILE_NAME}.{pid}")
    try:
        partial.write_text(body)
        os.replace(partial, target)
    except OSError:
        pass


def read(data_dir: Path) -> tuple[str, ...] | None:
    """The device names a live writer left in `data_dir`, or None: no file, an unreadable
    one, no names, or a writer that is gone (`runs.store.processes.same_process_alive`)."""
    try:
        found = json.loads((Path(data_dir) / FILE_NAME).read_text())
        names, pid, start = found["names"], found["pid"], found["pid_start"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names) if same_process_alive(pid, start) else None


def default_data_dir() -> Path:
    """The data directory of the default store (`RunStore().data_dir`), without opening it:
    the SQLite file's folder, or `$OPTIMIZER_LAB_HOME` for a PostgreSQL store."""
    return data_dir_of(files.default_store())


__all__ = ["FILE_NAME", "default_data_dir", "read", "write"]
