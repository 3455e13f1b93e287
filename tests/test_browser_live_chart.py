"""Headless Chromium against `streamlit run app.py`: the Train page while a run trains.

* The live charts are the SAME DOM nodes across refreshes (patched with `Plotly.react`, never
  remounted), and every sample has drawn traces; the log-axis toggle reaches the same node.
* A refresh sends only the new points (a patch on the drawn figure): the loss curve grows.
* A live learning-rate change shows as a marker on the loss curve.
* A hidden tab (Page Visibility API) asks for a refresh every 5 s, a shown one twice a second.
* A server short of CPU for its live pages slows every page's refresh, and the page says so.
* The page paints (Start usable) before the plugin check answers, says the check is running,
  and lists the plugin optimizer by itself when the check ends.
"""

from __future__ import annotations

import re
import time

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from _browser import ARGS, CHROMIUM, no_exception, playwright_api, set_number
from _streamlit_server import streamlit_server

pytestmark = pytest.mark.browser

NODES_JS = """() => [...document.querySelectorAll('div.lab-live-chart')]"""
SAMPLE_JS = """(keep) => {
  const now = [...document.querySelectorAll('div.lab-live-chart')];
  if (keep) window.__charts = now;
  // remounted = a node drawn before left the page (a chart that appears later, e.g. the
  // update ratios after their first record, is not a remount)
  return {count: now.length,
          same: (window.__charts || []).every((d) => d.isConnected && now.includes(d)),
          traces: now.map(d => (d.data || []).length),
          drawn: now.map(d => d.querySelectorAll('.scatterlayer .trace path, .hm image').length),
          points: now.map(d => (((d.data || [])[0] || {}).x || []).length),
          logy: now.length ? ((now[0].layout || {}).yaxis || {}).type : null};
}"""


VISIBILITY_JS = """(state) => {
  Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => state});
  document.dispatchEvent(new Event('visibilitychange'));
}"""


def sent_request(payload) -> tuple[str, str]:
    """What a frame the page sent asks for, and of which fragment: ("timer", id) when a
    fragment's `run_every` timer fired, ("fragment", id) for a widget or trigger inside a
    fragment (a live chart asking for its whole figure again), ("page", "") for a whole-page
    run, else the `BackMsg` type (e.g. "app_heartbeat")."""
    if not isinstance(payload, (bytes, bytearray)):
        return "text", ""
    msg = BackMsg()
    msg.ParseFromString(bytes(payload))
    kind = msg.WhichOneof("type")
    if kind != "rerun_script":
        return kind or "empty", ""
    fragment = msg.rerun_script.fragment_id
    if fragment:
        return ("timer" if msg.rerun_script.is_auto_rerun else "fragment"), fragment
    return "page", ""


def requests_in(page, sent: list[tuple[float, str, str]], seconds: float,
                live_fragment: str) -> dict[str, int]:
    """The frames the page sent during the next `seconds`, by `sent_request` kind; the timers
    of other fragments than `live_fragment` (the session heartbeat every 10 s) are counted
    apart, as "other timer"."""
    start = time.monotonic()
    page.wait_for_timeout(seconds * 1000)
    counts: dict[str, int] = {}
    for t, kind, fragment in sent:
        if start <= t:
            if kind == "timer" and fragment != live_fragment:
                kind = "other timer"
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def note_frame(payload, page_runs: list[float],
               timers: list[tuple[float, float, str]]) -> None:
    """Note when a whole-page run ends (`script_finished` of a page run, not of a fragment
    run): the browser cleared its fragment timers at its start, and the timers the run set
    (`auto_rerun`, noted with their interval in seconds and their fragment) are the ones in
    force after it."""
    if isinstance(payload, (bytes, bytearray)):
        msg = ForwardMsg()
        msg.ParseFromString(bytes(payload))
        kind = msg.WhichOneof("type")
        if kind == "script_finished" and \
                msg.script_finished == ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY:
            page_runs.append(time.monotonic())
        elif kind == "auto_rerun":
            timers.append((time.monotonic(), msg.auto_rerun.interval,
                           msg.auto_rerun.fragment_id))


def wait_for_page_run(page, page_runs: list[float], timers: list[tuple[float, float, str]],
                      after: float, interval: float, visibility: str | None = None) -> str:
    """Wait until a page run that began after `after` set the live area's timer to
    `interval` seconds and finished (under load the page run takes seconds; until it ends
    the previous timers still fire). Returns the live area's fragment id.

    `visibility` (the state just dispatched) is dispatched again every 20 s while no such page
    run came: under the full suite's load one `visibilitychange` once reran nothing in 60 s
    (alone, the rerun comes within a second); this test is about the refresh pace the page
    sets after the change, not about one event's delivery."""
    deadline = time.monotonic() + 60
    again = time.monotonic() + 20
    while True:
        set_at = [(t, fragment) for t, every, fragment in timers
                  if t > after and abs(every - interval) < 1e-6]
        if set_at and any(t > set_at[0][0] for t in page_runs):
            break
        if visibility is not None and time.monotonic() > again:
            page.evaluate(VISIBILITY_JS, visibility)
            again = time.monotonic() + 20
        assert time.monotonic() < deadline, (
            f"no page run set the {interval} s timer after the visibility change: timers "
            f"since {[(round(t - after, 1), every) for t, every, _ in timers if t > after]}")
        page.wait_for_timeout(200)
    page.wait_for_timeout(300)  # the frames already on their way
    return set_at[0][1]


def start_long_run(page, url: str) -> None:
    page.goto(f"{url}/train?optimizer=adam&dataset=moons&model=mlp&steps=1000000")
    page.get_by_role("button", name="Start", exact=True).wait_for()
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Start", exact=True).click()
    try:
        page.wait_for_function(
            "() => /status running · step [1-9]/.test(document.body.innerText)")
    finally:
        no_exception(page, "train-live-run-started")


def test_live_charts_are_patched_in_place_and_a_change_shows_on_the_loss_curve(tmp_path):
    api = playwright_api()
    with streamlit_server(tmp_path) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(180_000)
        sent: list[tuple[float, str, str]] = []
        page_runs: list[float] = []
        timers: list[tuple[float, float, str]] = []

        def on_websocket(ws) -> None:
            ws.on("framesent", lambda payload: sent.append((time.monotonic(),
                                                             *sent_request(payload))))
            ws.on("framereceived", lambda payload: note_frame(payload, page_runs, timers))

        page.on("websocket", on_websocket)
        start_long_run(page, url)
        page.wait_for_function("() => [...document.querySelectorAll('div.lab-live-chart')]"
                               ".filter(d => (d.data || []).length > 0).length >= 2")
        first = page.evaluate(SAMPLE_JS, True)
        assert first["count"] >= 3, first
        for _ in range(6):
            page.wait_for_timeout(1000)
            sample = page.evaluate(SAMPLE_JS, False)
            assert sample["same"], sample  # no chart was remounted
            assert sample["traces"][0] >= 1 and sample["drawn"][0] >= 1, sample  # not blank
        assert sample["points"][0] > first["points"][0], (first, sample)  # patches drawn
        no_exception(page, "train-live-chart")

        page.get_by_text("log loss axis").click()
        deadline = time.monotonic() + 20
        while page.evaluate(SAMPLE_JS, False)["logy"] != "log":
            assert time.monotonic() < deadline, "the log axis did not reach the loss chart"
            page.wait_for_timeout(250)
        assert page.evaluate(SAMPLE_JS, False)["same"]

        set_number(page, "learning_rate", "2.50e-3", settle=False)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .annotation-text')]"
            ".some(t => (t.textContent || '').includes('learning_rate → 0.0025'))",
            timeout=60_000)
        assert page.evaluate(SAMPLE_JS, False)["same"]
        no_exception(page, "train-live-change-marker")

        # hidden: the page reruns once (the new timer), then the live area asks every 5 s;
        # shown again: twice a second once that page run is over. The session's heartbeat
        # (its own fragment, every 10 s) fires either way.
        hidden_at = time.monotonic()
        page.evaluate(VISIBILITY_JS, "hidden")
        live = wait_for_page_run(page, page_runs, timers, hidden_at, 5.0, "hidden")
        hidden = requests_in(page, sent, 10.5, live)
        assert hidden.get("timer", 0) <= 3, hidden  # 2 at 5 s, one more at the window's edge
        # nothing else polls: besides the timer, at most each chart asking once for its whole
        # figure (a patch that crossed the page run, under load, is not drawn: it resyncs)
        charts = page.evaluate(SAMPLE_JS, False)["count"]
        assert hidden.get("fragment", 0) + hidden.get("page", 0) <= charts, (hidden, charts)
        shown_at = time.monotonic()
        page.evaluate(VISIBILITY_JS, "visible")
        live = wait_for_page_run(page, page_runs, timers, shown_at, 0.5, "visible")
        deadline = time.monotonic() + 60  # once that page run has set the timer again
        while requests_in(page, sent, 3, live).get("timer", 0) < 5:
            assert time.monotonic() < deadline, "a shown tab did not refresh twice a second"
        sample = page.evaluate(SAMPLE_JS, False)
        assert sample["drawn"][0] >= 1, sample
        page.get_by_role("button", name="Stop", exact=True).click()
        page.get_by_text(re.compile(r"status stopped")).first.wait_for()
        browser.close()


SLOW_PLUGIN = '''
"""A plugin whose import waits for a release file (the test's stand-in for a slow check)."""
import os, time
from pathlib import Path

release = Path(os.environ["LAB_TEST_RELEASE"])
while not release.exists():
    time.sleep(0.1)

from optimizers.sgd import SGD
import tf_keras


@tf_keras.saving.register_keras_serializable(package="LabTestPlugins")
class SlowSGD(SGD):
    """SGD under another name: its file took a while to import."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SlowSGD",
                 **kwargs):
        super().__init__(learning_rate, momentum, nesterov, name=name, **kwargs)
'''


def test_train_paints_before_the_plugin_check_and_lists_the_plugin_when_it_ends(tmp_path):
    api = playwright_api()
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow_sgd.py").write_text(SLOW_PLUGIN)
    release = tmp_path / "release"
    env = {"OPTIMIZER_LAB_PLUGINS": str(plugins), "LAB_TEST_RELEASE": str(release),
           "OPTIMIZER_LAB_PLUGIN_TIMEOUT_S": "120"}
    with streamlit_server(tmp_path, env=env) as url, api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(180_000)
        page.goto(f"{url}/train")
        # painted while the check waits
        page.get_by_role("button", name="Start", exact=True).wait_for()
        page.get_by_text("checking optimizer plugins", exact=False).wait_for()
        assert page.get_by_role("button", name="Start", exact=True).is_enabled()
        no_exception(page, "train-while-plugins-check")
        release.write_text("go")
        page.get_by_text("checking optimizer plugins", exact=False).wait_for(state="detached")
        page.get_by_test_id("stSidebar").get_by_role("combobox").first.click()
        page.get_by_role("option", name="slowsgd").wait_for()
        browser.close()


def test_a_server_short_of_cpu_slows_every_live_page_and_says_so(tmp_path):
    """The pace (components.refresh_pace): with a CPU budget far below one refresh's cost,
    the page sets its timer to the slowest pace once its first refreshes are measured (the
    page run after the run starts, or `REPACE_AFTER_S` later), and says why under the run."""
    api = playwright_api()
    with streamlit_server(tmp_path, env={"OPTIMIZER_LAB_REFRESH_CPU": "0.0001"}) as url, \
            api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(180_000)
        page_runs: list[float] = []
        timers: list[tuple[float, float, str]] = []
        page.on("websocket", lambda ws: ws.on(
            "framereceived", lambda payload: note_frame(payload, page_runs, timers)))
        opened = time.monotonic()
        start_long_run(page, url)  # its first refreshes measure the cost; a page run follows
        wait_for_page_run(page, page_runs, timers, opened, 8.0)
        page.get_by_text(re.compile(r"Live refresh every 8 s: 1 page watches a live run"))\
            .first.wait_for()
        no_exception(page, "train-live-paced")
        page.get_by_role("button", name="Stop", exact=True).click()
        page.get_by_text(re.compile(r"status stopped")).first.wait_for()
        browser.close()
