"""Plugin discovery once per server process (Streamlit cache around `optimizers.plugins`).

Call `load_plugins()` at the top of the entry point (and of any page that lists optimizers):
the first call imports and checks every plugin, registers the ones that pass, and later calls
return the same reports.
"""

from __future__ import annotations

import os

import streamlit as st

from optimizers import plugins


@st.cache_resource(show_spinner="Checking optimizer plugins...")
def _discover(directory: str) -> list[plugins.PluginReport]:
    return plugins.discover(directory)


def load_plugins() -> tuple[str, list[plugins.PluginReport]]:
    """(plugins folder, one report per plugin file; none when the folder is missing, see
    `optimizers.plugins.folder_problem`). Never raises for a broken plugin."""
    directory = str(plugins.plugins_dir())
    # run processes started from this server inherit the folder (the --plugins flag is only in
    # the server's argv): `plugins.ensure_registered` in the worker then finds the same plugins
    os.environ[plugins.ENV_VAR] = directory
    if plugins.folder_problem(directory):  # not cached: a folder created later is found
        return directory, []
    return directory, _discover(directory)


__all__ = ["load_plugins"]
