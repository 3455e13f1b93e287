"""The Hyper-gradients page steers only this session's runs (issue 16 item 1): another
session's live run opens view only (auto-tune and Compute slice disabled, and refused by the
run service if sent anyway); the owner's session can auto-tune and request slices, bounded."""

from __future__ import annotations

import os
import time

import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from runs.service import control, ownership
from runs.service.ownership import Caller
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests._pages import page_test

OWNER, STRANGER = "o" * 43, "s" * 43


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    return RunStore()


def live_run(store: RunStore) -> int:
    config = RunConfig(steps=100_000, hypergradients=["learning_rate"])
    run_id = store.create_run(config.to_json_dict(), owner=Caller(OWNER).owner)
    store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
    return run_id


def page(token: str) -> AppTest:
    at = page_test("hypergrad", default_timeout=60)
    at.session_state[session_runs._TOKEN] = token
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_page_opens_on_none_without_a_run_of_this_session(store):
    run_id = live_run(store)
    at = page(STRANGER)
    assert at.selectbox(key="hg_run").value is None
    assert at.selectbox(key="hg_run").options[0].startswith(f"#{run_id} ")  # offered, not opened
    assert not at.toggle and not at.get("bidi_component") and not at.get("plotly_chart")
    assert any("No run in this session yet" in i.value for i in at.info)
    assert any("(train?lesson=hypergradients)" in m.value for m in at.markdown)
    assert at.button(key="hg_check_button")  # the correctness check needs no run
    assert page(OWNER).selectbox(key="hg_run").value == run_id  # its owner's opens on it


def test_another_sessions_run_is_view_only(store):
    run_id = live_run(store)
    at = page(STRANGER)
    at.selectbox(key="hg_run").set_value(run_id).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="hg_run").value == run_id  # everyone may see it
    assert at.toggle(key=f"hg_auto_{run_id}_learning_rate").disabled
    assert at.button(key=f"hg_slice_button_{run_id}").disabled
    assert any("View only" in c.value for c in at.caption)
    with pytest.raises(ownership.NotOwner):
        control.autotune(store, run_id, "learning_rate", 1e30, caller=Caller(STRANGER))
    assert store.commands(run_id).empty


def test_the_owner_steers_and_slices_are_bounded(store):
    run_id = live_run(store)
    at = page(OWNER)
    assert not at.button(key=f"hg_slice_button_{run_id}").disabled
    at.toggle(key=f"hg_auto_{run_id}_learning_rate").set_value(True).run()
    for _ in range(control.MAX_PENDING_SLICES_PER_RUN + 1):
        at.button(key=f"hg_slice_button_{run_id}").click().run()
        assert not at.exception, at.exception
    kinds = list(store.commands(run_id)["kind"])
    assert kinds == ["autotune"] + ["response_slice"] * control.MAX_PENDING_SLICES_PER_RUN
    assert any("slices are already pending for this run" in e.value for e in at.error)
