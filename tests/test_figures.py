"""The pure figure builders: traces, values, re-binning and uirevision from hand-made frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components import figures, slot_figures


@pytest.fixture
def scalars() -> pd.DataFrame:
    return pd.DataFrame({
        "step": [1, 2, 3, 2, 3, 2],
        "name": ["train_loss", "train_loss", "train_loss", "val_loss", "val_loss", "val_accuracy"],
        "value": [2.3, 2.0, 1.5, 2.1, 1.7, 0.4],
    })


def test_loss_figure_has_train_and_val_lines(scalars):
    fig = figures.loss_figure(scalars, uirevision=7)
    assert [t.name for t in fig.data] == ["train loss", "val loss"]
    assert list(fig.data[0].x) == [1, 2, 3] and list(fig.data[0].y) == [2.3, 2.0, 1.5]
    assert list(fig.data[1].x) == [2, 3] and list(fig.data[1].y) == [2.1, 1.7]
    assert fig.layout.uirevision == 7
    assert fig.layout.yaxis.type == "linear"
    assert figures.loss_figure(scalars, log_y=True).layout.yaxis.type == "log"


def test_loss_figure_sorts_by_step():
    frame = pd.DataFrame({"step": [3, 1, 2], "name": ["train_loss"] * 3, "value": [3.0, 1.0, 2.0]})
    fig = figures.loss_figure(frame)
    assert list(fig.data[0].x) == [1, 2, 3] and list(fig.data[0].y) == [1.0, 2.0, 3.0]


def test_accuracy_figure(scalars):
    fig = figures.accuracy_figure(scalars, uirevision="run-3")
    assert len(fig.data) == 1 and fig.data[0].name == "val accuracy"
    assert list(fig.data[0].x) == [2] and list(fig.data[0].y) == [0.4]
    assert fig.layout.uirevision == "run-3"
    assert fig.layout.yaxis.range is None  # autoranged around the points


def test_a_single_train_loss_point_is_drawn_as_a_marker_then_the_curve_as_a_line():
    one = pd.DataFrame({"step": [1], "name": ["train_loss"], "value": [2.3]})
    assert figures.loss_figure(one).data[0].mode == "markers"
    two = pd.DataFrame({"step": [1, 2], "name": ["train_loss"] * 2, "value": [2.3, 2.2]})
    assert figures.loss_figure(two).data[0].mode == "lines"


def test_an_empty_accuracy_plot_spans_zero_to_one_not_plotlys_default():
    fig = figures.accuracy_figure(pd.DataFrame(columns=["step", "name", "value"]))
    assert tuple(fig.layout.yaxis.range) == (0, 1)


@pytest.mark.parametrize("builder", [figures.loss_figure, figures.accuracy_figure])
def test_empty_scalars_give_no_traces_and_a_note(builder):
    fig = builder(pd.DataFrame(columns=["step", "name", "value"]), uirevision=1)
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text == figures.EMPTY_TEXT
    assert fig.layout.uirevision == 1


@pytest.fixture
def changes() -> pd.DataFrame:
    return pd.DataFrame({
        "step": [0, 0, 50, 80],
        "name": ["learning_rate", "beta_1", "learning_rate", "learning_rate"],
        "old": [None, None, 0.001, 0.01],
        "new": [0.001, 0.9, 0.01, 0.005],
        "source": ["init", "init", "user", "auto-tune"],
    })


def test_hyper_trace_one_row_per_hyperparameter(changes):
    fig = figures.hyper_trace_figure(changes, last_step=120, uirevision=4, log_names=("learning_rate",))
    assert fig.layout.uirevision == 4
    lines = [t for t in fig.data if t.mode == "lines"]
    markers = [t for t in fig.data if t.mode == "markers"]
    assert [t.name for t in lines] == ["learning_rate", "beta_1"]
    assert all(t.line.shape == "hv" for t in lines)
    lr = lines[0]
    assert list(lr.x) == [0, 50, 80, 120] and list(lr.y) == [0.001, 0.01, 0.005, 0.005]
    assert list(lines[1].x) == [0, 120] and list(lines[1].y) == [0.9, 0.9]
    assert len(markers) == 1 and list(markers[0].x) == [50, 80]
    assert list(markers[0].text) == ["0.001 -> 0.01, user", "0.01 -> 0.005, auto-tune"]
    # one subplot row each: the two lines use different y axes; lr is on a log axis
    assert lines[0].yaxis != lines[1].yaxis
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type != "log"


def test_hyper_trace_extends_past_last_change_only_forward(changes):
    fig = figures.hyper_trace_figure(changes, last_step=10)  # last_step before the last change
    assert list(fig.data[0].x)[-1] == 80


@pytest.mark.parametrize("last_step", [120, 10, 120])  # a later call, an earlier step, again
def test_hyper_trace_dict_is_the_figure_built_once(changes, last_step):
    import json

    as_dict = figures.hyper_trace_dict(changes, last_step, uirevision=4, log_names=("learning_rate",))
    fig = figures.hyper_trace_figure(changes, last_step, uirevision=4, log_names=("learning_rate",))
    assert json.dumps(as_dict, sort_keys=True, default=str) == \
        json.dumps(fig.to_plotly_json(), sort_keys=True, default=str)
    assert as_dict["data"][0]["x"] == [0, 50, 80, max(last_step, 80)]


def test_hyper_trace_empty():
    fig = figures.hyper_trace_figure(pd.DataFrame(columns=["step", "name", "old", "new", "source"]), 0, uirevision=2)
    assert len(fig.data) == 0 and fig.layout.uirevision == 2


def test_slot_rows_figure_one_row_per_slot_three_statistics():
    stats = pd.DataFrame({
        "step": [1, 1, 1, 2, 2, 2, 1],
        "variable": ["dense/kernel"] * 6 + ["dense/bias"],
        "slot": ["m", "v", "update"] * 2 + ["m"],
        "norm": [1.0, 2.0, 3.0, 1.5, 2.5, 3.5, 9.0],
        "mean": [0.1, 0.2, 0.3, 0.15, 0.25, 0.35, 9.0],
        "std": [0.01, 0.02, 0.03, 0.015, 0.025, 0.035, 9.0],
    })
    fig = slot_figures.slot_rows_figure(stats, "dense/kernel", uirevision=5)
    assert fig.layout.uirevision == 5
    assert len(fig.data) == 9  # 3 slots x 3 statistics
    by_axis = {}
    for trace in fig.data:
        by_axis.setdefault(trace.yaxis, []).append(trace)
    assert sorted(by_axis) == ["y", "y2", "y3"]  # one row per slot: m, v, update
    norm_m = next(t for t in by_axis["y"] if t.name == "L2 norm")
    std_update = next(t for t in by_axis["y3"] if t.name == "std")
    assert list(norm_m.x) == [1, 2] and list(norm_m.y) == [1.0, 1.5]
    assert list(std_update.y) == [0.03, 0.035]
    assert sum(bool(t.showlegend) for t in fig.data) == 3
    assert 9.0 not in [y for t in fig.data for y in t.y]  # other variable excluded


def _histograms() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for step, (lo, hi) in enumerate([(-1.0, 1.0), (-0.5, 2.0), (0.3, 0.3), (-3.0, -1.0)], start=1):
        rows.append({"step": step * 10, "lo": lo, "hi": hi, "counts": rng.integers(0, 50, 32).tolist()})
    return pd.DataFrame(rows)


def test_rebin_conserves_counts_and_places_mass():
    edges = np.linspace(-2.0, 2.0, 9)  # cells of width 0.5
    counts = [0] * 31 + [10]  # all mass in the top bin of [0, 1]
    out = slot_figures.rebin(0.0, 1.0, counts, edges)
    assert out.sum() == pytest.approx(10)
    assert out[5] == pytest.approx(10)  # [0.5, 1.0)
    flat = slot_figures.rebin(0.3, 0.3, [5] * 32, edges)
    assert flat.sum() == pytest.approx(160) and flat[4] == pytest.approx(160)
    split = slot_figures.rebin(-0.25, 0.25, [4], edges)  # one bin straddling two cells
    assert list(split[3:5]) == pytest.approx([2.0, 2.0])


def test_distribution_heatmap_rebins_on_common_grid_and_conserves_counts():
    hist = _histograms()
    fig = slot_figures.distribution_heatmap(hist, title="m of dense/kernel", uirevision=9, bins=40)
    assert fig.layout.uirevision == 9
    assert fig.layout.title.text == "m of dense/kernel"
    (heat,) = fig.data
    z = np.array(heat.z)
    assert z.shape == (40, 4)
    assert list(heat.x) == [10, 20, 30, 40]
    y = np.array(heat.y)
    assert y.min() > -3.0 and y.max() < 2.0 and y[0] < -2.9 and y[-1] > 1.9
    for column, counts in enumerate(hist["counts"]):
        assert z[:, column].sum() == pytest.approx(sum(counts))
    # the snapshot at step 40 lies in [-3, -1]: nothing above -1
    assert z[y > -1 + 0.2, 3].sum() == pytest.approx(0)


def test_distribution_heatmap_all_flat_and_empty():
    flat = pd.DataFrame({"step": [1, 2], "lo": [0.0, 0.0], "hi": [0.0, 0.0], "counts": [[3] * 32, [1] * 32]})
    z = np.array(slot_figures.distribution_heatmap(flat).data[0].z)
    assert z.sum(axis=0) == pytest.approx([96, 32])
    empty = slot_figures.distribution_heatmap(pd.DataFrame(columns=["step", "lo", "hi", "counts"]), uirevision=3)
    assert len(empty.data) == 0 and empty.layout.uirevision == 3


# ----- issue 13: markers, smoothing, decimation, log slots ------------------------------------
def test_loss_figure_marks_user_and_autotune_changes_not_init(scalars, changes):
    fig = figures.loss_figure(scalars, changes=changes)
    lines = [s for s in fig.layout.shapes if s.line.dash == "dot"]
    assert [s.x0 for s in lines] == [50, 80]  # the init rows at step 0 get no marker
    texts = [a.text for a in fig.layout.annotations]
    assert "learning_rate → 0.01" in texts and "learning_rate → 0.005" in texts
    assert [t.name for t in fig.data] == ["train loss", "val loss"]  # markers are no traces


def test_loss_figure_marks_where_recording_decimates():
    frame = pd.DataFrame({"step": [1, 999, 1000, 1010, 12_000], "name": ["train_loss"] * 5,
                          "value": [2.0, 1.0, 0.9, 0.8, 0.5]})
    dashed = [s.x0 for s in figures.loss_figure(frame).layout.shapes if s.line.dash == "dash"]
    assert dashed == [1_000, 10_000]
    assert not [s for s in figures.loss_figure(frame.head(2)).layout.shapes]


def test_decimation_steps_match_the_recording_schedule():
    recording = pytest.importorskip("engine.recording")
    for step in figures.DECIMATION_STEPS:
        assert recording.stride(step + 1) == 10 * recording.stride(step)


def test_ema_is_per_step_so_decimation_does_not_change_smoothness():
    every = figures.ema(list(range(1, 21)), [1.0] * 10 + [0.0] * 10, 0.9)
    tenth = figures.ema([10, 20], [1.0, 0.0], 0.9)
    assert every[-1] == pytest.approx(tenth[-1], abs=0.03)  # same weight for the same steps
    assert figures.ema([1, 2, 3], [4.0, 4.0, 4.0], 0.99) == pytest.approx([4.0, 4.0, 4.0])
    assert figures.ema([1, 2], [1.0, 3.0], 0.0) == [1.0, 3.0]
    with pytest.raises(ValueError, match=r"smoothing=1.0 refused: must be in \[0, 1\)"):
        figures.ema([1], [1.0], 1.0)


def test_loss_figure_smoothing_keeps_the_raw_curve_behind(scalars):
    fig = figures.loss_figure(scalars, smoothing=0.5)
    assert [t.name for t in fig.data] == ["train loss (raw)", "train loss", "val loss"]
    assert list(fig.data[0].y) == [2.3, 2.0, 1.5]
    assert fig.data[1].y[-1] > 1.5  # lags the raw value
    assert fig.data[0].opacity == pytest.approx(0.3)


def test_slot_rows_figure_log_axis_per_slot():
    stats = pd.DataFrame({
        "step": [1, 1, 1, 2, 2, 2],
        "variable": ["dense/kernel"] * 6,
        "slot": ["m", "v", "update"] * 2,
        "norm": [1.0, 1e-6, 3.0, 1.5, 2e-6, 3.5],
        "mean": [0.1, 1e-8, 0.3, 0.15, 2e-8, 0.35],
        "std": [0.01, 1e-8, 0.03, 0.015, 2e-8, 0.035],
    })
    log = slot_figures.default_log_slots(["m", "v", "update", "rms", "accumulator", "vhat"])
    assert log == ["v", "rms", "accumulator", "vhat"]
    fig = slot_figures.slot_rows_figure(stats, "dense/kernel", log)
    assert [fig.layout.yaxis.type, fig.layout.yaxis2.type, fig.layout.yaxis3.type] == \
        ["linear", "log", "linear"]
    assert len(fig.data) == 9 and sum(bool(t.showlegend) for t in fig.data) == 3
    v_norm = [t for t in fig.data if t.yaxis == "y2" and t.name == "L2 norm"][0]
    assert list(v_norm.y) == [1e-6, 2e-6]
    assert [a.text for a in fig.layout.annotations][:2] == ["m", "v (log axis)"]
    assert slot_figures.slot_rows_figure(stats, "other").layout.annotations[0].text == \
        figures.EMPTY_TEXT


def test_asinh_axis_is_labelled_in_real_units():
    from components.hypergrad_figures import asinh_ticks, hypergradient_figure

    values = np.array([-0.03, 0.002, 5.0, np.nan])
    tickvals, ticktext = asinh_ticks(values)
    assert ticktext == ["-10", "-1", "-0.1", "-0.01", "0", "0.01", "0.1", "1", "10"]
    np.testing.assert_allclose(np.sinh(tickvals), [float(t) for t in ticktext], rtol=1e-12)
    frame = pd.DataFrame({"step": [1, 2], "name": ["learning_rate"] * 2, "exact": [0.5, -20.0],
                          "one_step": [0.4, -2.0], "reverse": [np.nan, -19.0]})
    fig = hypergradient_figure(frame, symlog=True)
    assert list(fig.layout.yaxis.ticktext)[-1] == "100" and fig.layout.yaxis.title.text == "asinh axis"
    assert fig.data[0].y[1] == pytest.approx(np.arcsinh(-20.0))  # drawn in asinh units


@pytest.mark.parametrize("evaluations, mode", [(figures.MARKERS_UP_TO, "lines+markers"),
                                               (figures.MARKERS_UP_TO + 1, "lines")])
def test_validation_markers_only_while_they_are_few(evaluations, mode):
    # one SVG path per marker, redrawn every live refresh: a long run's 2,000 evaluations are
    # a line (bench_long_run: the watching tab's memory grew with them)
    steps = np.arange(1, evaluations + 1) * 100
    scalars = pd.concat([
        pd.DataFrame({"step": steps, "name": "val_loss", "value": 1.0 / steps}),
        pd.DataFrame({"step": steps, "name": "val_accuracy", "value": 1.0 - 1.0 / steps}),
    ])
    loss = {t.name: t for t in figures.loss_figure(scalars).data}
    accuracy = figures.accuracy_figure(scalars).data[0]
    assert loss["val loss"].mode == accuracy.mode == mode
    assert len(loss["val loss"].x) == evaluations
    lr = figures.learning_rate_figure(recorded=pd.DataFrame(
        {"step": steps, "name": figures.EFFECTIVE_LR, "value": 0.1})).data[0]
    assert lr.mode == ("markers" if mode == "lines+markers" else "lines")


def test_change_labels_close_together_share_one_label_and_stride_is_in_the_legend():
    """Three changes within 3% of a 2,000-step chart get one label (every change in its
    hover), a change far away its own; the decimation at step 1,000 is a legend entry."""
    changes = pd.DataFrame({
        "step": [1, 400, 410, 440, 1500], "name": ["learning_rate"] * 5,
        "old": [None, 0.001, 0.002, 0.003, 0.004], "new": [0.001, 0.002, 0.003, 0.004, 0.005],
        "source": ["init", "user", "user", "auto-tune", "user"]})
    scalars = pd.DataFrame({"step": [1, 2000], "name": ["train_loss"] * 2, "value": [2.0, 1.0]})
    fig = figures.loss_figure(scalars, changes=changes)
    lines = [s for s in fig.layout.shapes if s.line.color == "crimson"]
    assert [s.x0 for s in lines] == [400, 410, 440, 1500]  # one line per change
    labels = [a for a in fig.layout.annotations if a.font.color == "crimson"]
    assert [(a.x, a.text) for a in labels] == [(400, "learning_rate → 0.002 +2 more"),
                                              (1500, "learning_rate → 0.005")]
    assert labels[0].hovertext.count("<br>") == 2 and "auto-tune change at step 440" \
        in labels[0].hovertext
    (stride,) = [t for t in fig.data if t.name.startswith("recording stride")]
    assert stride.name == "recording stride: 10-step means from step 1,000"
    assert stride.line.dash == "dash"


def test_the_learning_rate_chart_marks_the_current_step_without_stretching_its_axis():
    """"You are here" at the run's step; the axis stays on the steps drawn (plotly would make
    room for the label, down to negative steps in the narrow sidebar preview)."""
    steps = np.arange(1, 2001)
    fig = figures.learning_rate_figure((steps, 0.01 * 0.9 ** (steps / 100)), now_step=513)
    (line,) = [s for s in fig.layout.shapes if s.x0 == 513]
    assert line.x1 == 513
    assert any(a.text == "you are here (step 513)" for a in fig.layout.annotations)
    assert tuple(fig.layout.xaxis.range) == (1, 2000)
