"""A real server starts keeping its run hosts with its first script run, from a background
thread, once; a script run without a server (AppTest) leaves that to the heartbeat."""

from __future__ import annotations

import threading

import pytest
import streamlit as st

from components import early_hosts
from runs.service import warm_pool
from runs.store.files import default_store


@pytest.fixture
def kept(monkeypatch):
    """What `keep_warm` was asked for: (store path, thread name) per call."""
    calls: list[tuple[str, str]] = []
    done = threading.Event()

    def keep_warm(store):
        calls.append((str(store.path), threading.current_thread().name))
        done.set()

    monkeypatch.setattr(warm_pool, "keep_warm", keep_warm)
    monkeypatch.setattr(early_hosts, "_STARTED", threading.Event())
    return calls, done


def test_a_server_keeps_the_default_stores_hosts_once_from_a_background_thread(kept,
                                                                                monkeypatch):
    calls, done = kept
    monkeypatch.setattr(st.runtime, "exists", lambda: True)

    early_hosts.start_run_hosts()
    early_hosts.start_run_hosts()  # every later script run of the server

    assert done.wait(30)
    assert calls == [(str(default_store()), "early-run-hosts")]


def test_a_script_run_without_a_server_starts_nothing(kept):
    calls, done = kept
    assert not st.runtime.exists()

    early_hosts.start_run_hosts()

    assert not done.wait(0.5)
    assert calls == [] and not early_hosts._STARTED.is_set()


def test_a_refusal_is_left_to_the_heartbeat(monkeypatch):
    def refuse(store):
        raise ValueError("OPTIMIZER_LAB_WARM_WORKERS='maybe' refused")

    monkeypatch.setattr(warm_pool, "keep_warm", refuse)
    early_hosts._keep_warm()  # returns: the page's heartbeat shows the refusal
