"""Where the run store lives and what happens when it cannot be written.

`data_dir()` / `default_store_path()` resolve `$OPTIMIZER_LAB_HOME` (default `~/.optimizer-lab`);
`default_store()` is `$OPTIMIZER_LAB_STORE` (a PostgreSQL URL, `runs.store.connection`) when set,
else that file. `StoreUnavailable` turns SQLite's and the OS's errors for a read-only or full data
directory (and an unreachable PostgreSQL server) into one message that says what to do.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import tempfile
from pathlib import Path


def data_dir() -> Path:
    """The lab's data directory (`$OPTIMIZER_LAB_HOME`, default `~/.optimizer-lab`), created.

    Raises:
        StoreUnavailable: it cannot be created (read-only or full file system).
    """
    path = Path(os.environ.get("OPTIMIZER_LAB_HOME") or Path.home() / ".optimizer-lab")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _unavailable(path / "runs.sqlite", error) or error  # noqa: B904 (same error)
    return path


def default_store_path() -> Path:
    """`<data_dir>/runs.sqlite`."""
    return data_dir() / "runs.sqlite"


STORE_ENV = "OPTIMIZER_LAB_STORE"


def default_store() -> str | Path:
    """Where the store is: `$OPTIMIZER_LAB_STORE` when set (a `postgresql://` URL, or a SQLite
    file), else `default_store_path()`."""
    return os.environ.get(STORE_ENV, "").strip() or default_store_path()


class StoreUnavailable(sqlite3.OperationalError):
    """The store cannot be written (or opened): its data directory is read-only, the disk is
    full, the file cannot be opened, or its PostgreSQL server cannot be reached. The message
    says which, names the directory (or the server) and what to do; pages show it in one
    line (`components.store_guard`) and work again as soon as the directory is writable or
    the server is back (every call opens its own connection)."""


_UNAVAILABLE_ERRORS = ("full", "readonly", "read-only", "unable to open", "disk i/o error")
_FULL_BELOW_BYTES = 1 << 20  # free space under this counts as a full disk


def _directory_state(directory: Path, text: str) -> tuple[str, str]:
    """(what happened, what to do) for the data directory, from the file system itself
    (SQLite often reports a full or read-only disk as `disk I/O error` or `unable to open`)."""
    try:
        stat = os.statvfs(directory)
        read_only = bool(stat.f_flag & os.ST_RDONLY) or not os.access(directory, os.W_OK)
        full = stat.f_bavail * stat.f_frsize < _FULL_BELOW_BYTES
    except OSError:  # the directory itself is gone or unreadable
        read_only, full = False, False
    if read_only or "readonly" in text or "read-only" in text:
        return "is read-only", "make it writable or set OPTIMIZER_LAB_HOME to a writable directory"
    if full or "full" in text:
        return "is on a full disk", ("free space on that disk or set OPTIMIZER_LAB_HOME to a "
                                     "directory on another disk")
    return "cannot be written", ("check that it exists and is writable, or set "
                                 "OPTIMIZER_LAB_HOME to another directory")


def _unavailable(path: Path, error: BaseException) -> StoreUnavailable | None:
    """The `StoreUnavailable` for a SQLite/OS error of the store at `path`, or None when the
    error is something else (e.g. `database is locked`, a bad query)."""
    if isinstance(error, StoreUnavailable) or not isinstance(
            error, (sqlite3.OperationalError, OSError)):
        return None
    text = str(error).lower()
    if isinstance(error, OSError) and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        text += " readonly"
    elif isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        text += " full"
    if not any(key in text for key in _UNAVAILABLE_ERRORS):
        return None
    what, todo = _directory_state(path.parent, text)
    return StoreUnavailable(f"the data directory {path.parent} {what} ({error}): {todo}")


# ----- a run's last words, kept where an unwritable store cannot lose them ----------------------
def last_words_path(store_path: Path | str, run_id: int) -> Path:
    """Where a run whose end could not be written to the store keeps it: the system's temp
    directory, NOT the data directory (that is the directory that could not be written), in a
    folder named after the store's path so two stores never mix."""
    name = str(store_path)  # a PostgreSQL URL names its store as it is; a file by its real path
    name = name if "://" in name else str(Path(name).resolve())
    key = hashlib.sha256(name.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"optimizer-lab-{key}" / f"run-{run_id}.json"


def keep_last_words(store_path: Path | str, run_id: int, status: str, message: str) -> Path | None:
    """Keep `status` and `message` of a run's end for the next stale check
    (`RunStore.mark_stale` reads them instead of "ended without finishing"); returns the file,
    or None when even the temp directory cannot be written."""
    path = last_words_path(store_path, run_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps({"status": status, "message": message}))
        temp.replace(path)
    except OSError:
        return None
    return path


def take_last_words(store_path: Path | str, run_id: int) -> dict[str, str] | None:
    """The end a run kept with `keep_last_words` ({"status", "message"}), removed once read;
    None when there is none (or it cannot be read)."""
    path = last_words_path(store_path, run_id)
    try:
        words = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return None
    if not isinstance(words, dict) or not {"status", "message"} <= set(words):
        return None
    return {"status": str(words["status"]), "message": str(words["message"])[:2000]}
