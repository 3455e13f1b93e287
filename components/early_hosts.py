"""The server's first run host starts with its first script run, before that page is drawn.

A fresh server's first Start waits for the first run host to import TensorFlow (4-5 s on an
idle machine, ~8 s beside a loading page). The heartbeat (`components.session_runs.beat`)
keeps the hosts, but it runs after the page, which puts off the host's start by the page's
drawing and the store's import (~2 s for Home here). `start_run_hosts()` starts the same pool
from a background thread at once: the page is drawn meanwhile, and the heartbeat later finds
the pool kept (`runs.service.warm_pool.keep_warm` is idempotent and locked).

Only in a real server (`st.runtime.exists()`): a script run in `AppTest` keeps hosts through
its heartbeat alone, inside the test that asked for them.
"""

from __future__ import annotations

import threading

import streamlit as st

_STARTED = threading.Event()


def start_run_hosts() -> None:
    """Start keeping the run hosts of the default store in a background thread, once per server
    process; returns at once. A refusal (settings, a read-only data directory) is left to the
    heartbeat, which shows it on the page."""
    if _STARTED.is_set() or not st.runtime.exists():
        return
    _STARTED.set()
    threading.Thread(target=_keep_warm, name="early-run-hosts", daemon=True).start()


def _keep_warm() -> None:
    try:
        from runs.service import warm_pool
        from runs.store.files import default_store
        from runs.store.run_store import RunStore

        warm_pool.keep_warm(RunStore(default_store()))
    except Exception:  # noqa: BLE001 - the heartbeat tries again and says why on the page
        pass
