"""The 2-D landscape engine and its figure builders."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from components import landscape_figures
from optimizers import registry
from teaching import landscape

RACERS = ["sgd", "adam", "rmsprop", "diffgrad"]


@pytest.mark.parametrize("name", list(landscape.FUNCTIONS))
def test_known_minimum_is_a_stationary_point_with_f_min(name):
    func = landscape.get_function(name)
    for x, y in func.minima:
        point = tf.Variable([x, y], dtype=tf.float64)
        with tf.GradientTape() as tape:
            value = func.fn(point[0], point[1])
        assert float(value) == pytest.approx(func.f_min, abs=1e-9)
        np.testing.assert_allclose(tape.gradient(value, point).numpy(), 0.0, atol=1e-9)
    sx, sy = func.start
    assert float(func.fn(tf.constant(sx), tf.constant(sy))) > func.f_min + 1e-3


def direct_run(name, lr, function, start, steps):
    """The same optimizer class driven by plain eager apply_gradients calls."""
    opt = registry.create(name, {"learning_rate": lr})
    var = tf.Variable(np.asarray(start, np.float32))
    path = [var.numpy().copy()]
    f = landscape.get_function(function).fn
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = f(var[0], var[1])
        opt.apply_gradients([(tape.gradient(loss, var), var)])
        path.append(var.numpy().copy())
    return np.array(path)


# Without XLA the compiled loop runs the very same kernels: equal to float32 rounding. XLA fuses
# ops (different rounding), and Rosenbrock's valley amplifies 1-ulp differences within ~30 Adam
# steps, so the XLA case is checked on the well-behaved quadratic.
@pytest.mark.parametrize("jit,rtol,function,start", [
    (False, 1e-6, "rosenbrock", (-1.2, 1.0)), (True, 1e-4, "ill_conditioned", (-4.0, 1.0))])
def test_trajectories_equal_running_the_optimizers_directly(jit, rtol, function, start):
    runner = landscape.LandscapeRunner(function, [landscape.Racer(n, n) for n in RACERS],
                                       jit_compile=jit)
    lrs = {n: landscape.landscape_lr(n) for n in RACERS}
    for name, lr in lrs.items():
        runner.set_hypers(name, {"learning_rate": lr})
    frame = runner.run(start, 40)
    assert list(frame.columns) == ["optimizer", "step", "x", "y", "loss"]
    for name in RACERS:
        expected = direct_run(name, lrs[name], function, start, 40)
        rows = frame[frame["optimizer"] == name]
        np.testing.assert_allclose(rows[["x", "y"]].to_numpy(), expected, rtol=rtol, atol=1e-6)
        np.testing.assert_allclose(rows["loss"].to_numpy(),
                                   landscape.get_function(function).fn(expected[:, 0], expected[:, 1]),
                                   rtol=10 * rtol, atol=1e-5)


def test_new_start_steps_and_hypers_reuse_the_compiled_loop():
    runner = landscape.LandscapeRunner("ill_conditioned", [landscape.Racer("a", "adam"),
                                                           landscape.Racer("s", "sgd")])
    first = runner.run((-4.0, 1.0), 30)
    again = runner.run((-4.0, 1.0), 30)  # reset: slots and iterations back to 0
    pd.testing.assert_frame_equal(first, again)
    runner.set_hypers("s", {"learning_rate": 0.001})
    other = runner.run((2.0, -1.0), 80)
    assert runner.traces == 1
    s = other[other["optimizer"] == "s"]
    assert (s["x"].iloc[0], s["y"].iloc[0]) == (2.0, -1.0) and len(s) == 81
    # momentum crossing 0 selects another update (SGD's trace_signature): one compile more,
    # and the path is the one of a loop compiled with that momentum from the start
    runner.set_hypers("s", {"momentum": 0.5})
    moved = runner.run((2.0, -1.0), 80)
    assert runner.traces == 2
    assert runner.optimizers[1].hyper_values() == {"learning_rate": 0.001, "momentum": 0.5}
    fresh = landscape.LandscapeRunner("ill_conditioned", [landscape.Racer("s", "sgd")])
    fresh.set_hypers("s", {"learning_rate": 0.001, "momentum": 0.5})
    expected = fresh.run((2.0, -1.0), 80)
    np.testing.assert_allclose(moved[moved["optimizer"] == "s"][["x", "y"]].to_numpy(),
                               expected[["x", "y"]].to_numpy(), rtol=1e-6)
    assert not np.allclose(moved[moved["optimizer"] == "s"][["x", "y"]].to_numpy(),
                           s[["x", "y"]].to_numpy())


def test_tuning_picks_the_best_grid_value_and_sets_it():
    runner = landscape.LandscapeRunner("ill_conditioned", [landscape.Racer("sgd", "sgd"),
                                                           landscape.Racer("adam", "adam")])
    table = runner.tune_learning_rates((-4.0, 1.0), 100)
    for label, rows in table.groupby("optimizer"):
        best = rows.loc[rows["best"]].iloc[0]
        assert best["score"] == rows["score"].min()
        assert runner.optimizers[["sgd", "adam"].index(label)].hyper_values()["learning_rate"] == \
            pytest.approx(best["learning_rate"], rel=1e-6)
    sgd = table[table["optimizer"] == "sgd"].set_index("learning_rate")["score"]
    # gradient descent on 0.5 (x^2 + 100 y^2) diverges for lr > 2/100
    assert all(math.isinf(v) or v > 1e3 for lr, v in sgd.items() if lr > 0.021)
    assert sgd.idxmin() < 0.02


def test_contour_figure_draws_paths_up_to_the_step():
    runner = landscape.LandscapeRunner("beale", [landscape.Racer(n, n) for n in ("adam", "sgd")],
                                       jit_compile=False)
    frame = runner.run((1.0, 1.4), 20)
    grid = landscape.grid("beale", n=30)
    assert len(grid) == 900
    fig = landscape_figures.contour_figure(grid, frame, 7, minima=((3.0, 0.5),), log_levels=True)
    assert fig.data[0].type == "contour" and np.asarray(fig.data[0].z).shape == (30, 30)
    adam = next(t for t in fig.data if t.name == "adam")
    assert len(adam.x) == 8
    now = next(t for t in fig.data if t.name == "adam @ 7")
    row = frame[(frame["optimizer"] == "adam") & (frame["step"] == 7)].iloc[0]
    assert (now.x[0], now.y[0]) == (row["x"], row["y"])
    assert next(t for t in fig.data if t.name == "minimum").x == (3.0,)
    assert fig.data[0].colorbar.title.text == "log10(1+f-f*)"


def test_playback_replays_every_path_from_step_zero():
    """The figure's Play button replays in the browser from step 0 whatever the page's step:
    frame k draws each path up to its step (end point exact) and the marker there."""
    runner = landscape.LandscapeRunner("beale", [landscape.Racer(n, n) for n in ("adam", "sgd")],
                                       jit_compile=False)
    frame = runner.run((1.0, 1.4), 500)
    fig = landscape_figures.contour_figure(landscape.grid("beale", n=20), frame, 500)
    stops = [int(f.name) for f in fig.frames]
    assert stops[0] == 0 and stops[-1] == 500 and len(stops) == landscape_figures.PLAYBACK_FRAMES
    assert fig.layout.updatemenus[0].buttons[0].args[1]["fromcurrent"] is False
    assert [s.label for s in fig.layout.sliders[0].steps] == [str(s) for s in stops]
    for movie in (fig.frames[0], fig.frames[20], fig.frames[-1]):
        stop = int(movie.name)
        assert list(movie.traces) == [1, 2, 3, 4]  # adam path, adam marker, sgd path, marker
        for trace, label in ((movie.data[0], "adam"), (movie.data[2], "sgd")):
            row = frame[(frame["optimizer"] == label) & (frame["step"] == stop)].iloc[0]
            assert (trace.x[-1], trace.y[-1]) == (row["x"], row["y"])
            assert len(trace.x) <= landscape_figures.PLAYBACK_POINTS + 1
        assert movie.data[1].x[0] == movie.data[0].x[-1]
    assert not landscape_figures.contour_figure(landscape.grid("beale", n=20), frame, 500,
                                                frames=1).frames


def test_loss_and_tuning_figures():
    frame = landscape.trajectories_frame(["a", "b"], np.zeros((3, 2, 2)), np.array([[2.0, 1.0], [1.0, 0.5], [0.0, 0.25]]))
    fig = landscape_figures.loss_figure(frame, 1, f_min=0.0)
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].y) == [2.0, 1.0, 1e-12]  # 0 clipped for the log axis
    assert fig.layout.yaxis.type == "log"
    table = pd.DataFrame({"optimizer": ["a", "a"], "learning_rate": [0.1, 1.0],
                          "score": [0.5, math.inf], "best": [True, False]})
    tune = landscape_figures.tuning_figure(table)
    assert [t.name for t in tune.data] == ["a", "a best"]
    assert np.isnan(tune.data[0].y[1]) and list(tune.data[1].x) == [0.1]


def test_unknown_function_and_duplicate_labels_are_refused():
    with pytest.raises(KeyError, match="known: rosenbrock"):
        landscape.get_function("himmelblau")
    with pytest.raises(ValueError, match="unique"):
        landscape.LandscapeRunner("saddle", [landscape.Racer("a", "sgd"), landscape.Racer("a", "adam")])
