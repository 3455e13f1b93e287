"""The train step's recording levels (engine.train_step): what each traced graph holds, that
recording never changes training, and how compiles are counted.

In graph mode each level is its own function traced on first use, so a step that records
nothing carries no statistics or histogram ops at all (a `tf.cond` would keep them in the graph
as dead branches that the executor still walks every step); under XLA one program serves every
level through `tf.cond`s.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from engine.train_step import HISTOGRAMS, NOTHING, STATISTICS, Engine
from settings.run_config import RunConfig

KWARGS = {NOTHING: {"record": False}, STATISTICS: {"record": True},
          HISTOGRAMS: {"record": True, "with_histograms": True}}


def _engine(**fields) -> Engine:
    config = RunConfig(dataset="moons", model="mlp", optimizer="adam", batch_size=32, seed=3,
                       hyperparameters={"learning_rate": 0.01}, **fields)
    return Engine(config, "/device:CPU:0")


def _op_types(engine: Engine, level: int) -> set[str]:
    function = engine.train_functions[-1][level]
    return {op.type for op in function.get_concrete_function().graph.get_operations()}


def test_graph_mode_levels_hold_only_their_own_work():
    engine = _engine()
    for level in (HISTOGRAMS, STATISTICS, NOTHING):
        engine.step(**KWARGS[level])
    types = {level: _op_types(engine, level) for level in KWARGS}
    for level, ops in types.items():
        assert not ops & {"If", "StatelessIf", "Switch", "Merge"}, (level, ops)
    assert "HistogramFixedWidth" in types[HISTOGRAMS]
    assert "HistogramFixedWidth" not in types[STATISTICS] | types[NOTHING]
    # statistics need the variables' old values (`update`); the guard reads only the new ones
    assert "SquaredDifference" in types[STATISTICS] and "SquaredDifference" not in types[NOTHING]
    # three functions, one compile: no retrace is reported
    assert engine.traces == engine.tracing_count() == 1
    engine.retrace()
    assert engine.traces == engine.tracing_count() == 2
    assert list(engine.train_functions[-1]) == [NOTHING]  # the level last used, traced at once


def test_the_recording_level_never_changes_what_is_trained():
    """Two engines from one seed: one steps through every level, the other records everything;
    weights and slots agree bit for bit, and the guard is zeros while the statistics are not."""
    mixed, full = _engine(), _engine()
    for level in (HISTOGRAMS, STATISTICS, NOTHING, NOTHING, STATISTICS, HISTOGRAMS, NOTHING):
        loss_a, stats_a, hists_a = mixed.step(**KWARGS[level])
        loss_b, stats_b, hists_b = full.step(record=True, with_histograms=True)
        assert loss_a.numpy() == loss_b.numpy()
        if level == NOTHING:
            assert not stats_a.numpy().any() and not hists_a.numpy().any()
        else:
            np.testing.assert_array_equal(stats_a.numpy(), stats_b.numpy())
            assert stats_a.numpy()[:, 0].min() > 0  # norms of m, v and the update
        if level == HISTOGRAMS:
            np.testing.assert_array_equal(hists_a.numpy(), hists_b.numpy())
    for a, b in zip(mixed.optimizer.variables(), full.optimizer.variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(mixed.variables, full.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_guard_level_still_names_a_non_finite_slot():
    engine = _engine()
    engine.step(record=False)
    slot = engine.optimizer.get_slot(engine.variables[2], "v")
    slot.assign(tf.fill(slot.shape, np.float32(np.inf)))
    _, stats, _ = engine.step(record=False)
    bad = np.flatnonzero(~np.isfinite(stats.numpy()).all(axis=1))
    assert [engine.series[i] for i in bad][:1] == [engine.series[2 * 3 + 1]]  # (var 2, "v")


@pytest.mark.slow
def test_xla_serves_every_level_from_one_program():
    engine = _engine(compiler="xla")
    for level in (HISTOGRAMS, STATISTICS, NOTHING):
        _, stats, hists = engine.step(**KWARGS[level])
        assert bool(stats.numpy().any()) == (level != NOTHING)
        assert bool(hists.numpy().any()) == (level == HISTOGRAMS)
    assert list(engine.train_functions[-1]) == [HISTOGRAMS]
    assert engine.traces == engine.tracing_count() == 1
