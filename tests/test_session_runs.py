"""Per-session ownership on the Train page (AppTest, no run process: the run row is faked as
running, owned by this test's pid, so `mark_interrupted` leaves it alone). The owner is stored
with the run (`runs.service.ownership`); a session's identity is its `session_token`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from runs.service import ownership
from runs.service.ownership import Caller
from settings.run_config import RunConfig
from runs.store.run_store import RunStore
from tests._pages import app_test, open_page

TOKEN_A = "a" * 43
TOKEN_B = "b" * 43

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TRAIN = "train"  # the app opens on Home; these tests drive the Train page


# The pages' own logic runs on SQLite; the tests that write across sessions also run on
# PostgreSQL (the pages under AppTest open the store of `OPTIMIZER_LAB_STORE`), and
# tests/test_browser_two_servers.py drives the pages of two servers on one PostgreSQL.
SQLITE_ONLY = pytest.mark.parametrize("store_location", ["sqlite"], indirect=True)


@pytest.fixture()
def store(any_store, monkeypatch):
    """A fresh store (tests/conftest.py `any_store`)."""
    monkeypatch.delenv(ownership.TAKEOVER_ENV, raising=False)
    return any_store


def running_run(store: RunStore, owner: str | None = None) -> int:
    run_id = store.create_run(RunConfig(steps=100_000).to_json_dict(), owner=owner)
    store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
    return run_id


def session(token: str) -> AppTest:
    """A page session whose browser token is `token` (as if its cookie had been sent)."""
    at = open_page(app_test(default_timeout=120), TRAIN)
    at.session_state[session_runs._TOKEN] = token
    return at


def test_another_sessions_run_is_view_only_until_taken_over(store):
    run_id = running_run(store)
    at = open_page(app_test(default_timeout=120), TRAIN)
    at.run()
    assert not at.exception, at.exception
    # a new session does not open on somebody else's run
    assert at.selectbox(key="run_select").value is None
    assert any("No run in this session yet" in i.value for i in at.info)
    at.selectbox(key="run_select").set_value(run_id).run()
    assert not at.exception, at.exception
    assert [b.key for b in at.button if b.key.startswith(("pause_", "stop_"))] == []
    assert at.button(key=f"adopt_{run_id}")
    # a hyperparameter change is not sent to a run this session does not own
    at.number_input(key="hp_adam_learning_rate").set_value(0.01).run()
    assert any("belongs to another browser session" in i.value for i in at.info)
    assert store.commands(run_id).empty
    # after Take control it is: Pause/Stop appear and the change is queued for the run
    at.button(key=f"adopt_{run_id}").click().run()
    assert at.button(key=f"pause_{run_id}") and at.button(key=f"stop_{run_id}")
    at.number_input(key="hp_adam_learning_rate").set_value(0.02).run()
    assert not at.exception, at.exception
    commands = store.commands(run_id)
    assert list(commands["kind"]) == ["set_hyper"] and '"value": 0.02' in commands["payload"][0]


def test_heartbeat_touches_only_this_sessions_live_runs(store):
    mine, theirs = running_run(store, Caller(TOKEN_A).owner), running_run(store)
    at = session(TOKEN_A)
    before = time.time()
    at.run()
    assert not at.exception, at.exception
    assert store.run(mine)["viewer_heartbeat"] >= before
    assert store.run(theirs)["viewer_heartbeat"] is None


@SQLITE_ONLY
def test_a_refused_warm_worker_setting_does_not_stop_the_heartbeat(store, monkeypatch):
    """From the first beat on the heartbeat keeps the run hosts; a refused
    OPTIMIZER_LAB_WARM_WORKERS is one caption, and the session's runs are still touched."""
    from runs.service import pool

    monkeypatch.setenv(pool.WARM_ENV, "maybe")
    mine = running_run(store, Caller(TOKEN_A).owner)
    at = session(TOKEN_A)
    at.run()
    before = time.time()
    at.run()  # the second beat
    assert not at.exception, at.exception
    assert store.run(mine)["viewer_heartbeat"] >= before
    assert any("run hosts off" in c.value and "'maybe' refused" in c.value
               for c in at.sidebar.caption)


@SQLITE_ONLY
def test_another_browsers_run_cannot_be_taken_over(store, monkeypatch):
    monkeypatch.setenv(ownership.TAKEOVER_ENV, "150")  # even with the fallback on
    run_id = running_run(store, Caller(TOKEN_A).owner)
    store.touch_viewers([run_id])  # A's tab is open
    at = session(TOKEN_B)
    at.run()
    at.selectbox(key="run_select").set_value(run_id).run()
    assert not at.exception, at.exception
    assert not [b for b in at.button if b.key.startswith(("pause_", "stop_", "adopt_"))]
    assert any("belongs to another browser session. Only its owner" in c.value
               for c in at.caption)
    at.number_input(key="hp_adam_learning_rate").set_value(0.01).run()
    assert any("belongs to another browser session" in i.value for i in at.info)
    assert store.commands(run_id).empty


@SQLITE_ONLY
def test_fallback_a_silent_owners_run_can_be_taken_over_and_it_is_recorded(store, monkeypatch):
    monkeypatch.setenv(ownership.TAKEOVER_ENV, "150")
    run_id = running_run(store, Caller(TOKEN_A).owner)
    store.touch_viewers([run_id], now=time.time() - 155)
    at = session(TOKEN_B)
    at.run()
    at.selectbox(key="run_select").set_value(run_id).run()
    at.button(key=f"adopt_{run_id}").click().run()
    assert not at.exception, at.exception
    assert store.run(run_id)["owner"] == Caller(TOKEN_B).owner
    events = store.events(run_id)
    assert list(events["kind"]) == ["take_control"]
    assert events["actor"][0] == Caller(TOKEN_B).owner
    assert "silent for" in events["detail"][0] and Caller(TOKEN_A).owner in events["detail"][0]
    assert at.button(key=f"pause_{run_id}") and at.button(key=f"stop_{run_id}")
    returning = session(TOKEN_A)  # A comes back: view only, and told what happened
    returning.run()
    returning.selectbox(key="run_select").set_value(run_id).run()
    assert not [b for b in returning.button if b.key.startswith(("pause_", "adopt_"))]
    assert any(c.value.startswith("recorded: take control") for c in returning.caption)


@SQLITE_ONLY
def test_the_same_browser_regains_its_runs_after_a_reload(store):
    """A reload is a new session; the browser sends the same token (cookie): it opens on its
    own run with its controls, without Take control."""
    first = session(TOKEN_A)
    first.run()
    run_id = running_run(store, Caller(TOKEN_A).owner)
    reloaded = session(TOKEN_A)
    reloaded.run()
    assert not reloaded.exception, reloaded.exception
    assert reloaded.selectbox(key="run_select").value == run_id
    assert reloaded.button(key=f"pause_{run_id}") and reloaded.button(key=f"stop_{run_id}")
    reloaded.button(key=f"pause_{run_id}").click().run()
    assert list(store.commands(run_id)["kind"]) == ["pause"]
    other = session(TOKEN_B)  # another browser: view only
    other.run()
    assert other.selectbox(key="run_select").value is None


@SQLITE_ONLY
def test_a_new_session_gets_a_random_token_and_sets_its_cookie(store):
    at = open_page(app_test(default_timeout=120), TRAIN)
    at.run()
    token = at.session_state[session_runs._TOKEN]
    assert session_runs._TOKEN_FORMAT.fullmatch(token)
    scripts = [h.proto.body for h in at.get("html")]
    assert any(f"{session_runs.COOKIE}={token};" in body and "SameSite=Strict" in body
               for body in scripts), scripts
    other = open_page(app_test(default_timeout=120), TRAIN)
    other.run()
    assert other.session_state[session_runs._TOKEN] != token
