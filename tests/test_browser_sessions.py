"""Four browser sessions on one server (headless Chromium, separate browser contexts).

Pool size 2: two runs train, two wait in the queue with their position shown. Each session's
Train page shows only its own run; a learning-rate change in one session reaches only that
session's run; stopping a run hands its place to the first queued run; closing a tab leaves
its run training (the default `OPTIMIZER_LAB_ON_TAB_CLOSE=finish`); no worker process is left
once the runs end. Screenshots of every session go to tests/artifacts/.
"""

from __future__ import annotations

import re
import time

import pytest

from _browser import ARGS, CHROMIUM, no_exception, playwright_api, set_number
from _streamlit_server import streamlit_server
from test_pool import workers_of
from runs.service import control, waiting
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore

pytestmark = pytest.mark.browser
SESSIONS = 4
RUN_ID = re.compile(r"Run #(\d+) · status (\w+)")


def own_run(page) -> tuple[int, str]:
    """(run id, status) from the page's live status line."""
    text = page.get_by_text(RUN_ID).first.inner_text()
    match = RUN_ID.search(text)
    return int(match.group(1)), match.group(2)


def wait_status(page, run_id: int, status: str, timeout_ms: int = 120_000) -> None:
    page.get_by_text(re.compile(rf"Run #{run_id} · status {status}")).wait_for(timeout=timeout_ms)
    if status == "running":  # the run has the steps typed before Start
        page.get_by_text(re.compile(rf"Run #{run_id} · status running · step \d+/100000")
                         ).wait_for(timeout=timeout_ms)


def test_four_sessions_pool_queue_and_no_cross_talk(tmp_path):
    api = playwright_api()
    store = RunStore(tmp_path / "runs.sqlite")
    env = {"OPTIMIZER_LAB_POOL_SIZE": "2"}
    with streamlit_server(tmp_path, env=env) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        contexts = [browser.new_context(viewport={"width": 1400, "height": 1000})
                    for _ in range(SESSIONS)]
        pages = [context.new_page() for context in contexts]
        ids: list[int] = []
        try:
            for number, page in enumerate(pages):
                page.set_default_timeout(90_000)
                page.goto(f"{url}/train")
                page.get_by_role("button", name="Start", exact=True).wait_for()
                if number > 0:  # a new session does not open on somebody else's run
                    assert page.get_by_text("No run in this session yet").count() == 1
                set_number(page, "steps", "100000")
                page.get_by_role("button", name="Start", exact=True).click()
                page.get_by_text(RUN_ID).first.wait_for()
                ids.append(own_run(page)[0])
            assert len(set(ids)) == SESSIONS, ids

            # two train, two wait with their place in the queue shown
            for page, run_id in zip(pages[:2], ids[:2]):
                wait_status(page, run_id, "running")
            for place, (page, run_id) in enumerate(zip(pages[2:], ids[2:]), start=1):
                page.get_by_text(re.compile(
                    rf"Run #{run_id} · status queued · queue position {place} of 2")).wait_for()
                no_exception(page, f"sessions-{place + 2}-queued")
            assert store.active_count() == 2

            # a learning-rate change in session 1 reaches run 1 only
            set_number(pages[0], "learning_rate", "5.00e-3", settle=False)
            pages[0].locator("table").filter(has_text="learning_rate").filter(
                has_text="0.005").wait_for(timeout=60_000)
            no_exception(pages[0], "sessions-1-after-lr-change")
            for run_id in ids[1:]:
                changes = store.hyper_changes(run_id)
                assert (changes["source"] != "init").sum() == 0, (run_id, changes)
            for page, run_id in zip(pages[1:], ids[1:]):
                assert own_run(page)[0] == run_id  # each page still shows its own run

            # stopping run 2 hands its place to run 3 (the first queued)
            pages[1].get_by_role("button", name="Stop", exact=True).click()
            wait_status(pages[1], ids[1], "stopped")
            wait_status(pages[2], ids[2], "running")
            pages[3].get_by_text(re.compile(
                rf"Run #{ids[3]} · status queued · queue position 1 of 1")).wait_for()
            for number, page in enumerate(pages, start=1):
                no_exception(page, f"sessions-{number}")

            # closing session 1's tab leaves its run training (policy `finish`)
            contexts[0].close()
            time.sleep(3)
            assert store.run(ids[0])["status"] == "running"
        finally:
            browser.close()
            for run_id in ids:
                if store.run(run_id)["status"] not in FINAL_STATUSES:
                    control.stop(store, run_id)
            for run_id in ids:
                waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=120)
    deadline = time.monotonic() + 60
    while workers_of(store):
        assert time.monotonic() < deadline, f"worker processes left: {workers_of(store)}"
        time.sleep(0.2)
