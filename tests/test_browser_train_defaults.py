"""Headless Chromium: six sessions open the Train page at the same moment (a class opening the
page together, on a server that is still checking plugins and listing devices) and every one
shows the Setup's defaults, with Start enabled.

A Streamlit widget whose value comes from session state carries that value to the browser only
in the script run that set it; a browser that first draws the widget from a later run's
message falls back to the widget's own default (0 for a number input, the low end for a
slider) and sends that back as the widget's value. Concurrent loads make that race likely
(the page reruns once the background checks end); the Setup widgets therefore pass their
current value as the widget default too (`components.hyper_widgets.current`)."""

from __future__ import annotations

import pytest

from _browser import ARGS, CHROMIUM, idle, no_exception, playwright_api
from _streamlit_server import streamlit_server
from settings import fields

pytestmark = pytest.mark.browser
SESSIONS = 6


def box(page, label: str) -> str:
    return page.get_by_role("spinbutton", name=label, exact=True).input_value()


def test_six_sessions_opened_at_once_show_the_defaults(tmp_path):
    api = playwright_api()
    defaults = fields.page_defaults().hyperparameters
    with streamlit_server(tmp_path) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pages = []
        try:
            for _ in range(SESSIONS):  # all six requests leave before any page has drawn
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.set_default_timeout(180_000)
                page.goto(f"{url}/train", wait_until="commit")
                pages.append(page)
            for page in pages:
                page.get_by_role("button", name="Start", exact=True).wait_for()
                idle(page)
            for page in pages:  # after the background checks' rerun (plugins, devices)
                page.get_by_text("In the background").wait_for(state="detached")
                idle(page)
            for number, page in enumerate(pages, start=1):
                shown = {name: box(page, name) for name in ("learning_rate", "beta_1",
                                                            "beta_2", "epsilon")}
                no_exception(page, f"defaults-session-{number}")
                assert float(shown["learning_rate"]) == pytest.approx(
                    defaults["learning_rate"]), (number, shown)
                assert float(shown["epsilon"]) == pytest.approx(defaults["epsilon"]), (number,
                                                                                      shown)
                assert float(shown["beta_1"]) == pytest.approx(defaults["beta_1"]), (number, shown)
                assert float(shown["beta_2"]) == pytest.approx(defaults["beta_2"]), (number, shown)
                assert box(page, "steps") == str(fields.page_defaults().steps), number
                start = page.get_by_role("button", name="Start", exact=True)
                assert start.is_enabled(), number
                assert page.get_by_text("refused").count() == 0, number
        finally:
            browser.close()
