"""Shared fixtures of the tests that start real run processes."""

from __future__ import annotations

import pytest

from runs.service import pool, warm_pool
from runs.store.run_store import RunStore


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A fresh run store in `tmp_path` (also `OPTIMIZER_LAB_HOME` for subprocesses); every
    worker started by the test is killed and reaped afterwards. Test modules that need a
    pre-filled store override this fixture."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    yield RunStore()
    warm_pool.shutdown()  # a page's Start or heartbeat may have kept warm workers
    for proc in list(pool._PROCESSES.values()):  # never leave a worker behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pool.reap()


@pytest.fixture(autouse=True)
def _warm_workers_off_unless_marked(request, monkeypatch):
    """Warm workers are off (`OPTIMIZER_LAB_WARM_WORKERS=off`) except in tests marked `warm`:
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
