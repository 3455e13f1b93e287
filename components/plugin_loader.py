"""Plugin discovery once per server process (Streamlit cache around `optimizers.plugins`).

Call `load_plugins()` at the top of the entry point (and of any page that lists optimizers):
the first call checks every plugin file in a child process with a time limit
(`plugins.discover_bounded`: a file that hangs at import is reported "import did not finish in
10 s: not loaded"), registers the classes that passed from the catalog data the child sent
(specs, options, `is_rule`), and later calls return the same reports. No plugin file, and so
no TensorFlow, is imported into the server here: a plugin class is imported only where an
optimizer object is built (`registry.get`), and the run processes import it themselves
(`plugins.ensure_registered`).
"""

from __future__ import annotations

import os

import streamlit as st

from optimizers import plugin_process, plugins


@st.cache_resource(show_spinner="Checking optimizer plugins (in a time-limited process)...")
def _discover(directory: str, import_timeout: float, check_timeout: float
              ) -> list[plugins.PluginReport]:
    return plugins.discover_bounded(directory, import_timeout, check_timeout)


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


def load_plugins() -> tuple[str, list[plugins.PluginReport]]:
    """(plugins folder, one report per plugin file; none when the folder is missing, see
    `optimizers.plugins.folder_problem`). Never raises for a broken or hanging plugin, nor for
    a refused `OPTIMIZER_LAB_PLUGIN_TIMEOUT_S` (a warning, then the default).
    """
    directory = str(plugins.plugins_dir())
    # run processes started from this server inherit the folder (the --plugins flag is only in
    # the server's argv) and the files that imported in time in the check process:
    # `plugins.ensure_registered` in the worker then imports exactly those
    os.environ[plugins.ENV_VAR] = directory
    if plugins.folder_problem(directory):  # not cached: a folder created later is found
        return directory, []
    reports = _discover(directory, *_timeouts())
    os.environ[plugins.LOADED_ENV_VAR] = os.pathsep.join(
        r.path for r in reports if r.error is None)
    return directory, reports


__all__ = ["load_plugins"]
