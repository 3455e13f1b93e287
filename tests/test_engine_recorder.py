"""Recording schedule (bounded) and the in-graph statistics/histograms against NumPy."""

import numpy as np
import tensorflow as tf

from optimizers.adam import Adam
from engine import recording


def test_decimation_bound_for_200k_steps():
    steps = 200_000
    recorded = sum(recording.should_record(s) for s in range(1, steps + 1))
    assert recorded == 1000 + 900 + 900 + 100
    assert recorded + 1 <= recording.record_bound(steps) == 2901
    assert recording.record_bound(1_000_000) == 3701
    for n in (1, 999, 1000, 1001, 12_345, 100_000, 150_001):
        assert sum(recording.should_record(s) for s in range(1, n + 1)) + 1 <= recording.record_bound(n)
    hist = sum(recording.should_histogram(s) for s in range(1, steps + 1))
    assert hist == 1 + 50 + 45 + 45 + 5
    assert all(recording.should_record(s) for s in range(1, steps + 1) if recording.should_histogram(s))


def test_loss_meter_mean():
    meter = recording.LossMeter()
    for x in (1.0, 2.0, 6.0):
        meter.add(x)
    assert meter.take() == 3.0
    assert np.isnan(meter.take())


def _setup():
    var = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0, name="dense_1/kernel")
    const = tf.Variable(np.full(5, 2.5, np.float32), name="dense_1/bias")
    opt = Adam(learning_rate=0.1)
    variables = [var, const]
    opt._create_all_weights(variables)
    before = [v.read_value() for v in variables]
    grads = [tf.ones_like(var) * 0.3 + tf.reshape(tf.range(12, dtype=tf.float32), (3, 4)), tf.zeros(5)]
    opt.apply_gradients(zip(grads, variables))
    return opt, variables, before


def test_stats_match_numpy():
    opt, variables, before = _setup()
    series = recording.slot_series(variables, opt)
    assert series == [("dense_1/kernel", "m"), ("dense_1/kernel", "v"),
                      ("dense_1/kernel", "update"), ("dense_1/bias", "m"), ("dense_1/bias", "v"),
                      ("dense_1/bias", "update")]
    stats = recording.packed_stats(variables, opt, before).numpy()
    assert stats.shape == (6, 3) and stats.dtype == np.float32
    arrays = []
    for var, old in zip(variables, before):
        arrays += [opt.get_slot(var, "m").numpy(), opt.get_slot(var, "v").numpy(),
                   old.numpy() - var.numpy()]
    for row, a in zip(stats, arrays):
        np.testing.assert_allclose(row, [np.linalg.norm(a), a.mean(), a.std()], rtol=1e-5, atol=1e-7)
    # Adam's first step: update = lr_t * m / (sqrt(v) + eps) = ~lr * sign(g)
    np.testing.assert_allclose(stats[2, 1], 0.1, rtol=1e-4)


def test_histograms_count_every_element():
    opt, variables, before = _setup()
    hists = recording.packed_histograms(variables, opt, before).numpy()
    assert hists.shape == (6, 2 + recording.BINS)
    sizes = [12, 12, 12, 5, 5, 5]
    for row, size in zip(hists, sizes):
        assert row[2:].sum() == size and row[0] <= row[1]
    # the bias got a zero gradient: its update is all zeros, lo == hi, everything in bin 0
    assert hists[5, 0] == hists[5, 1] == 0.0 and hists[5, 2] == 5
    rows = recording.histogram_rows(7, recording.slot_series(variables, opt), hists)
    assert rows[0][0] == 7 and len(rows[0][5]) == recording.BINS
    assert all(isinstance(c, int) for c in rows[0][5])


def test_finite_guard_marks_exactly_the_non_finite_series():
    opt, variables, before = _setup()
    guard = recording.finite_guard(variables, opt).numpy()
    assert guard.shape == (6, 3) and not guard.any()  # all finite: zeros
    opt.get_slot(variables[0], "v").assign(
        tf.tensor_scatter_nd_update(opt.get_slot(variables[0], "v"), [[0, 0]], [np.inf]))
    opt.get_slot(variables[1], "m").assign(
        tf.tensor_scatter_nd_update(opt.get_slot(variables[1], "m"), [[2]], [np.nan]))
    guard = recording.finite_guard(variables, opt).numpy()
    bad = [i for i, row in enumerate(guard) if not np.isfinite(row).all()]
    assert bad == [1, 3]  # (dense_1/kernel, v) and (dense_1/bias, m)
    assert np.isnan(guard[bad]).all() and not guard[[0, 2, 4, 5]].any()
    # a variable that turned non-finite marks its `update` row (`before - after` is then too)
    variables[1].assign(tf.tensor_scatter_nd_update(variables[1], [[4]], [-np.inf]))
    guard = recording.finite_guard(variables, opt).numpy()
    assert [i for i, row in enumerate(guard) if not np.isfinite(row).all()] == [1, 3, 5]


def test_stats_of_huge_finite_values_stay_finite():
    # sum(x * x) would overflow float32 (x ~ 1e20): the scaled computation must not
    x = np.array([1e20, -3e20, 2e20, 5e19], np.float32)
    stats = recording.tensor_stats(tf.constant(x)).numpy()
    expected = [np.linalg.norm(x.astype(np.float64)), x.astype(np.float64).mean(),
                x.astype(np.float64).std()]
    np.testing.assert_allclose(stats, expected, rtol=1e-5)
    assert np.isnan(recording.tensor_stats(tf.constant([1.0, np.nan])).numpy()).any()
    assert not np.isfinite(recording.tensor_stats(tf.constant([1.0, np.inf])).numpy()).all()
    np.testing.assert_array_equal(recording.tensor_stats(tf.zeros([5])).numpy(), [0, 0, 0])


def test_display_reads_keep_at_most_max_points_per_series(tmp_path):
    from runs.store.run_store import RunStore

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                               "seed": 0, "steps": 20_000})
    last = 9_999  # mid-run: the live head is kept although it is no multiple of the width
    store.append(run_id, scalars=[(s, "train_loss", float(s)) for s in range(1, last + 1)]
                 + [(s, "val_loss", -float(s)) for s in range(0, last + 1, 25)],
                 slot_stats=[(s, "w", "m", 1.0, float(s), 0.0) for s in range(1, last + 1)],
                 histograms=[(s, "w", "m", 0.0, 1.0, [s]) for s in range(20, last + 1, 20)],
                 step=last)
    assert len(store.scalars(run_id)) == last + 400
    few = store.scalars(run_id, max_points=100)  # width 100: 9,999 / 100 <= 100
    train = few[few["name"] == "train_loss"]
    assert list(train["step"]) == [1] + list(range(100, last, 100)) + [last]
    assert (train["value"] == train["step"].astype(float)).all()  # exact recorded values
    val = few[few["name"] == "val_loss"]
    assert list(val["step"]) == [0] + list(range(100, last, 100))
    assert (val["value"] == -val["step"].astype(float)).all()
    stats = store.slot_stats(run_id, max_points=100)
    assert list(stats["step"]) == [1] + list(range(100, last, 100)) + [last]
    hist = store.histograms(run_id, "w", "m", max_points=40)  # width 500
    assert list(hist["step"]) == list(range(500, last, 500))
    assert [c[0] for c in hist["counts"]] == list(hist["step"])
    assert len(store.histograms(run_id, "w", "m")) == last // 20
    # decimated recording (strides 1, 10, 100): every kept step is a recorded one
    decimated = [s for s in range(1, last + 1) if recording.should_record(s)]
    store.append(run_id, scalars=[(s, "decimated", 1.0) for s in decimated])
    kept = store.scalars(run_id, names=["decimated"], max_points=500)  # width 20
    assert set(kept["step"]) <= set(decimated)
    assert list(kept["step"]) == [1] + [s for s in decimated if s % 20 == 0]


def test_huge_finite_slots_are_not_diverged_and_the_norm_saturates():
    """Issue 16: an Adagrad accumulator started at 1e37 over 4096 weights is finite; its L2 norm
    (6.4e38) is beyond float32, so the stored norm saturates at float32's max."""
    import pytest
    import tensorflow as tf

    from engine.recording import tensor_stats

    stats = tensor_stats(tf.fill([64, 64], 1e37)).numpy()
    assert np.isfinite(stats).all()
    assert stats[0] == pytest.approx(np.finfo(np.float32).max, rel=1e-6)
    assert stats[1] == pytest.approx(1e37, rel=1e-6) and stats[2] == pytest.approx(0.0, abs=1e31)
    assert np.isnan(tensor_stats(tf.constant([1.0, np.inf])).numpy()[1:]).all()


def test_graph_and_xla_histograms_count_the_same_bins():
    """Outside XLA one `HistogramFixedWidth` kernel counts; under XLA (no kernel for it) the
    same bins are counted op by op: both give the same counts (rounding at a bin edge may move
    an element to the neighbouring bin: at most 2 elements of 20,000 here)."""
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=20_000).astype(np.float32))
    flat = tf.constant(np.full(7, 1.5, np.float32))
    graph = tf.function(recording.tensor_histogram)
    xla = tf.function(recording.tensor_histogram, jit_compile=True)
    for data in (x, flat):
        a, b = graph(data).numpy(), xla(data).numpy()
        np.testing.assert_array_equal(a[:2], b[:2])  # lo, hi
        assert a[2:].sum() == b[2:].sum() == data.shape[0]
        assert np.abs(a[2:] - b[2:]).sum() <= 2, (a, b)
    assert graph(flat).numpy()[2] == 7  # lo == hi: everything in bin 0
