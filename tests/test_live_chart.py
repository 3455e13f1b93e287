"""The live chart element (`components.live_chart`): one element per key, patched in place.

`st.plotly_chart` gets a new element id whenever its figure changes (Streamlit 1.67 derives the
id from the spec even with a key), so the browser remounts it on every refresh; the live chart's
id is its key alone. Checked under AppTest: ids over reruns, the payload (plotly JSON without
the template, the height, a revision), refusals, and the Train page using it while a run is
live (the log-axis toggle reaching the same element).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from _plotly_arrays import decoded, drawn_figure
from components.live_chart import (BUNDLE_ROUTE, MAX_HEIGHT, MIN_HEIGHT, PACK_FROM,
                                   chart_payload, figure_payload)
from runs.store.run_store import RunStore
from tests.fake_runs import add_fake_run
from tests._pages import app_test, open_page

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def two_charts_script():
    import plotly.graph_objects as go
    import streamlit as st

    from components.live_chart import live_chart

    n = st.session_state["n"] = st.session_state.get("n", 0) + 1
    figure = go.Figure(go.Scatter(x=list(range(n + 1)), y=[v * v for v in range(n + 1)]))
    live_chart(figure, "loss_1", height=300)
    st.plotly_chart(figure, key="plain")


def element_ids(at: AppTest) -> dict[str, str]:
    return {node.type: node.proto.id for node in at.main.children.values()}


def live_payload(at: AppTest) -> dict:
    live = [n for n in at.main.children.values() if n.type == "bidi_component"][0]
    return json.loads(live.proto.json)


def test_the_live_chart_keeps_its_element_id_while_plotly_chart_gets_a_new_one():
    at = AppTest.from_function(two_charts_script, default_timeout=60).run()
    assert not at.exception
    first, first_data = element_ids(at), live_payload(at)
    at.run()
    second = element_ids(at)
    assert second["bidi_component"] == first["bidi_component"]  # the same element: patched
    assert second["plotly_chart"] != first["plotly_chart"]  # a new element: remounted
    data = live_payload(at)
    assert drawn_figure([first_data, data])["data"][0]["y"] == [0, 1, 4]  # the second run's
    assert data["height"] == 300 and data["revision"] == 2
    # only the new point travelled: a patch on revision 1
    assert "figure" not in data and data["base"] == 1
    assert json.loads(data["patch"])["traces"] == [{"keep": {"x": 2, "y": 2},
                                                    "tail": {"x": [2], "y": [4]}}]


def test_the_payload_is_plotly_json_without_the_template():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3.5, 4.5], name="train loss"),
                    layout={"title": {"text": "Loss"}, "uirevision": 7})
    payload = figure_payload(fig, 340, revision=5)
    figure = json.loads(payload["figure"])
    assert "template" not in figure["layout"] and fig.layout.template is not None
    assert figure["data"][0]["y"] == [3.5, 4.5] and figure["layout"]["uirevision"] == 7
    assert (payload["height"], payload["revision"]) == (340, 5)
    as_dict = figure_payload({"data": [{"type": "scatter", "y": [1.0]}],
                              "layout": {"template": {"x": 1}, "height": 9}}, 200)
    assert json.loads(as_dict["figure"]) == {"data": [{"type": "scatter", "y": [1.0]}],
                                             "layout": {"height": 9}}
    assert BUNDLE_ROUTE == "component/components.live_chart.plotly_js/plotly.min.js"


def test_long_numeric_arrays_go_as_exact_typed_arrays():
    rng = np.random.default_rng(3)
    steps = list(range(100, 100 * (2_000 + 1), 100))
    losses = [float(v) for v in rng.random(2_000).astype(np.float32)] + [float("nan")]
    grid = rng.normal(size=(500, 64)).tolist()
    fig = {"data": [
        {"type": "scatter", "x": steps + [2 ** 31], "y": losses, "name": "train loss"},
        {"type": "heatmap", "z": grid, "x": steps[:64], "y": [str(i) for i in range(500)]},
        {"type": "scatter", "x": list(range(PACK_FROM - 1)), "y": [None] * (PACK_FROM - 1)},
        {"type": "scatter", "x": list(range(40)), "y": [None, *range(39)], "customdata":
            [True] * 40},
    ]}
    payload = json.loads(figure_payload(fig, 340)["figure"])["data"]
    line, heat, short, gaps = payload
    assert line["x"]["dtype"] == "f8"  # 2**31 does not fit int32: exact as float64
    assert decoded(line["x"]).tolist() == steps + [2 ** 31]
    assert line["y"]["dtype"] == "f8" and np.array_equal(decoded(line["y"]), losses,
                                                         equal_nan=True)
    assert heat["z"]["shape"] == "500, 64" and decoded(heat["z"]).tolist() == grid
    assert heat["x"]["dtype"] == "i4" and decoded(heat["x"]).tolist() == steps[:64]
    assert heat["y"] == [str(i) for i in range(500)]  # text stays text
    assert short["x"] == list(range(PACK_FROM - 1))  # short arrays stay JSON lists
    assert gaps["y"] == [None, *range(39)] and gaps["customdata"] == [True] * 40
    # the JSON is smaller: ~10.7 characters per float64 against ~19 for its text
    assert len(json.dumps(line["y"])) < 0.6 * len(json.dumps(losses))


def test_a_refresh_sends_only_the_points_added_since_the_previous_one():
    steps = np.arange(1, 501)
    loss = 1.0 / steps

    def fig(n, name="train loss", every=1):
        return {"data": [{"type": "scatter", "x": steps[:n:every], "y": loss[:n:every],
                          "name": name},
                         {"type": "scatter", "x": [0, 1, n], "y": [3.0, 2.0, 2.0]}],
                "layout": {"title": {"text": "Loss"}}}

    first, sent = chart_payload(fig(400), "loss_1", 340, 1, None)
    payloads = [first]
    second, sent = chart_payload(fig(450), "loss_1", 340, 2, sent)
    payloads.append(second)
    patch = json.loads(second["patch"])
    assert second["base"] == 1 and patch["layout"] is None
    assert patch["traces"][0]["keep"] == {"x": 400, "y": 400}
    assert decoded(patch["traces"][0]["tail"]["y"]).tolist() == loss[400:450].tolist()
    assert patch["traces"][1] == {"keep": {"x": 2, "y": 3}, "tail": {"x": [450], "y": []}}
    assert len(second["patch"]) < 0.2 * len(first["figure"])
    drawn = drawn_figure(payloads)
    assert drawn["data"][0]["y"] == loss[:450].tolist() and drawn["data"][1]["x"] == [0, 1, 450]
    # nothing new: an empty patch; a re-thinned curve or another trace property: all of it
    same, sent = chart_payload(fig(450), "loss_1", 340, 3, sent)
    assert json.loads(same["patch"])["traces"] == [None, None]
    thinned, sent = chart_payload(fig(450, every=2), "loss_1", 340, 4, sent)
    assert "figure" in thinned
    assert drawn_figure([thinned])["data"][0]["x"] == steps[:450:2].tolist()
    renamed, sent = chart_payload(fig(450, name="raw"), "loss_1", 340, 5, sent)
    assert "figure" in renamed
    layout = fig(451)
    layout["layout"]["yaxis"] = {"type": "log"}
    moved, _ = chart_payload(layout, "loss_1", 340, 6, sent)
    drawn = drawn_figure([renamed, moved])
    assert drawn["layout"]["yaxis"] == {"type": "log"} and len(drawn["data"][0]["y"]) == 451
    # a plotly Figure of NumPy arrays (typed arrays in its JSON) is patched the same way
    figure = go.Figure(go.Scatter(x=steps[:300], y=loss[:300]))
    _, sent = chart_payload(figure, "loss_2", 340, 1, None)
    grown, _ = chart_payload(go.Figure(go.Scatter(x=steps[:310], y=loss[:310])), "loss_2",
                             340, 2, sent)
    assert json.loads(grown["patch"])["traces"] == [{"keep": {"x": 300, "y": 300}, "tail": {
        "x": steps[300:310].tolist(), "y": loss[300:310].tolist()}}]


@pytest.mark.parametrize("height", [MIN_HEIGHT - 1, MAX_HEIGHT + 1, 340.0, True, "340"])
def test_a_bad_height_is_refused_naming_the_field(height):
    with pytest.raises(ValueError, match=rf"height={height!r} refused: must be an int in "
                                         rf"\[{MIN_HEIGHT}, {MAX_HEIGHT}\] \(pixels\)"):
        figure_payload(go.Figure(), height)


@pytest.fixture
def live_run(tmp_path, monkeypatch):
    """A store with one run that looks live (status running, recent heartbeat)."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore()
    return store, add_fake_run(store, status="running", steps=40)


def test_the_train_page_patches_its_charts_while_a_run_is_live(live_run):
    store, run_id = live_run
    at = open_page(app_test(default_timeout=60), "train")
    at.session_state["run_select"] = run_id
    at.run()
    assert not at.exception, at.exception
    keys = {node.proto.id for node in at.get("bidi_component")}
    assert any(k.endswith(f"loss_{run_id}") for k in keys), keys
    assert any(k.endswith(f"accuracy_{run_id}") for k in keys), keys
    assert any(k.endswith(f"hypers_{run_id}") for k in keys), keys
    plain_ids = {node.proto.id for node in at.get("plotly_chart")}
    assert not any(f"loss_{run_id}" in k for k in plain_ids)
    loss_node = next(n for n in at.get("bidi_component") if n.proto.id.endswith(f"loss_{run_id}"))
    loss_data = json.loads(loss_node.proto.json)
    loss = json.loads(loss_data["figure"])
    assert [t["name"] for t in loss["data"]][:2] == ["train loss", "val loss"]
    assert loss["layout"]["yaxis"].get("type") != "log"
    # the log-axis toggle mid-run: the same element, now on a log axis
    at.checkbox(key=f"logy_{run_id}").check().run()
    assert not at.exception, at.exception
    again = next(n for n in at.get("bidi_component") if n.proto.id.endswith(f"loss_{run_id}"))
    assert again.proto.id == loss_node.proto.id
    drawn = drawn_figure([loss_data, json.loads(again.proto.json)])
    assert drawn["layout"]["yaxis"]["type"] == "log"
    assert [t["name"] for t in drawn["data"]][:2] == ["train loss", "val loss"]


def test_a_finished_run_is_drawn_with_plotly_chart(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    run_id = add_fake_run(RunStore(), status="finished", steps=30)
    at = open_page(app_test(default_timeout=60), "train")
    at.session_state["run_select"] = run_id
    at.run()
    assert not at.exception, at.exception
    assert not list(at.get("bidi_component"))
    assert any(f"loss_{run_id}" in n.proto.id for n in at.get("plotly_chart"))
