"""Two Streamlit servers over one PostgreSQL store (as behind a load balancer with sticky
sessions), one browser session on each (headless Chromium, separate contexts, separate data
directories): they share nothing but the database.

Pool size 1 for the whole store: the run started on server A trains, the one started on server
B waits in the queue behind it (admission counts the runs of every server). Each page shows
only its own session's run; a hyperparameter change and a Pause on A reach A's run only (the
command queue; the run process was given the store's URL), B cancels its queued run without a
process ever being started for it, A's Stop ends A's run, and its records are in the database.
"""

from __future__ import annotations

import contextlib
import re
import time

import pytest

from _browser import ARGS, CHROMIUM, no_exception, playwright_api, set_number
from _streamlit_server import streamlit_server
from test_browser_sessions import RUN_ID, own_run, wait_status
from test_pool import workers_of
from runs.protocol import FINAL_STATUSES
from runs.service import control, waiting
from runs.store.files import STORE_ENV
from runs.store.run_store import RunStore

pytestmark = pytest.mark.browser


def test_two_servers_share_the_pool_and_the_queue_without_cross_talk(
        tmp_path, postgres_database):
    api = playwright_api()
    store = RunStore(postgres_database)
    env = {STORE_ENV: postgres_database, "OPTIMIZER_LAB_POOL_SIZE": "1",
           "OPTIMIZER_LAB_WARM_WORKERS": "off"}
    homes = [tmp_path / "a", tmp_path / "b"]
    ids: list[int] = []
    with contextlib.ExitStack() as stack:
        urls = []
        for home in homes:
            home.mkdir()
            urls.append(stack.enter_context(streamlit_server(home, env=env)))
        pw = stack.enter_context(api.sync_playwright())
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            pages = []
            for url in urls:
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.set_default_timeout(90_000)
                page.goto(f"{url}/train")
                # a fresh server's first page imports the app: slow on a loaded machine
                page.get_by_role("button", name="Start", exact=True).wait_for(timeout=180_000)
                set_number(page, "steps", "100000")
                page.get_by_role("button", name="Start", exact=True).click()
                page.get_by_text(RUN_ID).first.wait_for()
                ids.append(own_run(page)[0])
                pages.append(page)
            on_a, on_b = pages
            assert ids[1] != ids[0]
            # one place for both servers: B's run waits behind A's
            wait_status(on_a, ids[0], "running")
            on_b.get_by_text(re.compile(
                rf"Run #{ids[1]} · status queued · queue position 1 of 1")).wait_for()
            assert store.active_count() == 1 and store.run(ids[1])["pid"] is None
            # each page shows its own session's run only
            assert own_run(on_a)[0] == ids[0] and own_run(on_b)[0] == ids[1]
            assert on_b.get_by_text(f"Run #{ids[0]}").count() == 0
            assert on_a.get_by_text(f"Run #{ids[1]}").count() == 0
            no_exception(on_a, "two-servers-a")
            no_exception(on_b, "two-servers-b")

            # the run process (started by server A with the store's URL) obeys the queue
            changed = control.set_hyper(store, ids[0], "learning_rate", 0.02)
            assert waiting.wait_for_command(store, changed, timeout_s=60)["status"] == "done"
            # a Pause on server A reaches A's run through the shared command queue
            on_a.get_by_role("button", name="Pause", exact=True).click()
            wait_status(on_a, ids[0], "paused")
            # (`set_speed`: the pace of a new run, sent by Start)
            assert set(store.commands(ids[0])["kind"]) == {"set_speed", "set_hyper", "pause"}
            assert "pause" not in set(store.commands(ids[1])["kind"])

            # B cancels its queued run (no process was ever started for it); A stops its own
            on_b.get_by_role("button", name="Stop", exact=True).click()
            wait_status(on_b, ids[1], "stopped")
            assert store.run(ids[1])["pid"] is None
            on_a.get_by_role("button", name="Stop", exact=True).click()
            wait_status(on_a, ids[0], "stopped")
            assert [store.run(i)["status"] for i in ids] == ["stopped", "stopped"]
            # its records streamed into PostgreSQL, the change at the step it took effect
            changes = store.hyper_changes(ids[0])
            user = changes[changes["source"] == "user"]
            assert user[["name", "new"]].values.tolist() == [["learning_rate", 0.02]]
            assert 1 <= int(user["step"].iloc[0]) <= store.run(ids[0])["step"]
            assert len(store.scalars(ids[0], names=["train_loss"])) >= 1
        finally:
            browser.close()
            for run_id in ids:
                if store.run(run_id)["status"] not in FINAL_STATUSES:
                    control.stop(store, run_id)
                waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=120)
    deadline = time.monotonic() + 60
    while workers_of(store):
        assert time.monotonic() < deadline, f"worker processes left: {workers_of(store)}"
        time.sleep(0.2)
