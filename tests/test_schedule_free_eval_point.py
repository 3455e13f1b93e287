"""The schedule-free eval point x is recorded beside the slots (engine.recording): its
statistics equal NumPy's x = (y - (1 - beta_1) z) / beta_1 from the variable y and the slot z
(Defazio et al. 2024, arXiv:2405.15682, Algorithm 1), and the Slots view says what it is."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from components.run_panels import slot_caption
from engine import recording
from optimizers.adam import Adam
from optimizers.schedule_free import ScheduleFreeAdamW


def _trained(optimizer, steps: int = 5) -> list[tf.Variable]:
    rng = np.random.default_rng(0)
    variables = [tf.Variable(rng.normal(size=(3, 4)), dtype=tf.float64, name="kernel"),
                 tf.Variable(rng.normal(size=(4,)), dtype=tf.float64, name="bias")]
    for _ in range(steps):
        grads = [tf.constant(rng.normal(size=v.shape)) for v in variables]
        optimizer.apply_gradients(zip(grads, variables))
    return variables


def test_x_is_a_series_with_the_numpy_eval_point_statistics():
    beta_1 = 0.8
    opt = ScheduleFreeAdamW(learning_rate=0.05, beta_1=beta_1, warmup_steps=2)
    variables = _trained(opt)
    series = recording.slot_series(variables, opt)
    assert [slot for _, slot in series[:len(series) // 2]][-2:] == ["update",
                                                                   recording.EVAL_POINT_SERIES]
    before = [v.read_value() for v in variables]
    stats = recording.packed_stats(variables, opt, before).numpy()
    assert stats.shape == (len(series), 3)
    assert recording.finite_guard(variables, opt).shape[0] == len(series)
    for row, (label, slot) in enumerate(series):
        if slot != recording.EVAL_POINT_SERIES:
            continue
        var = next(v for v in variables if recording.variable_label(v) == label)
        y, z = var.numpy(), opt.get_slot(var, "z").numpy()
        x = (y - (1.0 - beta_1) * z) / beta_1
        assert not np.allclose(x, y)  # a real difference to show
        np.testing.assert_allclose(stats[row], [np.linalg.norm(x), x.mean(), x.std()],
                                   rtol=1e-5)


def test_other_optimizers_record_no_eval_point_and_the_caption_explains_x():
    opt = Adam(learning_rate=0.01)
    variables = _trained(opt, steps=1)
    assert all(slot != recording.EVAL_POINT_SERIES
               for _, slot in recording.slot_series(variables, opt))
    caption = slot_caption("sf_adamw", ["z", "v", "update", "x"])
    assert "**x** is no slot" in caption and "x = (y - (1 - beta_1) z) / beta_1" in caption
    assert "`x`" not in caption  # not listed among the add_slot state
    assert "is no slot" not in slot_caption("adam", ["m", "v", "update"])
