"""After a reload the SAME browser regains its runs; another browser cannot steer them
(issue 16 item 1-2, headless Chromium against a real server; no TensorFlow run process: the
run row is faked as running in this test's process, owned by the browser's cookie token)."""

from __future__ import annotations

import os
import time

import pytest

from _browser import ARGS, CHROMIUM, idle, no_exception, playwright_api
from _streamlit_server import streamlit_server
from components.session_runs import COOKIE
from runs.service.ownership import Caller
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

pytestmark = pytest.mark.browser


def test_reload_regains_the_run_and_another_browser_cannot_steer_it(tmp_path):
    api = playwright_api()
    store = RunStore(tmp_path / "runs.sqlite")
    with streamlit_server(tmp_path) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        mine, theirs = browser.new_context(), browser.new_context()
        try:
            page = mine.new_page()
            page.set_default_timeout(90_000)
            page.goto(f"{url}/train")
            page.get_by_role("button", name="Start", exact=True).wait_for()
            idle(page)
            deadline = time.monotonic() + 30
            while not [c for c in mine.cookies() if c["name"] == COOKIE]:
                assert time.monotonic() < deadline, "the browser token cookie was not set"
                page.wait_for_timeout(200)
            token = next(c["value"] for c in mine.cookies() if c["name"] == COOKIE)
            assert token not in page.url  # never in a link
            run_id = store.create_run(RunConfig(steps=100_000).to_json_dict(),
                                      owner=Caller(token).owner)
            store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
            page.reload()  # a new Streamlit session in the same browser
            page.get_by_role("button", name="Pause", exact=True).wait_for()
            assert page.get_by_role("button", name="Take control", exact=True).count() == 0
            no_exception(page, "ownership-reloaded")
            deadline = time.monotonic() + 30
            # the live fragment redraws every 0.5 s: a click can land on a replaced button
            while store.commands(run_id).empty:
                assert time.monotonic() < deadline, "Pause never reached the run"
                page.get_by_role("button", name="Pause", exact=True).click()
                idle(page)
                page.wait_for_timeout(1000)
            assert set(store.commands(run_id)["kind"]) == {"pause"}

            other = theirs.new_page()
            other.set_default_timeout(90_000)
            other.goto(f"{url}/train")
            other.get_by_text("No run in this session yet").wait_for()
            no_exception(other, "ownership-other-browser")
            assert other.get_by_role("button", name="Pause", exact=True).count() == 0
        finally:
            browser.close()
