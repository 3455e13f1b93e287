"""The browser's token cookie is asked for in every full script run of a session whose browser
did not send it, not once per session: a first run interrupted by a rerun request (a click
under load) never delivered its script, and the next session of that browser then had a new
token and saw its own runs view only (`components.session_runs.remember_browser`)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from tests._pages import app_test, open_page



@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    return tmp_path


def cookie_scripts(at: AppTest, token: str) -> list[str]:
    return [h.proto.body for h in at.get("html")
            if f"{session_runs.COOKIE}={token};" in h.proto.body]


def test_every_run_asks_for_the_cookie_until_the_browser_sends_it(home):
    at = open_page(app_test(default_timeout=120), "train")
    at.run()
    assert not at.exception, at.exception
    token = at.session_state[session_runs._TOKEN]
    assert len(cookie_scripts(at, token)) == 1
    at.run()  # a second full run of the same session: asked again, with the same token
    assert not at.exception, at.exception
    assert at.session_state[session_runs._TOKEN] == token
    assert len(cookie_scripts(at, token)) == 1
