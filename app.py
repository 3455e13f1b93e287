"""Optimizer Lab: the Streamlit entry point (`streamlit run app.py`). It only routes: each page
is the `page()` function of its module in `views/` (`views.PAGES`), at URL `/<module>`.

The server never imports TensorFlow for the pages that only show specs, runs and records
(Home, Train, Runs, Hyper-gradients): a page's module is imported the first time someone opens
it, optimizer facts come from `optimizers.catalog`, plugins are checked and described in a child
process (`components.plugin_loader`), and the device list comes from the run host or a child
(`components.device_list`, started by the first page that asks). The first run host starts with
the server's first script run, from a background thread (`components.early_hosts`).
tests/test_tf_free_server.py holds it to that.
"""

import importlib
from collections.abc import Callable

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import streamlit as st

from components import early_hosts, links
from views import HOME as HOME_PATH
from views import PAGES as PAGE_TABLE

st.set_page_config(page_title="Optimizer Lab", layout="wide")


def view(module: str) -> Callable[[], None]:
    """`views.<module>.page`, imported when the page is first opened: a teaching page's imports
    (TensorFlow, for some) load only for the reader who opens it, and Home paints without
    importing the other pages."""

    def page() -> None:
        importlib.import_module(f"views.{module}").page()

    page.__name__ = page.__qualname__ = module
    return page


ROUTES = {entry.path: st.Page(view(entry.path), title=entry.title, icon=entry.icon,
                              url_path=entry.path, default=entry.path == HOME_PATH)
          for entry in PAGE_TABLE}
HOME, TRAIN = ROUTES[HOME_PATH], ROUTES["train"]
PAGES = list(ROUTES.values())
links.register(ROUTES)


def check_plugins(page) -> None:
    """Plugins are contract-checked once per server in a child process (~5 s: it imports
    TensorFlow). Home lists no optimizer: it only starts the check, so its first paint does not
    wait. Train paints with the built-in optimizers and adds the plugins when the check answers
    (it waits only for a link or lesson naming an optimizer not registered yet:
    components/train_setup.py). Every other page may name a plugin optimizer (a run) and waits
    for it."""
    from components.plugin_loader import load_plugins, start_plugin_check

    if page is HOME or page is TRAIN:  # (without a runtime, `st.navigation` returns a stand-in)
        start_plugin_check()
    else:
        load_plugins()


def sidebar_services() -> None:
    """Renders nothing: this browser's token cookie, its heartbeat, the dispatcher."""
    from components.session_runs import keep_alive, remember_browser
    from components.store_guard import store_guard
    from runs.store.files import default_store
    from runs.store.run_store import RunStore

    remember_browser()
    with store_guard():  # a read-only or full data directory: one line, not a traceback
        keep_alive(RunStore(default_store()))


pg = st.navigation(PAGES)
early_hosts.start_run_hosts()  # a background thread: the first Start's host imports meanwhile
# The services' place is fixed before the page adds its own sidebar widgets (the heartbeat
# fragment's identity follows its position); they run after the page, so Home's heading is
# sent before they import pandas and the store (~1 s of the first paint on this machine).
services = st.sidebar.container()
if pg is not HOME:
    check_plugins(pg)
try:
    pg.run()
finally:  # also after st.stop(): a page that stops early keeps its heartbeat
    with services:
        sidebar_services()
    if pg is HOME:  # after the page: the check's child imports TensorFlow beside the paint
        check_plugins(pg)
