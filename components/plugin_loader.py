"""Plugin discovery once per server process (Streamlit cache around `optimizers.plugins`).

`start_plugin_check()` starts the check in a background thread (the entry point calls it for
the Home page, whose first paint must not wait); `load_plugins()` (the entry point, for every
other page) waits for it and registers. The check runs every plugin file in a child process with
a time limit
(`plugins.discover_bounded`: a file that hangs at import is reported "import did not finish in
10 s: not loaded"), registers the classes that passed from the catalog data the child sent
(specs, options, `is_rule`), and later calls return the same reports. No plugin file, and so
no TensorFlow, is imported into the server here: a plugin class is imported only where an
optimizer object is built (`registry.get`), and the run processes import it themselves
(`plugins.ensure_registered`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import streamlit as st

from optimizer_plugins import plugin_process, plugin_discovery as plugins


# One background check per (folder, limits) per server process: the child imports TensorFlow
# (~5 s), and the Home page must not wait for it (first paint). The futures hold only the
# child's JSON reports; registering happens in the caller's (script) thread.
_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plugin-check")
_CHECKS: dict[tuple[str, float, float], Future] = {}
_LOCK = threading.Lock()


def _check(directory: str, import_timeout: float, check_timeout: float) -> Future:
    key = (directory, import_timeout, check_timeout)
    with _LOCK:
        if key not in _CHECKS:
            _CHECKS[key] = _EXECUTOR.submit(plugins.check_bounded, *key, nice=_child_nice())
        return _CHECKS[key]


def _child_nice() -> int:
    """The check child's CPU priority drop: the runs' (`runs.service.pool.worker_nice`; 0 when
    that setting is refused, which a run's start reports). On a fresh server the child
    imports TensorFlow beside the first run host, whose import a first Start waits for; at the
    runs' priority it takes the CPU those and the pages leave, and shares it evenly with runs
    that train."""
    from runs.service.pool import worker_nice

    try:
        return worker_nice()
    except ValueError:
        return 0


def _timeouts() -> tuple[float, float]:
    """(import, check) limits in seconds from the environment; a refused value is shown once
    per page run and the default is used (the pages must render)."""
    limits = []
    for read, default in ((plugin_process.import_timeout_s, plugin_process.DEFAULT_IMPORT_TIMEOUT_S),
                          (plugin_process.check_timeout_s, plugin_process.DEFAULT_CHECK_TIMEOUT_S)):
        try:
            limits.append(read())
        except ValueError as error:
            st.warning(f"{error}; the plugins are checked with the default, {default:g} s")
            limits.append(default)
    return limits[0], limits[1]


def start_plugin_check() -> None:
    """Start the plugin check in the background and return at once (the Home page calls it:
    its first paint does not wait for the child process; `load_plugins` later collects)."""
    directory = str(plugins.plugins_dir())
    os.environ[plugins.ENV_VAR] = directory
    if not plugins.folder_problem(directory):
        _check(directory, *_timeouts())


def check_running() -> bool:
    """True while this server's background plugin check (started by `start_plugin_check`)
    has not answered yet."""
    directory = str(plugins.plugins_dir())
    if plugins.folder_problem(directory):
        return False
    with _LOCK:
        check = _CHECKS.get((directory, *_timeouts()))
    return check is not None and not check.done()


def plugins_when_ready() -> bool:
    """Start the plugin check if needed and register its classes if it has answered, without
    waiting (the Train page paints with the built-in optimizers meanwhile); returns True when
    the check is over (or there is no plugins folder)."""
    start_plugin_check()
    if check_running():
        return False
    load_plugins()  # done: registers at once, no spinner
    return True


def load_plugins() -> tuple[str, list[plugins.PluginReport]]:
    """(plugins folder, one report per plugin file; none when the folder is missing, see
    `optimizers.plugins.folder_problem`), the passing classes registered. Waits for the
    background check (`start_plugin_check`) with a spinner the first time. Never raises for a
    broken or hanging plugin, nor for a refused `OPTIMIZER_LAB_PLUGIN_TIMEOUT_S` (a warning,
    then the default).
    """
    directory = str(plugins.plugins_dir())
    # run processes started from this server inherit the folder (the --plugins flag is only in
    # the server's argv) and the files that imported in time in the check process:
    # `plugins.ensure_registered` in the worker then imports exactly those
    os.environ[plugins.ENV_VAR] = directory
    if plugins.folder_problem(directory):  # not cached: a folder created later is found
        return directory, []
    key = (directory, *_timeouts())
    check = _check(*key)
    try:
        if not check.done():
            with st.spinner("Checking optimizer plugins (in a time-limited process)..."):
                check.result()
        check.result()
    except Exception:
        with _LOCK:  # not cached: the next page run checks again
            _CHECKS.pop(key, None)
        raise
    # idempotent ("already registered"): registers again after a test restored the registry
    reports = plugins.register_checked(check.result())
    os.environ[plugins.LOADED_ENV_VAR] = os.pathsep.join(
        r.path for r in reports if r.error is None)
    return directory, reports


__all__ = ["check_running", "load_plugins", "plugins_when_ready", "start_plugin_check"]
