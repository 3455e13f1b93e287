"""Optimizer Lab: the Streamlit entry point (`streamlit run app.py`). Pages live in `views/`.

The server never imports TensorFlow for the pages that only show specs, runs and records
(Home, Train, Runs, Hyper-gradients): optimizer facts come from `optimizers.catalog`, plugins
are checked and described in a child process (`components.plugin_loader`), and the device list
comes from a child too (`components.device_list`, started by the first page that asks).
tests/test_tf_free_server.py holds it to that.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import streamlit as st

st.set_page_config(page_title="Optimizer Lab", layout="wide")

HOME = st.Page("views/home.py", title="Home", icon=":material/school:", default=True)
TRAIN = st.Page("views/train.py", title="Train", icon=":material/model_training:")
PAGES = [
    HOME,
    TRAIN,
    # `*_page.py`: a page file named like a package (runs/, hypergrad/) would shadow it when
    # the page runs with views/ first on sys.path (AppTest does that); the URL stays /hypergrad
    st.Page("views/hypergrad_page.py", title="Hyper-gradients", icon=":material/functions:",
            url_path="hypergrad"),
    st.Page("views/inside_step.py", title="Inside one step", icon=":material/step_into:"),
    st.Page("views/landscape.py", title="Landscape", icon=":material/landscape:"),
    st.Page("views/plugins.py", title="Plugins", icon=":material/extension:"),
    st.Page("views/runs_page.py", title="Runs", icon=":material/compare_arrows:",
            url_path="runs"),
    st.Page("views/keras3.py", title="Keras 3", icon=":material/upgrade:"),
    st.Page("views/conventions.py", title="Conventions", icon=":material/compare:"),
    st.Page("views/precision_distribution.py", title="Mixed precision & distribution",
            icon=":material/memory:"),
]

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
    from runs.store.files import default_store_path
    from runs.store.run_store import RunStore

    remember_browser()
    with store_guard():  # a read-only or full data directory: one line, not a traceback
        keep_alive(RunStore(default_store_path()))


pg = st.navigation(PAGES)
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
