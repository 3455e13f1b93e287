"""The lab's Keras 2 classes of Keras 3's newer algorithms vs their `keras.optimizers` namesakes.

One table row per algorithm (Lion, Lamb, Adafactor, Muon, ScheduleFreeAdamW): the lab's
`RuleOptimizer` and the Keras 3.15 built-in train the same small model on the same batches for
20 dense float32 steps; the row holds the largest difference over the weights and over every
slot (the lab's slot names mapped to Keras's variable lists). The Keras 3 page shows it and
`bench/parity_tables.py` prints it; tests/test_keras3_algorithms.py asserts <= 1e-6 with its own
model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

from optimizers import registry

TOLERANCE = 1e-6  # float32, after 20 steps

# label -> (lab name, lab hypers, lab options, Keras 3 factory, {lab slot: Keras variable list})
BUILTINS: dict[str, tuple[str, dict[str, float], dict[str, Any], Callable[[], Any],
                          Callable[[Any], dict[str, list]]]] = {
    "Lion": ("lion", {"learning_rate": 0.01, "weight_decay": 0.1}, {},
             lambda: keras.optimizers.Lion(0.01, weight_decay=0.1),
             lambda opt: {"m": opt._momentums}),
    "Lamb": ("lamb", {"learning_rate": 0.01, "weight_decay": 0.1}, {},
             lambda: keras.optimizers.Lamb(0.01, weight_decay=0.1),
             lambda opt: {"m": opt._momentums, "v": opt._velocities}),
    "Adafactor": ("adafactor", {"learning_rate": 0.5}, {},
                  lambda: keras.optimizers.Adafactor(0.5),
                  lambda opt: {"r": opt._r, "c": opt._c, "v": opt._v}),
    "Muon": ("muon", {"learning_rate": 0.01, "weight_decay": 0.1, "adam_weight_decay": 0.05}, {},
             lambda: keras.optimizers.Muon(0.01, weight_decay=0.1, adam_weight_decay=0.05),
             lambda opt: {"m": opt.momentums, "v": opt.adam_velocities}),
    "ScheduleFreeAdamW (keras3_tf_compat)": (
        "schedule_free_adamw", {"learning_rate": 0.01, "weight_decay": 0.1},
        {"keras3_tf_compat": True},
        lambda: keras.optimizers.ScheduleFreeAdamW(0.01, weight_decay=0.1),
        lambda opt: {"z": opt._momentums, "v": opt._velocities}),
    "ScheduleFreeAdamW (paper, default)": (
        "schedule_free_adamw", {"learning_rate": 0.01, "weight_decay": 0.1}, {},
        lambda: keras.optimizers.ScheduleFreeAdamW(0.01, weight_decay=0.1),
        lambda opt: {"z": opt._momentums, "v": opt._velocities}),
}
NOTES = {
    "Muon": "Keras routes every 2-D variable to Muon (the output kernel too), the rest to AdamW",
    "ScheduleFreeAdamW (keras3_tf_compat)": "x_old rebuilt from the updated z (a live "
                                            "reference), 1/t averaging, decay of y first",
    "ScheduleFreeAdamW (paper, default)": "Algorithm 1: x_old from z before the step, "
                                          "gamma_t**2 weights: differs from Keras 3 on purpose",
    "Adafactor": "relative_step=True (Keras applies it whatever the flag says)",
    "Lamb": "weight decay outside the trust ratio, as Keras",
    "Lion": "decoupled decay first, as Keras",
}


def problem(steps: int, seed: int = 0):
    """(start values [kernel [6, 4], bias [4], kernel [2, 3, 4]], batches, loss(w, b, k, batch)):
    a tanh layer read through a matmul and an einsum, so ranks 1, 2 and 3 are all updated."""
    rng = np.random.default_rng(seed)
    start = [rng.normal(size=(6, 4)), rng.normal(size=4), rng.normal(size=(2, 3, 4))]
    batches = [(rng.normal(size=(5, 6)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2, 3)))
               for _ in range(steps)]

    def loss(w, b, k, batch):
        x, y, z = (tf.constant(a, tf.float32) for a in batch)
        hidden = tf.tanh(x @ w + b + tf.einsum("nij,ijk->nk", z, k))
        return tf.reduce_mean(tf.square(hidden - y))

    return start, batches, loss


def _train(opt, variables, batches, loss) -> None:
    watched = [v.value if isinstance(v, keras.Variable) else v for v in variables]
    for batch in batches:
        with tf.GradientTape() as tape:
            value = loss(*watched, batch)
        opt.apply_gradients(zip(tape.gradient(value, watched), variables))


def row(label: str, steps: int = 20) -> dict[str, Any]:
    """One parity row: {algorithm, max_weight_difference, max_slot_difference, within, note}.

    A slot Keras does not create (Muon's velocity of a Muon variable: None) is compared as 0
    with the lab's scalar placeholder. Raises KeyError for an unknown label.
    """
    name, hypers, options, make_keras, keras_slots = BUILTINS[label]
    start, batches, loss = problem(steps)
    lab, stock = registry.create(name, hypers, options), make_keras()
    lab_vars = [tf.Variable(v, dtype=tf.float32) for v in start]
    stock_vars = [keras.Variable(v, dtype="float32") for v in start]
    _train(lab, lab_vars, batches, loss)
    _train(stock, stock_vars, batches, loss)
    weights = max(float(np.abs(a.numpy() - np.asarray(tf.convert_to_tensor(b))).max())
                  for a, b in zip(lab_vars, stock_vars))
    slots = 0.0
    for slot, stock_list in keras_slots(stock).items():
        for var, theirs in zip(lab_vars, stock_list):
            value = 0.0 if theirs is None else np.asarray(tf.convert_to_tensor(theirs))
            slots = max(slots, float(np.abs(lab.get_slot(var, slot).numpy() - value).max()))
    return {"algorithm": label, "max_weight_difference": weights,
            "max_slot_difference": slots, "within_1e-6": max(weights, slots) <= TOLERANCE,
            "note": NOTES.get(label, "")}


def table(steps: int = 20) -> pd.DataFrame:
    """Every row of `BUILTINS` (dense, float32, `steps` steps), as a DataFrame."""
    return pd.DataFrame([row(label, steps) for label in BUILTINS])


__all__ = ["BUILTINS", "TOLERANCE", "problem", "row", "table"]
