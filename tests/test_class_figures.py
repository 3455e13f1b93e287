"""The class board's pure figure builders, with numbers: which traces, in which order and width,
which axis values (log10, the `none` tick of a missing hyperparameter), the leaderboard's
columns, and a hostile nickname escaped."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from components import class_figures as cf
from components.class_text import markdown_text

CURVES = pd.DataFrame(
    [(run, step, "train_loss", 2.0 / (run * step)) for run in (1, 2, 3) for step in (1, 2, 3)]
    + [(1, 2, "val_loss", 9.0)], columns=["run_id", "step", "name", "value"])
HOSTILE = "<img src=x onerror=alert(1)>"
RUNS = pd.DataFrame({
    "rank": [1.0, 2.0, np.nan], "nickname": ["Ada", HOSTILE, "Cy"], "run_id": [1, 2, 3],
    "optimizer": ["adam", "sgd", "adam"], "score": [0.5, 0.8, np.nan],
    "val_loss": [0.5, 0.8, 1.2], "val_accuracy": [0.9, 0.8, 0.7], "step": [30, 30, 12],
    "total_steps": [30, 30, 30], "status": ["finished", "finished", "running"],
    "pinned": [False, True, False], "learning_rate": [1e-3, 1e-1, 1e-2],
    "momentum": [np.nan, 0.9, np.nan], "owner": ["a", "b", "c"]})


def test_overlay_draws_every_run_pinned_last_thick_and_escaped():
    labels = {i: cf.run_label(n, i) for i, n in zip(RUNS["run_id"], RUNS["nickname"])}
    fig = cf.loss_overlay_figure(CURVES, labels, pinned=[2])
    assert [t.name for t in fig.data] == ["Ada #1", "Cy #3",
                                          "&lt;img src=x onerror=alert(1)&gt; #2"]
    assert [t.line.width for t in fig.data] == [cf.OTHER_WIDTH, cf.OTHER_WIDTH, cf.PINNED_WIDTH]
    assert [t.showlegend for t in fig.data] == [False, False, True]
    assert fig.data[2].line.color == cf.PINNED_COLORS[0]
    assert list(fig.data[0].y) == pytest.approx([2.0, 1.0, 2 / 3])  # train loss of run 1 only
    assert list(fig.data[2].x) == [1, 2, 3]
    assert "<img" not in fig.to_json()
    assert fig.layout.title.text.startswith("train_loss of every run (3)")
    empty = cf.loss_overlay_figure(CURVES.iloc[:0], labels)
    assert not empty.data and empty.layout.annotations[0].text == "waiting for data..."


def test_parcoords_axes_are_live_hyperparameters_the_metric_now_and_the_score():
    fig = cf.parcoords_figure(RUNS, ["learning_rate", "momentum"], "val loss at step 20 (nats)",
                              log_hypers={"learning_rate"})
    (trace,) = fig.data
    dims = trace.dimensions
    assert [d.label for d in dims] == ["optimizer", "log10 learning_rate", "momentum",
                                       "val loss now (nats)", "val loss at step 20 (nats)"]
    assert list(dims[0].values) == [0, 1, 0] and list(dims[0].ticktext) == ["adam", "sgd"]
    assert list(dims[1].values) == pytest.approx([-3.0, -1.0, -2.0])
    # adam has no momentum: one value 0.9 (span 1), the others just below at the `none` tick
    assert list(dims[2].values) == pytest.approx([0.75, 0.9, 0.75])
    assert dims[2].ticktext[0] == cf.MISSING and dims[2].tickvals[0] == pytest.approx(0.75)
    assert list(dims[3].values) == [0.5, 0.8, 1.2] and list(trace.line.color) == [0.5, 0.8, 1.2]
    # Cy has no score yet: 0.15 of the scores' span (0.3) below the best, at `not yet`
    assert list(dims[4].values) == pytest.approx([0.5, 0.8, 0.455])
    assert dims[4].ticktext[0] == "not yet"
    assert not trace.line.reversescale
    assert fig.layout.title.text == "hyperparameters against the score (2 of 3 runs scored)"


def test_parcoords_before_any_score_and_before_any_validation():
    fig = cf.parcoords_figure(RUNS.assign(score=np.nan), ["learning_rate"], "score",
                              now_column="val_accuracy", now_label="val acc now",
                              higher_is_better=True)
    assert [d.label for d in fig.data[0].dimensions] == ["optimizer", "learning_rate",
                                                         "val acc now"]  # no score axis yet
    assert fig.data[0].line.reversescale  # higher accuracy is better: dark
    empty = cf.parcoords_figure(RUNS.assign(score=np.nan, val_loss=np.nan), ["learning_rate"],
                                "score")
    assert not empty.data and empty.layout.annotations[0].text == "waiting for data..."
    one = cf.parcoords_figure(RUNS[RUNS["optimizer"] == "adam"], ["learning_rate"], "s")
    assert [d.label for d in one.data[0].dimensions] == ["learning_rate",
                                                         "val loss now (nats)", "s"]


def test_leaderboard_frame_columns_and_values():
    table = cf.leaderboard_frame(RUNS, ["learning_rate", "momentum"])
    assert list(table.columns) == ["rank", "nickname", "run", "optimizer", "learning_rate",
                                   "momentum", "score", "val loss now", "val acc now", "step",
                                   "status", "pinned"]
    assert table["rank"].tolist()[:2] == [1, 2] and table["rank"].iloc[2] is pd.NA
    assert table["pinned"].tolist() == [False, True, False]
    assert table["nickname"].iloc[1] == HOSTILE  # a text cell: shown as typed, never rendered
    assert math.isnan(table["momentum"].iloc[0])


@pytest.mark.parametrize("text, shown", [
    (HOSTILE, r"&lt;img src\=x onerror\=alert\(1\)&gt;"),
    ("**bold** [a](javascript:x)", r"\*\*bold\*\* \[a\]\(javascript\:x\)"),
    (":red[x] $y$", r"\:red\[x\] \$y\$"),
    ("Ada", "Ada"),
])
def test_markdown_text_shows_typed_text_literally(text, shown):
    assert markdown_text(text) == shown
