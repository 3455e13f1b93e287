"""Slot histograms of any finite magnitude (`engine.recording.tensor_histogram`): a finite run
never fails in its recording."""

import numpy as np
import tensorflow as tf

from engine import recording


def test_histograms_of_any_finite_magnitude():
    """Finite values never fail a histogram: a constant 1e37 (an Adagrad accumulator started
    there: `lo + 1.0 == lo` in float32), the float32 extremes (`hi - lo` overflows in float32),
    a constant at the float32 maximum; graph and XLA alike."""
    big = np.finfo(np.float32).max
    cases = {
        "constant 1e37": np.full(9, 1e37, np.float32),
        "constant -1e37": np.full(9, -1e37, np.float32),
        "constant max": np.full(4, big, np.float32),
        "both extremes": np.array([-big, 0.0, big, big], np.float32),
        "1e37 and 2e37": np.array([1e37, 1e37, 2e37], np.float32),
    }
    graph = tf.function(recording.tensor_histogram)
    xla = tf.function(recording.tensor_histogram, jit_compile=True)
    for name, data in cases.items():
        for run in (graph, xla):
            row = run(tf.constant(data)).numpy()
            assert row[0] == data.min() and row[1] == data.max(), name
            assert row[2:].sum() == data.size, (name, row)
            if data.min() == data.max():
                assert row[2] == data.size, name  # lo == hi: everything in bin 0
            else:  # the ends land in the first and the last bin
                assert row[2] == (data == data.min()).sum(), (name, row)
                assert row[-1] == (data == data.max()).sum(), (name, row)


def test_adagrad_accumulator_at_1e37_is_recorded():
    """An Adagrad run whose accumulators start at 1e37 (finite) records its histograms."""
    from optimizers import registry

    opt = registry.create("adagrad", {"learning_rate": 0.1}, {"initial_accumulator_value": 1e37})
    var = tf.Variable(np.ones((3, 4), np.float32))
    before = [tf.identity(var)]
    opt.apply_gradients([(tf.ones_like(var), var)])
    hists = recording.packed_histograms([var], opt, before).numpy()
    series = recording.slot_series([var], opt)
    assert np.isfinite(hists).all()
    for (_, slot), row in zip(series, hists):
        assert row[2:].sum() == 12, (slot, row)
    accumulator = [row for (_, slot), row in zip(series, hists) if slot != "update"][0]
    assert accumulator[0] == accumulator[1] == np.float32(1e37)
