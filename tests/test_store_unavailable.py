"""A full disk or a read-only data directory: the store raises `StoreUnavailable` saying what
happened and what to do, a page shows one line instead of a traceback and recovers without a
restart, and a run that loses its store records why as soon as it can.

The real cases run on a small tmpfs mounted for the test (full: filled with a file; read-only:
remounted `ro`, or bind-mounted over itself read-only while a run process holds its log open);
they are skipped where mounting is not allowed. One case simulates the error by making
`sqlite3.connect` raise, so that the translation is tested everywhere.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from runs.store.files import StoreUnavailable, data_dir
from runs.store.run_store import RunStore

CONFIG = {"optimizer": "adam", "dataset": "moons", "model": "mlp", "seed": 0, "steps": 10}


# ----- a small real file system ---------------------------------------------------------------
def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture()
def small_disk(tmp_path):
    """A 16 MB tmpfs at `tmp_path/disk` (skipped when this machine does not allow mounting);
    unmounted (made writable first) at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk))
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"cannot mount a tmpfs here: {getattr(error, 'stderr', error)}")
    try:
        yield disk
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], capture_output=True)
        subprocess.run(["umount", str(disk)], check=True, capture_output=True)


def fill(disk: Path) -> Path:
    """Fill the file system of `disk` to the last byte with one file; returns that file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError:
                continue
    return filler


def read_only(disk: Path, on: bool) -> None:
    _mount("-o", f"remount,{'ro' if on else 'rw'}", str(disk))


# ----- the store --------------------------------------------------------------------------------
def test_full_disk_raises_store_unavailable_and_recovers(small_disk):
    store = RunStore(small_disk / "runs.sqlite")
    run_id = store.create_run(CONFIG)
    filler = fill(small_disk)
    with pytest.raises(StoreUnavailable) as caught:
        store.append(run_id, scalars=[(s, "train_loss", 1.0) for s in range(1, 20_001)])
    message = str(caught.value)
    assert f"the data directory {small_disk} is on a full disk" in message
    assert "free space" in message and "OPTIMIZER_LAB_HOME" in message
    assert isinstance(caught.value, sqlite3.OperationalError)  # old handlers still catch it
    filler.unlink()  # space again: the same store object works, nothing to restart
    store.append(run_id, scalars=[(s, "train_loss", 1.0) for s in range(1, 2001)], step=2000)
    assert len(store.scalars(run_id)) == 2000 and store.run(run_id)["step"] == 2000


def test_read_only_directory_raises_store_unavailable_and_recovers(small_disk, monkeypatch):
    store = RunStore(small_disk / "runs.sqlite")
    run_id = store.create_run(CONFIG)
    read_only(small_disk, True)
    for call in (lambda: store.set_status(run_id, "failed", "x"), lambda: store.runs(),
                 lambda: RunStore(small_disk / "runs.sqlite"),
                 lambda: RunStore(small_disk / "new" / "runs.sqlite")):
        with pytest.raises(StoreUnavailable, match=r"is read-only .*make it writable or set "
                                                   r"OPTIMIZER_LAB_HOME"):
            call()
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(small_disk / "home"))
    with pytest.raises(StoreUnavailable, match=f"the data directory {small_disk}/home is read-only"):
        data_dir()
    read_only(small_disk, False)
    assert store.set_status(run_id, "failed", "x") and store.run(run_id)["status"] == "failed"
    assert data_dir() == small_disk / "home"


def test_simulated_full_disk_on_connect_is_translated(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs.sqlite")

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite3, "connect", full)
    with pytest.raises(StoreUnavailable, match=r"database or disk is full\): free space"):
        store.runs()
    monkeypatch.undo()
    assert store.runs().empty


def test_other_operational_errors_are_not_translated(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    with pytest.raises(sqlite3.OperationalError) as caught:
        store.records.frame("SELECT nothing FROM nowhere", ())
    assert not isinstance(caught.value, StoreUnavailable)


# ----- a page -----------------------------------------------------------------------------------
def _page(path: str) -> None:
    import streamlit as st

    from components.store_guard import guard_page, store_guard
    from runs.store.run_store import RunStore

    @guard_page
    def body() -> None:
        store = RunStore(path)
        st.write(f"runs: {len(store.runs())}")

    body()
    with store_guard():
        RunStore(path).create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                                   "seed": 0, "steps": 10})
    with store_guard():
        st.write(f"after: {len(RunStore(path).runs())}")


def test_page_shows_one_line_and_recovers_without_restart(small_disk):
    from streamlit.testing.v1 import AppTest

    path = str(small_disk / "runs.sqlite")
    RunStore(path)
    read_only(small_disk, True)
    app = AppTest.from_function(_page, args=(path,), default_timeout=30).run()
    assert not app.exception
    assert len(app.error) == 3
    for error in app.error:
        assert "The run store is unavailable" in error.value and "read-only" in error.value
        assert "\n" not in error.value  # one line, no traceback
    assert [m.value for m in app.markdown] == []
    read_only(small_disk, False)
    app.run()  # the next rerun works: nothing was cached on failure
    assert not app.exception and not app.error
    assert [m.value for m in app.markdown] == ["runs: 0", "after: 1"]


# ----- a run process ----------------------------------------------------------------------------
def _lose_the_store(disk: Path, how: str, seconds: float) -> None:
    """Make the data directory `disk` unwritable for `seconds`: `full` fills its file system;
    `read-only` mounts it over itself read-only (a bind mount: the run's open log file, opened
    through the first mount, stays writable, so `remount,ro` of the tmpfs itself would be
    refused as busy)."""
    if how == "full":
        filler = fill(disk)
        time.sleep(seconds)
        filler.unlink()
        return
    _mount("--bind", str(disk), str(disk))
    try:
        _mount("-o", "remount,ro,bind", str(disk))
        time.sleep(seconds)
    finally:
        for _ in range(50):  # busy while a store connection of the run is open: retry
            if subprocess.run(["umount", str(disk)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("how, what", [("full", "is on a full disk"),
                                       ("read-only", "is read-only")])
def test_run_that_loses_its_store_fails_with_the_reason(small_disk, monkeypatch, how, what):
    from runs.service import control, pool, waiting
    from settings.run_config import RunConfig

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(small_disk))
    store = RunStore(small_disk / "runs.sqlite")
    config = RunConfig(dataset="moons", model="logistic", steps=500_000, eval_every=1000)
    run_id = control.start_run(config, store)
    try:
        waiting.wait_for_step(store, run_id, 5, timeout_s=180)
        _lose_the_store(small_disk, how, 5.0)  # the run's next flush fails; it retries its end
        run = waiting.wait_for_status(store, run_id, "failed", timeout_s=60)
        assert "StoreUnavailable" in run["message"] and "after step" in run["message"]
        assert f"{small_disk} {what}" in run["message"], run["message"]
        assert "OPTIMIZER_LAB_HOME" in run["message"]
        pool._PROCESSES[run_id].wait(timeout=60)
        assert pool._PROCESSES[run_id].returncode == 1
        log = pool.log_path(store, run_id).read_text(errors="replace")
        assert "Traceback" not in log
        if how == "read-only":  # the log was writable: the reason is there too
            assert f"{small_disk} {what}" in log
    finally:
        proc = pool._PROCESSES.get(run_id)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        pool.reap()


@pytest.mark.parametrize("page", ["train", "runs", "hypergrad"])
def test_pages_show_one_line_when_the_store_is_unavailable(page, tmp_path, monkeypatch):
    """Every page that reads the store shows the reason in one line, not a traceback."""
    from runs.store.files import StoreUnavailable
    from runs.store.run_store import RunStore
    from tests._pages import page_test

    def unavailable(self, *args, **kwargs):
        raise StoreUnavailable(f"the data directory {tmp_path} is read-only (attempt to write "
                               "a readonly database): make it writable or set OPTIMIZER_LAB_HOME")

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    monkeypatch.setattr(RunStore, "runs", unavailable)
    at = page_test(page, default_timeout=120).run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error if "is read-only" in e.value], [e.value for e in at.error]


def test_an_end_the_store_never_took_is_shown_by_the_next_stale_check(tmp_path, monkeypatch):
    """A store unwritable past the run's retry window: the run's end is kept outside the data
    directory and the next stale check writes it, instead of "ended without finishing"."""
    from runs.process.run_session import record_end
    from runs.store.files import last_words_path

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run(CONFIG)
    reason = (f"failed after step 7: StoreUnavailable: the data directory {tmp_path} is "
              "read-only")

    def unwritable(*args, **kwargs):
        raise StoreUnavailable(f"the data directory {tmp_path} is read-only")

    monkeypatch.setattr(store, "set_status", unwritable)
    assert record_end(store, run_id, "failed", reason, retry_s=0.0) is False
    kept = last_words_path(store.path, run_id)
    assert kept.exists() and str(tmp_path) not in str(kept.parent)
    monkeypatch.undo()
    # the process is gone: a pid that cannot be alive
    store.update_run(run_id, pid=2 ** 22 + 1)
    assert store.set_status(run_id, "running")
    assert store.mark_interrupted() == [run_id]
    run = store.run(run_id)
    assert (run["status"], run["message"]) == ("failed", reason)
    assert not kept.exists()  # taken once
    other = store.create_run(CONFIG)  # a run with no last words keeps the plain message
    store.update_run(other, pid=2 ** 22 + 1)
    store.set_status(other, "running")
    store.mark_interrupted()
    assert store.run(other)["message"] == "the run process ended without finishing"


# ----- PostgreSQL ---------------------------------------------------------------------------------
def test_an_unreachable_postgres_server_is_store_unavailable(tmp_path, monkeypatch):
    """No server at the URL: `StoreUnavailable` (still a `sqlite3.OperationalError` for the
    handlers that catch that) naming the store, the driver's reason and the setting."""
    pytest.importorskip("psycopg")
    from runs.store import connection

    monkeypatch.setattr(connection, "POOL_TIMEOUT_S", 0.5)
    url = f"postgresql://lab:secret@/lab?host={tmp_path}&port=5432"  # no server listens there
    with pytest.raises(StoreUnavailable) as caught:
        RunStore(url)
    text = str(caught.value)
    assert isinstance(caught.value, sqlite3.OperationalError)
    assert "the PostgreSQL store postgresql://lab:***@/lab" in text and "secret" not in text
    assert str(tmp_path) in text and "No such file or directory" in text
    assert "OPTIMIZER_LAB_STORE" in text


def test_a_missing_postgres_database_recovers_without_restart(postgres_url, monkeypatch):
    import psycopg

    from runs.store import connection

    monkeypatch.setattr(connection, "POOL_TIMEOUT_S", 0.5)
    url = postgres_url.replace("/postgres?", "/lab_comes_later?")
    with pytest.raises(StoreUnavailable, match='database "lab_comes_later" does not exist'):
        RunStore(url)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE lab_comes_later")
    try:
        store = RunStore(url)  # the same process, no restart
        assert store.create_run(CONFIG) == 1 and len(store.runs()) == 1
    finally:
        connection.close_pools(url)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("DROP DATABASE lab_comes_later WITH (FORCE)")
