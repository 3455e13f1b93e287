"""Headless Chromium: the Train page reopened while this browser's paced run trains, from the
sidebar, in a new tab and by a reload, sends no command to the run (its pace stays the one it
was started at) and its Setup shows the run's live values (learning_rate 0.01, beta_1 0.5),
not the page's defaults."""

from __future__ import annotations

import re
import time

import pytest

from _browser import ARGS, CHROMIUM, idle, no_exception, playwright_api
from _streamlit_server import streamlit_server
from runs.service import control, waiting
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore
from runs.service.waiting import wait_for_command

pytestmark = pytest.mark.browser
RUNNING = re.compile(r"status running · step [1-9]\d*/100000")
SETUP = "optimizer=adam&hp.learning_rate=0.01&hp.beta_1=0.5&steps=100000&dataset=moons"


def box(page, label: str) -> str:
    """The value of the Setup's number box `label`, once the page shows exactly one (while a
    page run replaces the sidebar, the outgoing box can stand beside the new one)."""
    boxes = page.get_by_role("spinbutton", name=label, exact=True)
    deadline = time.monotonic() + 30
    while boxes.count() != 1:
        assert time.monotonic() < deadline, f"{boxes.count()} boxes named {label}"
        page.wait_for_timeout(200)
    return boxes.input_value()


def shows_the_run(page, store: RunStore, run_id: int, before, where: str) -> None:
    """The reopened page: the run's status line, then a few refreshes (0.5 s each) later no
    new command, the pace unchanged and the Setup holding the run's values."""
    page.get_by_text(RUNNING).first.wait_for()
    idle(page)
    page.wait_for_timeout(3000)  # six refreshes of the live area
    assert store.commands(run_id).equals(before), (where, store.commands(run_id))
    assert control.speed(store, run_id) == 20.0, where
    assert float(box(page, "learning_rate")) == pytest.approx(0.01), where
    assert float(box(page, "beta_1")) == pytest.approx(0.5), where
    assert page.get_by_text("moving a value changes it live").count() == 1, where
    no_exception(page, f"train-reopen-{where}")


def test_reopening_train_mid_run_sends_nothing_and_shows_the_live_values(tmp_path):
    api = playwright_api()
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = None
    with streamlit_server(tmp_path) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1100})
        page = context.new_page()
        page.set_default_timeout(120_000)
        try:
            page.goto(f"{url}/train?{SETUP}")
            page.get_by_role("button", name="Start", exact=True).wait_for()
            idle(page)
            page.get_by_role("button", name="Start", exact=True).click()
            page.get_by_text(RUNNING).first.wait_for()
            run_id = int(store.runs()["id"].iloc[-1])
            idle(page)
            assert control.speed(store, run_id) == 50.0  # the default pace of a new run
            # the user's own move of the speed control: 50 -> 20 steps/s (one step left)
            speed = page.locator('input[type=range][aria-label="speed"]')
            speed.focus()
            speed.press("ArrowLeft")
            deadline = time.monotonic() + 60
            while len(store.commands(run_id)) < 2:  # the slider commits its move
                assert time.monotonic() < deadline, store.commands(run_id)
                time.sleep(0.2)
            wait_for_command(store, int(store.commands(run_id)["id"].iloc[-1]), 60)
            assert control.speed(store, run_id) == 20.0
            before = store.commands(run_id)
            assert before["kind"].tolist() == ["set_speed", "set_speed"], before

            nav = page.get_by_test_id("stSidebarNavItems")
            nav.get_by_role("link", name="Runs", exact=True).click()
            page.wait_for_url(re.compile(r"/runs"))
            idle(page)
            nav.get_by_role("link", name="Train", exact=True).click()
            shows_the_run(page, store, run_id, before, "sidebar")

            tab = context.new_page()  # a new tab: a new session, the same browser (cookie)
            tab.set_default_timeout(120_000)
            tab.goto(f"{url}/train")
            shows_the_run(tab, store, run_id, before, "new-tab")

            tab.reload()
            shows_the_run(tab, store, run_id, before, "reload")
            shows_the_run(page, store, run_id, before, "first-tab")
        finally:
            browser.close()
            if run_id is not None and store.run(run_id)["status"] not in FINAL_STATUSES:
                control.stop(store, run_id)
                waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=120)
