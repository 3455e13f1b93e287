"""The range test's and the path landscape's figures (pure builders) and views (AppTest, rows
written straight into a store: no TensorFlow, no run process)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from components import diagnostic_figures as figures
from engine import lr_range
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from streamlit.testing.v1 import AppTest

from tests._pages import page_test


def sweep_rows(request_id: int = 1, steps: int = 80) -> list[tuple]:
    rates = lr_range.rates(1e-4, 10.0, steps)
    x = np.log10(rates)
    losses = 2.0 - np.tanh(2 * (x + 2.5)) + np.exp(4 * (x + 0.2))  # falls, then blows up
    return [(request_id, k + 1, float(r), float(v)) for k, (r, v) in enumerate(zip(rates, losses))
            if v < 3000]


def test_range_figure_marks_what_the_analysis_found():
    rows = pd.DataFrame(sweep_rows(), columns=["request_id", "step", "learning_rate", "loss"])
    result = lr_range.analyse(rows["learning_rate"], rows["loss"])
    fig = figures.lr_range_figure(rows, result)
    assert [t.name for t in fig.data[:2]] == ["loss", f"smoothed (β = {lr_range.SMOOTHING})"]
    np.testing.assert_allclose(fig.data[1].y, lr_range.smooth(rows["loss"].tolist()))
    marks = {t.line.color: t.x for t in fig.data[2:]}  # vertical lines in data coordinates
    assert marks["#2ca02c"] == pytest.approx((result.steepest,) * 2)
    assert marks["#d62728"] == pytest.approx((result.divergence,) * 2)
    assert marks["#7f7f7f"] == pytest.approx((result.blowup,) * 2)
    assert fig.layout.xaxis.type == "log"


def test_landscape_figures_draw_the_grid_the_paths_and_the_lines():
    axis = np.linspace(-1, 1, 5)
    grid = pd.DataFrame([(x, y, 1 + x * x + 2 * y * y) for x in axis for y in axis],
                        columns=["x", "y", "loss"])
    path = pd.DataFrame({"step": [0, 5, 10], "x": [0.0, 0.01, 0.02], "y": [0.0, -0.01, 0.0],
                         "loss": [2.3, 1.0, 0.5]})
    fig = figures.landscape_figure(grid, {"#1 adam": path})
    contour = fig.data[0]
    assert contour.type == "contour" and np.asarray(contour.z).shape == (5, 5)
    assert np.asarray(contour.z)[4, 0] == pytest.approx(math.log10(1 + 1 + 2))  # y=1, x=-1
    assert list(fig.data[1].x) == [0.0, 0.01, 0.02]
    line = pd.DataFrame({"x": [0.0, 0.5, 1.0], "loss": [2.3, 1.0, 0.5]})
    assert list(figures.line_figure({"#1": line}).data[0].y) == [2.3, 1.0, 0.5]


def landscape_run(store: RunStore, optimizer: str) -> int:
    config = RunConfig(optimizer=optimizer, dataset="digits", model="logistic", steps=40,
                       path_landscape=7).to_json_dict()
    run_id = store.create_run(config)
    axis = np.linspace(-1, 1, 21)
    grid = [(0, "grid", float(x), float(y), 2.0 + x * x + y * y) for y in axis for x in axis]
    scale = 1.0 if optimizer == "adam" else 0.5
    path = [(s, "path", 0.001 * s * scale, -0.0005 * s, 2.0 - s / 40) for s in range(0, 41, 10)]
    line = [(40, "line", t, 0.0, 2.0 - t + t * t) for t in (0.0, 0.5, 1.0)]
    store.append(run_id, landscape=(grid if optimizer == "adam" else []) + path + line
                 + [(40, "distance", 3.5, 0.012, None)], step=40)
    store.set_status(run_id, "finished")
    return run_id


def test_the_landscape_page_compares_runs_from_the_same_start(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore()
    first, second = landscape_run(store, "adam"), landscape_run(store, "sgd")
    # the view alone: the Landscape page's test functions would import TensorFlow first
    at = AppTest.from_string("from components.path_landscape_panel import section\n"
                             "from components.page_store import store\n"
                             "section(store())\n", default_timeout=120)
    at.session_state["pl_run"] = second
    at.session_state["pl_others"] = [first]
    at.run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert f"computed by run #{first}'s process" in text  # the second run reuses the grid
    assert "of which the plane shows **1.2%**" in text
    assert f"#{second} sgd" in at.selectbox(key="pl_run").format_func(second)


def test_the_train_page_shows_a_finished_range_test(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    from tests.fake_runs import add_fake_run

    store = RunStore()
    run_id = add_fake_run(store)
    command_id = store.send_command(run_id, "lr_range", {"lr_min": 1e-4, "lr_max": 10.0,
                                                         "steps": 80, "start": "current"})
    store.append(run_id, lr_range=sweep_rows(command_id))
    store.finish_command(command_id, "done", "", 31)
    at = page_test("train", default_timeout=120)
    at.session_state["run_select"] = run_id
    at.run()
    assert not at.exception, at.exception
    rows = store.lr_range(run_id, command_id)
    result = lr_range.analyse(rows["learning_rate"], rows["loss"])
    shown = " ".join(m.value for m in at.markdown)
    assert f"divergence point **{result.divergence:.3g}**" in shown
    assert f"steepest descent **{result.steepest:.3g}**" in shown
