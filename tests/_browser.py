"""Shared helpers of the browser tests: Debian's Chromium under Playwright, screenshots, and
the Streamlit exception-box check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def playwright_api():
    """`playwright.sync_api`, or skip when Chromium or Playwright is missing."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    ARTIFACTS.mkdir(exist_ok=True)
    return pytest.importorskip("playwright.sync_api")


def no_exception(page, name: str) -> None:
    """Screenshot the page to tests/artifacts/<name>.png; fail on a Streamlit exception box."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, boxes.first.inner_text()


def set_number(page, label: str, value: str, settle: bool = True) -> None:
    """Type `value` into the number input labelled `label`, commit it with Enter and (with
    `settle`) wait until the script run it caused is over: typing into the next widget while
    that rerun is in flight can lose the typed value (seen in CI on a loaded machine). While a
    rerun replaces the widget, the page may hold the old and the new input for a moment (seen
    on a loaded machine): it waits until one is left."""
    box = page.get_by_role("spinbutton", name=label, exact=True)
    for _ in range(600):  # up to 60 s; then `fill` says what it found
        if box.count() == 1:
            break
        page.wait_for_timeout(100)
    box.fill(value)
    box.press("Enter")
    if settle:
        idle(page)


def idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until Streamlit shows no running script (its status widget's running icon)."""
    page.wait_for_timeout(300)  # let the rerun request leave
    page.locator('[data-testid="stStatusWidgetRunningIcon"], '
                 '[data-testid="stStatusWidgetRunningManIcon"]').first.wait_for(
        state="detached", timeout=timeout_ms)


def start_button_enabled(page, enabled: bool = True) -> None:
    """Wait until the Start button is enabled (or disabled): after a Setup change the
    hyperparameter fragment reruns first, then the page once more for Start's state."""
    state = "!b.disabled" if enabled else "b.disabled"
    page.wait_for_function("() => [...document.querySelectorAll('button')]"
                           f".some(b => b.innerText.trim() == 'Start' && {state})")


def open_browser(pw, timeout_ms: int = 120_000):
    """(browser, page): Debian's Chromium launched headless and one 1500x1100 page whose
    default timeout is `timeout_ms`."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.set_default_timeout(timeout_ms)
    return browser, page
