"""A throwaway PostgreSQL server for the store tests: `initdb` + `pg_ctl` in a temp directory,
listening on a Unix socket in that directory only (no TCP port to collide with), trust auth.

Found where Debian's `postgresql` package puts it (`/usr/lib/postgresql/<major>/bin`, not on
PATH) or on PATH. `initdb` refuses to run as root: as root the server runs as the `postgres`
user the Debian package creates (`runuser -u postgres`); as any other user it runs as that
user. `missing_reason()` says why no server can be started (the tests skip with it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from collections.abc import Iterator

PORT = 5432  # per-socket-directory: no other server listens in our private directory


def binaries() -> Path | None:
    """The directory holding `initdb` and `pg_ctl` (newest Debian major first), or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
                        reverse=True)
    found = shutil.which("initdb")
    for initdb in [*candidates, *([found] if found else [])]:
        folder = Path(initdb).resolve().parent
        if (folder / "pg_ctl").exists():
            return folder
    return None


def _server_user() -> str | None:
    """Who runs the server: None = this user (not root), else `postgres` (root only)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return ""
    return "postgres"


def missing_reason() -> str | None:
    """Why no PostgreSQL server can be started here, or None when one can."""
    if binaries() is None:
        return ("PostgreSQL is not installed (no initdb/pg_ctl in /usr/lib/postgresql/*/bin or "
                "on PATH): apt-get install postgresql")
    if _server_user() == "":
        return "running as root and there is no 'postgres' user to run initdb as"
    if _server_user() and shutil.which("runuser") is None:
        return "running as root and there is no runuser to start initdb as 'postgres'"
    return None


def _run(argv: list[str], user: str | None) -> None:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{done.stdout[-1500:]}{done.stderr[-1500:]}")


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a private server; yield the libpq URL of its `postgres` database; stop and delete
    it afterwards.

    Raises:
        RuntimeError: `initdb` or `pg_ctl` failed (their output in the message).
    """
    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    bin_dir, user = binaries(), _server_user()
    assert bin_dir is not None
    # not under pytest's tmp_path: its folders are 0700 root, which the `postgres` user
    # cannot enter; a short path also keeps the socket under the 107-byte limit
    root = Path(tempfile.mkdtemp(prefix="lab-pg-"))
    if user:
        shutil.chown(root, user=user)
    data = root / "data"
    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
              "-E", "UTF8", "--no-sync", "--no-instructions"], user)
        # fsync off: a test server's data need not survive a power cut, and it is faster
        options = (f"-k {root} -c listen_addresses='' -p {PORT} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
              str(root / "server.log"), "-w", "-t", "60", "start"], user)
        try:
            yield f"postgresql://postgres@/postgres?host={root}&port={PORT}"
        finally:
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                 user)
    finally:
        shutil.rmtree(root, ignore_errors=True)
