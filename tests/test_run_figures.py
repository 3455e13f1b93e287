"""The pure builders of the Runs page: config differences, legend names, table, overlays."""

from __future__ import annotations

import json

import pandas as pd

from components import run_figures as rf

ADAM = {"optimizer": "adam", "hyperparameters": {"learning_rate": 0.001, "beta_1": 0.9},
        "options": {"amsgrad": False}, "dataset": "digits", "seed": 0, "device": ""}
SGD = {"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.1, "momentum": 0.0},
       "options": {"nesterov": False}, "dataset": "digits", "seed": 0, "device": "/device:CPU:0"}


def test_differing_fields_compares_leaves_and_missing_fields():
    other = {**ADAM, "hyperparameters": {**ADAM["hyperparameters"], "learning_rate": 0.01}}
    assert rf.differing_fields([ADAM, other]) == ["hyperparameters.learning_rate"]
    assert rf.differing_fields([ADAM, SGD]) == [
        "optimizer", "hyperparameters.learning_rate", "hyperparameters.beta_1",
        "options.amsgrad", "device", "hyperparameters.momentum", "options.nesterov"]
    assert rf.differing_fields([ADAM, dict(ADAM)]) == []
    assert rf.differing_fields([ADAM]) == []


def test_legend_fields_drop_device_and_fields_implied_by_the_optimizer():
    assert rf.legend_fields([ADAM, SGD]) == ["optimizer", "hyperparameters.learning_rate"]
    seeded = {**ADAM, "seed": 7}
    assert rf.legend_fields([ADAM, seeded, SGD]) == [
        "optimizer", "hyperparameters.learning_rate", "seed"]


def test_run_labels_name_what_differs():
    labels = rf.run_labels([3, 4], [ADAM, SGD], ["", "fast"])
    assert labels == {3: "#3 adam, lr=0.001",
                      4: "#4 fast sgd, lr=0.1"}
    assert rf.run_labels([1, 2], [ADAM, ADAM]) == {1: "#1", 2: "#2"}


def _runs() -> pd.DataFrame:
    return pd.DataFrame({
        "id": [2, 1], "name": ["b", "a"], "created": [1.7e9 + 60, 1.7e9], "updated": [0, 0],
        "status": ["running", "finished"], "message": ["", ""], "optimizer": ["sgd", "adam"],
        "dataset": ["digits", "moons"], "model": ["mlp", "logistic"], "seed": [0, 1],
        "device": ["", ""], "step": [5, 30], "total_steps": [100, 30],
        "config": [json.dumps(SGD), json.dumps(ADAM)],
    })


def test_overview_table_joins_final_metrics_and_key_hyperparameters():
    finals = pd.DataFrame({"run_id": [1, 1], "name": ["val_loss", "val_accuracy"],
                           "step": [30, 30], "value": [0.25, 0.9]})
    table = rf.overview_table(_runs(), finals)
    assert list(table["id"]) == [2, 1]
    assert table.loc[1, "val_loss"] == 0.25 and table.loc[1, "val_accuracy"] == 0.9
    assert pd.isna(table.loc[0, "val_loss"])
    assert table.loc[1, "hyperparameters"] == "learning_rate=0.001, beta_1=0.9"
    assert table.loc[0, "learning_rate"] == 0.1
    assert str(table.loc[1, "created"]) == "2023-11-14 22:13:20"
    assert rf.overview_table(_runs().iloc[:0], finals).empty


def test_filter_table_by_text_status_and_optimizer():
    table = rf.overview_table(_runs(), pd.DataFrame(columns=["run_id", "name", "step", "value"]))
    assert list(rf.filter_table(table, "MOONS")["id"]) == [1]
    assert list(rf.filter_table(table, "beta_1")["id"]) == [1]
    assert list(rf.filter_table(table, statuses=["running"])["id"]) == [2]
    assert list(rf.filter_table(table, optimizers=["adam", "sgd"])["id"]) == [2, 1]
    assert rf.filter_table(table, "nothing like this").empty


def _scalars(scale: float) -> pd.DataFrame:
    rows = [(s, "train_loss", scale / s) for s in range(1, 11)]
    rows += [(s, "val_loss", scale / (s + 1)) for s in (0, 5, 10)]
    rows += [(s, "val_accuracy", s / 10) for s in (0, 5, 10)]
    return pd.DataFrame(rows, columns=["step", "name", "value"])


LABELS = {1: "#1 lr=0.1", 2: "#2 lr=0.01"}


def test_overlay_loss_one_colour_per_run_and_uirevision():
    fig = rf.overlay_loss_figure({1: _scalars(1.0), 2: _scalars(2.0)}, LABELS, uirevision="1-2")
    assert [t.name for t in fig.data] == ["#1 lr=0.1 · train", "#1 lr=0.1 · val",
                                          "#2 lr=0.01 · train", "#2 lr=0.01 · val"]
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color
    assert list(fig.data[2].y[:2]) == [2.0, 1.0]
    assert list(fig.data[1].x) == [0, 5, 10] and fig.data[1].line.dash == "dot"
    assert fig.layout.uirevision == "1-2"
    assert rf.overlay_loss_figure({1: _scalars(1.0)}, LABELS, log_y=True).layout.yaxis.type == "log"


def test_overlay_validation_two_rows():
    fig = rf.overlay_validation_figure({1: _scalars(1.0), 2: _scalars(2.0)}, LABELS)
    assert len(fig.data) == 4
    assert [t.yaxis for t in fig.data] == ["y", "y2", "y", "y2"]
    assert list(fig.data[1].y) == [0.0, 0.5, 1.0]
    assert [t.showlegend for t in fig.data] == [True, False, True, False]


def test_overlay_hyper_traces_step_function_to_last_step():
    changes = {
        1: pd.DataFrame({"step": [1, 1, 6], "name": ["learning_rate", "beta_1", "learning_rate"],
                         "new": [0.1, 0.9, 0.05]}),
        2: pd.DataFrame({"step": [1], "name": ["learning_rate"], "new": [0.01]}),
    }
    fig = rf.overlay_hyper_figure(changes, {1: 10, 2: 8}, LABELS, uirevision="u")
    lr1, beta1, lr2 = fig.data
    assert list(lr1.x) == [1, 6, 10] and list(lr1.y) == [0.1, 0.05, 0.05]
    assert lr1.line.shape == "hv" and beta1.yaxis == "y2"
    assert list(lr2.x) == [1, 8] and lr2.name == "#2 lr=0.01"
    assert [a.text for a in fig.layout.annotations] == ["learning_rate", "beta_1"]
    assert fig.layout.uirevision == "u"


def test_overlay_slot_figure_picks_variable_slot_and_statistic():
    stats = pd.DataFrame({"step": [1, 2, 1, 2], "variable": ["k", "k", "k", "b"],
                          "slot": ["m", "m", "v", "m"], "norm": [1.0, 2.0, 3.0, 4.0],
                          "mean": [0.1, 0.2, 0.3, 0.4], "std": [0.0] * 4})
    fig = rf.overlay_slot_figure({1: stats, 2: stats.iloc[:0]}, "k", "m", LABELS, "mean")
    assert len(fig.data) == 1 and list(fig.data[0].y) == [0.1, 0.2]
    assert fig.layout.title.text == "mean of slot m of k"


def test_overlay_hypergradient_figure_draws_the_exact_values():
    grads = pd.DataFrame({"step": [1, 2, 1], "name": ["learning_rate"] * 2 + ["beta_1"],
                          "exact": [0.5, 0.25, -1.0], "one_step": [0.4, 0.2, -0.9],
                          "reverse": [None, None, None], "val_loss": [1.0, 0.9, 1.0]})
    fig = rf.overlay_hypergradient_figure({1: grads, 2: pd.DataFrame()}, LABELS)
    assert [list(t.y) for t in fig.data] == [[0.5, 0.25], [-1.0]]
    assert [a.text for a in fig.layout.annotations] == ["dL_val/dlearning_rate", "dL_val/dbeta_1"]
    empty = rf.overlay_hypergradient_figure({1: pd.DataFrame({"x": [1]})}, LABELS)
    assert not empty.data and empty.layout.annotations[0].text == "waiting for data..."


# ----- names typed by users are text, never markup ---------------------------------------------
HOSTILE = '<a href="https://example.invalid/x">x</a>'
ESCAPED = '&lt;a href="https://example.invalid/x"&gt;x&lt;/a&gt;'


def _strings(node):
    """Every string in a figure's JSON document."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _assert_escaped(fig, expected: int = 1) -> None:
    strings = list(_strings(json.loads(fig.to_json())))
    assert not [t for t in strings if "<a" in t or "</a>" in t], strings
    assert sum(ESCAPED in t for t in strings) >= expected, strings


def test_user_names_are_escaped_in_every_figure():
    from components import figures as fg
    from components import slot_figures
    from components import hypergrad_figures as hf

    labels = rf.run_labels([1, 2], [ADAM, SGD], names=[HOSTILE, "plain"])
    assert labels[1].startswith("#1 " + HOSTILE)  # labels stay plain text; figures escape
    scalars = pd.DataFrame({"step": [1, 2, 0, 2], "name": ["train_loss"] * 2 + ["val_loss"] * 2,
                            "value": [1.0, 0.5, 1.2, 0.6]})
    loss = rf.overlay_loss_figure({1: scalars}, labels)
    _assert_escaped(loss, expected=2)  # train and val traces of run 1
    assert loss.data[0].name == f"#1 {ESCAPED} adam, lr=0.001 · train"
    _assert_escaped(rf.overlay_validation_figure({1: scalars}, labels))
    changes = pd.DataFrame({"step": [1, 5], "name": [HOSTILE] * 2, "old": [None, 0.1],
                            "new": [0.1, 0.2], "source": ["init", HOSTILE]})
    _assert_escaped(rf.overlay_hyper_figure({1: changes}, {1: 9}, labels), expected=2)
    _assert_escaped(fg.hyper_trace_figure(changes, 9), expected=3)
    stats = pd.DataFrame({"step": [1], "variable": [HOSTILE], "slot": [HOSTILE], "norm": [1.0],
                          "mean": [0.0], "std": [1.0]})
    _assert_escaped(rf.overlay_slot_figure({1: stats}, HOSTILE, HOSTILE, labels, "norm"))
    _assert_escaped(slot_figures.slot_rows_figure(stats, HOSTILE), expected=2)
    histograms = pd.DataFrame({"step": [1], "lo": [0.0], "hi": [1.0], "counts": [[1, 2]]})
    _assert_escaped(slot_figures.distribution_heatmap(histograms, title=f"m of {HOSTILE}"))
    grads = pd.DataFrame({"step": [1, 2], "name": [HOSTILE] * 2, "exact": [1.0, 2.0],
                          "one_step": [1.0, 1.5], "reverse": [None, 2.0], "val_loss": [1.0, 0.9]})
    _assert_escaped(rf.overlay_hypergradient_figure({1: grads}, labels), expected=2)
    _assert_escaped(hf.hypergradient_figure(grads), expected=3)
    rows = pd.DataFrame({"request_id": 1, "step": 3, "name": HOSTILE, "value": [0.5, 1.0, 2.0],
                         "loss": [1.0, 0.9, 1.1], "hypergradient": [None, -0.1, None],
                         "center": [0, 1, 0]})
    _assert_escaped(hf.response_slice_figure(rows), expected=3)


def test_slot_caption_names_the_optimizer_shown():
    from components.run_panels import slot_caption

    sgd = slot_caption("sgd", ["momentum", "update"])
    assert "sgd actually applied" in sgd and "`momentum`" in sgd and "Adam" not in sgd
    assert "for Adam" in slot_caption("adam", ["m", "v", "update"])
    assert "rmsprop creates no slot" in slot_caption("rmsprop", ["update"])


def test_overlay_loss_marks_where_recording_turns_to_means():
    """Past step 1,000 a train-loss point is a 10-step mean: the overlay says so where its
    runs reach it, as the Train page's loss chart does."""
    short = pd.DataFrame({"step": [1, 500, 900], "name": "train_loss", "value": [2.0, 1.0, 0.5]})
    long = pd.DataFrame({"step": [1, 1_000, 12_000], "name": "train_loss",
                         "value": [2.0, 1.0, 0.5]})
    assert not rf.overlay_loss_figure({1: short}, LABELS).layout.shapes
    fig = rf.overlay_loss_figure({1: short, 2: long}, LABELS)
    assert [shape.x0 for shape in fig.layout.shapes] == [1_000, 10_000]
    assert [a.text for a in fig.layout.annotations] == ["10-step means from here",
                                                       "100-step means from here"]


def _changes(rows: list[tuple[int, str, float, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["step", "name", "old", "new", "source"])


def test_runs_steered_differently_differ_in_their_trajectories():
    """Two runs from the same config: three live changes and a schedule switch on one, none
    on the other. Their configs are equal; their trajectories are not."""
    start = [(0, "learning_rate", None, 0.01, "init"), (0, "beta_1", None, 0.9, "init")]
    steered = _changes(start + [(120, "learning_rate", 0.01, 0.003, "user"),
                                (300, "beta_1", 0.9, 0.5, "user"),
                                (300, "step traces", 1, 2, "user: constant -> ExponentialDecay"),
                                (300, "lr_schedule.decay_rate", None, 0.5, "user"),
                                (450, "learning_rate", 0.003, 0.01, "auto-tune")])
    plain = _changes(start)
    assert rf.differing_fields([{"optimizer": "adam"}, {"optimizer": "adam"}]) == []
    assert rf.trajectory_differences({1: steered, 2: plain}) == [
        "learning_rate", "beta_1", "lr_schedule.decay_rate"]
    assert rf.trajectory_differences({1: steered, 2: steered.copy()}) == []
    # the same name changed to the same value at another step differs too
    later = _changes(start + [(121, "learning_rate", 0.01, 0.003, "user")])
    early = _changes(start + [(120, "learning_rate", 0.01, 0.003, "user")])
    assert rf.trajectory_differences({1: early, 2: later}) == ["learning_rate"]
    table = rf.live_changes_table({1: steered, 2: plain}, LABELS)
    assert list(table.columns) == ["run", "step", "name", "old", "new", "source"]
    assert table["run"].tolist() == ["#1 lr=0.1"] * 4  # init rows and retrace counts left out
    assert table["step"].tolist() == [120, 300, 300, 450]
    assert rf.live_changes_table({2: plain}, LABELS).empty
