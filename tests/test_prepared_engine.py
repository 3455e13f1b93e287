"""A prepared engine (`engine.prepared`): built, traced and rehearsed ahead of a run, then
restored; a run that adopts it trains exactly as on a freshly built engine."""

from __future__ import annotations

import numpy as np
import pytest

from engine import prepared
from engine.prepared import PreparedEngine
from engine.train_step import Engine
from settings.run_config import RunConfig

DEVICE = "/device:CPU:0"


def train(engine: Engine, steps: int) -> tuple[list[float], list[np.ndarray], np.ndarray]:
    losses, stats = [], None
    for step in range(1, steps + 1):
        loss, stats, hists = engine.step(record=True, with_histograms=step % 5 == 0)
        losses.append(float(loss))
    weights = [v.numpy() for v in engine.model.variables]
    return losses + [*engine.evaluate()], weights, stats.numpy()


@pytest.mark.slow
@pytest.mark.parametrize("settings", [
    dict(optimizer="adam", label_noise=0.3),
    dict(optimizer="lookahead", options={"inner": "sgd"}, hyperparameters={"momentum": 0.5}),
    dict(optimizer="rmsprop", lr_schedule={"class_name": "ExponentialDecay", "config": {
        "initial_learning_rate": 0.01, "decay_steps": 5, "decay_rate": 0.5}}, decay=0.01),
], ids=["adam", "lookahead", "rmsprop-schedule"])
def test_an_adopted_engine_trains_exactly_like_a_fresh_one(settings):
    config = RunConfig(dataset="digits", model="mlp", steps=1000, **settings)
    ready = PreparedEngine(config, DEVICE)
    run = config.model_copy(update={"steps": 12, "eval_every": 3})
    assert ready.can_serve(run, DEVICE)
    adopted = ready.adopt(run)
    assert adopted.config.steps == 12 and adopted.traces == 1
    assert int(adopted.optimizer.iterations.numpy()) == 0  # the rehearsal was undone
    got = train(adopted, 12)
    want = train(Engine(run, DEVICE), 12)
    assert got[0] == want[0]  # every loss, val loss and accuracy: bit for bit
    for a, b in zip(got[1], want[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[2], want[2])  # the slot statistics too
    assert adopted.traces == 1  # adopting traced nothing more
    with pytest.raises(ValueError, match="cannot serve"):
        ready.adopt(run)  # it serves once


@pytest.mark.slow
def test_a_different_config_builds_a_fresh_engine():
    config = RunConfig(dataset="moons", model="logistic", steps=100)
    prepared.keep(PreparedEngine(config, DEVICE))
    for other in (config.model_copy(update={"seed": 1}), config.model_copy(update={
            "hyperparameters": {"learning_rate": 0.01}}), config.model_copy(update={
            "compiler": "xla"})):
        assert not PreparedEngine.can_serve(prepared._PREPARED["engine"], other, DEVICE)
    assert not prepared._PREPARED["engine"].can_serve(config, "/device:CPU:1")
    engine = prepared.take(config.model_copy(update={"seed": 3}), DEVICE)
    assert engine.config.seed == 3 and prepared._PREPARED["engine"] is None
    prepared.keep(PreparedEngine(config, DEVICE))
    kept = prepared._PREPARED["engine"].engine
    assert prepared.take(config.model_copy(update={"steps": 7}), DEVICE) is kept


def test_building_and_stepping_an_engine_rewrites_no_function_with_autograph(monkeypatch):
    """AutoGraph's source rewrite was most of a fresh process's engine build (1.4 of 2.2 s):
    every traced function of a run, train levels and evaluations, is traced as written."""
    from tensorflow.python.autograph.impl import api

    rewrites = []
    convert = api._convert_actual
    monkeypatch.setattr(api, "_convert_actual",
                        lambda entity, ctx: rewrites.append(entity) or convert(entity, ctx))
    config = RunConfig(dataset="digits", model="mlp", steps=10,
                       optimizer="schedule_free_adamw")  # evaluated at x and at y
    engine = Engine(config, DEVICE)
    for record, histograms in ((False, False), (True, False), (True, True)):
        loss, stats, hists = engine.step(record=record, with_histograms=histograms)
    val_loss, accuracy = engine.evaluate()
    assert np.isfinite(float(loss)) and np.isfinite(float(val_loss)) and 0 <= accuracy <= 1
    assert np.isfinite(engine.evaluate_at_variables())
    assert rewrites == []
