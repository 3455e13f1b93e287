"""Shared fixtures of the tests that start real run processes, and the store backends
(`store_location`: every store-level test runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

import pytest

import _postgres
from runs.service import pool, warm_pool
from runs.store.run_store import RunStore

BACKENDS = ("sqlite", "postgresql")
_DATABASES = itertools.count(1)


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A fresh run store in `tmp_path` (also `OPTIMIZER_LAB_HOME` for subprocesses); every
    worker started by the test is killed and reaped afterwards. Test modules that need a
    pre-filled store override this fixture."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    yield RunStore()
    warm_pool.shutdown()  # a page's Start or heartbeat may have kept warm workers
    for proc in [*pool._PROCESSES.values(), *pool._HOST_CHILDREN.values()]:
        if proc.poll() is None:  # never leave a worker or a run host behind
            proc.kill()
            proc.wait()
    pool._HOST_CHILDREN.clear()
    pool.reap()


@pytest.fixture(autouse=True)
def _warm_workers_off_unless_marked(request, monkeypatch):
    """Run hosts are off (`OPTIMIZER_LAB_WARM_WORKERS=off`) except in tests marked `warm`:
    every AppTest renders the heartbeat, which would otherwise start TensorFlow processes
    (~715 MB, seconds of CPU each) for every test's fresh store."""
    if request.node.get_closest_marker("warm") is None:
        monkeypatch.setenv(pool.WARM_ENV, "off")


@pytest.fixture(autouse=True)
def _registry_and_plugin_env_restored():
    """A test that loads the plugins folder (an AppTest of a page, the CLI) registers optimizers
    in the process-wide registry and exports the plugin variables: undo both after every test,
    so a later test sees only the built-in optimizers unless it loads plugins itself."""
    import os

    from optimizer_plugins import plugin_discovery as plugins
    from optimizers import registry

    saved = registry.snapshot()  # imports no optimizer class
    env = {key: os.environ.get(key) for key in (plugins.ENV_VAR, plugins.LOADED_ENV_VAR)}
    yield
    registry.restore(saved)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def postgres_url():
    """The URL of a PostgreSQL server started for this test session (`tests/_postgres.py`);
    the tests that need it skip, with the reason, when PostgreSQL is not installed."""
    reason = _postgres.missing_reason()
    if reason:
        pytest.skip(reason)
    with _postgres.postgres_server() as url:
        yield url


@contextlib.contextmanager
def _fresh_database(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the server at `server_url`, dropped on exit (with
    this process's connection pools to it)."""
    import psycopg

    from runs.store.connection import close_pools

    name = f"lab_test_{os.getpid()}_{next(_DATABASES)}"
    url = server_url.replace("/postgres?", f"/{name}?")
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield url
    close_pools(url)
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture()
def postgres_database(postgres_url):
    """The URL of a fresh, empty database on the session's server (dropped afterwards)."""
    with _fresh_database(postgres_url) as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_database(postgres_url):
    """As `postgres_database`, one for a whole test module (e.g. its Ray cluster's store)."""
    with _fresh_database(postgres_url) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store_location(request, tmp_path):
    """Where a fresh store is, once per backend: a SQLite file in `tmp_path`, or a fresh
    PostgreSQL database (`postgres_database`). A test pins one backend with
    `@pytest.mark.parametrize("store_location", ["sqlite"], indirect=True)`."""
    if request.param == "sqlite":
        return tmp_path / "runs.sqlite"
    return request.getfixturevalue("postgres_database")


@pytest.fixture()
def any_store(store_location, tmp_path, monkeypatch):
    """A fresh store on each backend, also the default store of this process and of the
    processes it starts (`OPTIMIZER_LAB_STORE`; `OPTIMIZER_LAB_HOME` = `tmp_path`), so that
    pages under AppTest and run workers use it too."""
    from runs.store.files import STORE_ENV

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    monkeypatch.setenv(STORE_ENV, str(store_location))
    return RunStore()
