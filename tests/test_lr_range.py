"""The learning-rate range test (Smith 2017): the divergence point it finds on a quadratic of
known curvature, and a sweep in the run process that leaves the run exactly where it was."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from engine import lr_range, lr_range_sweep
from engine.train_step import Engine
from optimizers import registry
from runs import protocol
from runs.process.handlers import HANDLERS
from runs.process.run_loop import RunLoop
from runs.service import control
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

CURVATURE = 4.0  # L, the largest eigenvalue of the quadratic's Hessian


def quadratic_sweep(seed: int, noise: float = 0.1, steps: int = 200) -> list:
    """SGD (the lab's) on f(w) = 1/2 sum_i lambda_i w_i**2, lambda in [0.1, L], gradients with
    Gaussian noise of std `noise` (a stochastic quadratic), swept from 1e-4 to 10."""
    lam = tf.constant(np.linspace(0.1, CURVATURE, 20))
    w = tf.Variable(np.ones(20))
    opt = registry.create("sgd", {"learning_rate": 1e-4, "momentum": 0.0}, {})
    noise_source = tf.random.Generator.from_seed(seed)

    @tf.function
    def step():
        loss = 0.5 * tf.reduce_sum(lam * w * w)
        opt.apply_gradients([(lam * w + noise * noise_source.normal([20], dtype=tf.float64), w)])
        return loss

    return lr_range_sweep.sweep(lambda: float(step()),
                                lambda: float(0.5 * tf.reduce_sum(lam * w * w)),
                                lambda rate: opt._set_hyper("learning_rate", rate),
                                lr_range.rates(1e-4, 10.0, steps))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_divergence_point_is_within_20_percent_of_two_over_l_for_sgd(seed):
    rows = quadratic_sweep(seed)
    result = lr_range.analyse([r.learning_rate for r in rows], [r.loss for r in rows])
    assert result.divergence == pytest.approx(2.0 / CURVATURE, rel=0.2)
    assert result.curvature == pytest.approx(CURVATURE, rel=0.2)
    # the marks are in the order the curve shows them
    assert result.steepest < result.minimum < result.blowup
    assert len(rows) < 200  # stopped at the blow-up
    assert rows[-1].learning_rate == result.blowup


def test_analysis_reads_the_marks_of_a_known_curve():
    rates = lr_range.rates(1e-3, 1.0, 61)
    x = np.log10(rates)  # falls fastest at x = -2, minimum at -1, then explodes
    losses = list(2.0 - np.tanh(3 * (x + 2)))
    result = lr_range.analyse(rates, losses[:48] + [float("nan")])
    # the tanh's steepest point, seen through the moving average's lag (about 1 / (1 - beta)
    # = 10 steps to full weight: here 4 steps, 0.2 decades)
    assert 1e-2 <= result.steepest <= 10 ** -1.75
    assert result.blowup == pytest.approx(rates[48])
    assert lr_range.analyse(rates[:2], [1.0, 2.0]).divergence is None
    no_blowup = lr_range.analyse(rates, losses)
    assert no_blowup.divergence is None and no_blowup.blowup is None


def test_a_sweep_refuses_what_it_does_not_run():
    with pytest.raises(ValueError, match=r"lr_max=0.001 refused: must be larger"):
        lr_range.rates(0.01, 0.001, 100)
    with pytest.raises(ValueError, match=r"steps=5 refused: must be an integer in \[10, 1000\]"):
        lr_range.rates(1e-4, 1.0, 5)
    with pytest.raises(protocol.Refused, match="lr_min"):
        protocol.parse("lr_range", {"lr_min": -1.0})
    assert protocol.parse("lr_range", "{}") == protocol.LrRange()


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    config = RunConfig(optimizer="adam", dataset="digits", model="mlp", batch_size=64,
                       steps=500, eval_every=1000, seed=3)
    store = RunStore(tmp_path_factory.mktemp("lr") / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    store.set_status(run_id, "running")
    engine = Engine(config, "/CPU:0")
    run = RunLoop(run_id, store, engine, total=config.steps, eval_every=config.eval_every,
                  record=lambda s: False, histogram=lambda s: False, handlers=HANDLERS)
    for _ in range(20):
        run.one_step()
    yield run, store, run_id
    run.close()


def snapshot(engine: Engine) -> tuple:
    return ([v.numpy().copy() for v in engine.model.variables],
            [v.numpy().copy() for v in engine.optimizer.variables()],
            engine.optimizer.hyper_values(), engine.order.rng.get_state()[1].copy(),
            engine.order.buffer.copy(), engine.traces)


@pytest.mark.parametrize("start", ["current", "init"])
def test_the_run_does_not_move_while_a_copy_is_swept(live_run, start):
    run, store, run_id = live_run
    before = snapshot(run.engine)
    iterations = int(run.engine.optimizer.iterations.numpy())
    if start == "current":  # the copy starts where the run is, not at theta_0
        copied = lr_range_sweep.copy_of_engine(run.engine)
        for mine, theirs in zip(copied.model.variables, run.engine.model.variables):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        for mine, theirs in zip(copied.optimizer.variables(), run.engine.optimizer.variables()):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        assert int(copied.optimizer.iterations.numpy()) == iterations
    command_id = control.lr_range(store, run_id, lr_min=1e-4, lr_max=10.0, steps=60,
                                  start=start)
    status = run.handle({"id": command_id, "kind": "lr_range",
                         "payload": json.dumps({"lr_min": 1e-4, "lr_max": 10.0, "steps": 60,
                                                "start": start})})
    assert status == "done"
    after = snapshot(run.engine)
    for old, new in zip(before[0] + before[1], after[0] + after[1]):
        np.testing.assert_array_equal(old, new)  # weights, iterations, every slot
    assert before[2] == after[2]  # hyperparameters (learning_rate) untouched
    np.testing.assert_array_equal(before[3], after[3])  # the data order's position
    np.testing.assert_array_equal(before[4], after[4])
    assert int(run.engine.optimizer.iterations.numpy()) == iterations and after[5] == before[5]
    rows = store.lr_range(run_id, command_id)
    assert 10 < len(rows) <= 60 and rows["step"].tolist() == list(range(1, len(rows) + 1))
    np.testing.assert_allclose(rows["learning_rate"], lr_range.rates(1e-4, 10.0, 60)[:len(rows)])
    result = lr_range.analyse(rows["learning_rate"], rows["loss"])
    assert result.blowup is not None and result.steepest < result.blowup  # Adam at 10 diverges
    run.one_step()  # and the run trains on from where it was
    assert int(run.engine.optimizer.iterations.numpy()) == iterations + 1


def test_only_one_range_test_is_pending_per_run(live_run):
    run, store, run_id = live_run
    control.lr_range(store, run_id, steps=30)
    with pytest.raises(ValueError, match="already pending"):
        control.lr_range(store, run_id, steps=30)
    with pytest.raises(ValueError, match="start"):
        control.lr_range(store, run_id, steps=30, start="middle")
    run.poll()  # carried out: the next one may be queued
    assert store.pending_count("lr_range", run_id=run_id) == 0
