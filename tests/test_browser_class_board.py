"""The class board in headless Chromium against `streamlit run app.py`: a challenge with 24
fake runs (no TensorFlow process), opened at its link; the leaderboard lists every run, the
overlaid curves and the parallel-coordinates plot are drawn (not blank: their pixels are
counted), and no exception box shows. The screenshot is tests/artifacts/class-board.png."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from _browser import idle, no_exception, open_browser, playwright_api
from _streamlit_server import streamlit_server
from runs.service import challenges
from runs.service.ownership import TEACHER_SECRET_ENV
from runs.store.challenges import ChallengeTables
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests.fake_runs import add_fake_run

pytestmark = pytest.mark.browser
RUNS = 24
NICKNAMES = ["Ada", "Bea", "Cy", "Dee", "Eli", "Fox", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu",
             "Max", "Ned", "Oz", "Pia", "Quin", "Rex", "Sky", "Tom", "Uma", "Vic", "Wes",
             "<b>Xi</b>"]
SCREENSHOT = os.environ.get("OPTIMIZER_LAB_BOARD_SCREENSHOT", "")  # also save it there


def inked(png: bytes) -> float:
    """The fraction of a screenshot's pixels that are not (near) white: 0 for a blank chart."""
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    return float((pixels < 235).mean())


def test_the_board_draws_24_runs(tmp_path):
    api = playwright_api()
    store = RunStore(tmp_path / "runs.sqlite")
    base = RunConfig(optimizer="adam", steps=30, eval_every=10).to_json_dict()
    challenge_id = challenges.create_challenge(store, dict(
        title="Beat Adam on the digits", base=base, optimizers=["adam", "sgd"],
        free=["learning_rate", "momentum"], goal="val_loss_at_step", goal_step=30))
    tables = ChallengeTables(store)
    rates = np.logspace(-4, -0.5, RUNS)
    for index, (nickname, rate) in enumerate(zip(NICKNAMES, rates)):
        sgd = index % 3 == 0
        run_id = add_fake_run(store, "sgd" if sgd else "adam", float(rate), seed=index,
                              slots=("momentum", "update") if sgd else ("m", "v", "update"))
        tables.link(challenge_id, run_id, nickname)
        if index in (2, 9):
            tables.set_pinned(challenge_id, run_id, True)
    env = {TEACHER_SECRET_ENV: "chalk-42"}
    with streamlit_server(tmp_path, env=env) as url, api.sync_playwright() as pw:
        browser, page = open_browser(pw, timeout_ms=240_000)  # a loaded 2-core CI
        try:
            page.set_viewport_size({"width": 1500, "height": 2300})  # the whole board
            page.goto(f"{url}/class_board?challenge={challenge_id}")
            try:
                page.get_by_text("24 runs · 0 training · 24 scored").wait_for()
            except api.TimeoutError:
                no_exception(page, "class-board-timeout")  # an exception box, if any
                raise
            charts = page.locator('[data-testid="stPlotlyChart"]')
            charts.nth(1).locator(".parcoords").first.wait_for(state="attached")
            idle(page)
            page.wait_for_timeout(1500)  # the WebGL lines of the parallel coordinates
            traces = charts.nth(0).locator(".scatterlayer .trace")
            assert traces.count() == RUNS
            assert page.locator("b", has_text="Xi").count() == 0  # never markup
            assert inked(charts.nth(0).screenshot()) > 0.02, "the curves chart is blank"
            assert inked(charts.nth(1).screenshot()) > 0.02, "the parallel coordinates are blank"
            no_exception(page, "class-board")
            if SCREENSHOT:
                page.screenshot(path=SCREENSHOT, full_page=True)
        finally:
            browser.close()
