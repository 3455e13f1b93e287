"""Measurements behind the lessons on Keras 3's newer algorithms (Lion, Adafactor, Muon,
Schedule-free AdamW), computed with the lab's own rules and classes.

Each function returns the numbers a lesson's claim shows (`teaching.lessons_zoo`); the tests
(`tests/test_lessons.py`) measure them again and compare.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from optimizers import registry
from optimizers.muon import newton_schulz

SEED = 0


def lion_step_lengths(steps: int = 5, learning_rate: float = 0.01) -> np.ndarray:
    """|w_t - w_{t-1}| / learning_rate of every coordinate of a [6, 4] variable over `steps`
    Lion steps (no weight decay) on random gradients: [steps, 24], float64. Every entry is 1
    (a coordinate whose direction is exactly 0 would give 0): only the sign of the direction
    is used."""
    rng = np.random.default_rng(SEED)
    opt = registry.create("lion", {"learning_rate": learning_rate})
    var = tf.Variable(rng.normal(size=(6, 4)))
    out = []
    for _ in range(steps):
        before = var.numpy()
        opt.apply_gradients([(tf.constant(rng.normal(size=(6, 4))), var)])
        out.append(np.abs(var.numpy() - before).ravel() / np.float32(learning_rate))
    return np.array(out)


def lion_derivatives(steps: int = 10, learning_rate: float = 0.05) -> dict[str, float]:
    """Forward-mode derivatives of a quadratic validation loss after `steps` Lion steps on
    f(w) = 0.5 sum(s w**2) (float64, eager, the lab's pure rule).

    Returns:
        {"d_beta_1", "d_beta_2": exactly 0 (sign has derivative 0 wherever it is defined),
         "d_lr": d(val loss)/d(lr), "d_lr_from_signs": -grad f(w_T) . sum_t sign(c_t), the
         same number: w_T = w_0 - lr sum_t sign(c_t) with the signs fixed, so the learning
         rate only stretches the path}.
    """
    rule = registry.create("lion", {"learning_rate": learning_rate}, {})
    scales = tf.constant(np.logspace(-1, 1, 6))
    start = tf.constant(np.random.default_rng(SEED).normal(size=6))
    hypers = {k: tf.constant(float(np.float32(v)), tf.float64)
              for k, v in rule.hyper_values().items()}
    out = {}
    for name in ("learning_rate", "beta_1", "beta_2"):
        with tf.autodiff.ForwardAccumulator(hypers[name], tf.constant(1.0, tf.float64)) as acc:
            w, m, signs = start, tf.zeros(6, tf.float64), tf.zeros(6, tf.float64)
            for t in range(1, steps + 1):
                grad = scales * w
                coeffs = rule.coefficients(hypers, tf.constant(float(t), tf.float64))
                signs += tf.sign(coeffs["beta_1"] * m + coeffs["one_minus_beta_1"] * grad)
                w, slots = rule.update(grad, w, {"m": m}, coeffs)
                m = slots["m"]
            loss = 0.5 * tf.reduce_sum(scales * w * w)
        out["d_" + ("lr" if name == "learning_rate" else name)] = float(
            acc.jvp(loss, unconnected_gradients="zero"))
    out["d_lr_from_signs"] = float(-tf.reduce_sum(scales * w * signs))
    return out


def adafactor_slot_sizes(rows: int = 256, columns: int = 256) -> dict[str, int]:
    """Elements of each Adafactor slot of a [rows, columns] float32 kernel, from the slots the
    lab's class creates: {"r": rows, "c": columns, "v": rows * columns}. The paper stores r and
    c only (rows + columns numbers); Keras 3 (and the lab, for parity) also keeps v."""
    opt = registry.create("adafactor")
    var = tf.Variable(tf.zeros((rows, columns)))
    opt._create_all_weights([var])
    return {name: int(np.prod(opt.get_slot(var, name).shape)) for name in opt.get_slot_names()}


def muon_singular_values(rows: int = 64, columns: int = 32, steps: int = 5) -> np.ndarray:
    """Singular values of NS_steps(G) for a Gaussian [rows, columns] G with Keras's
    coefficients, descending (float64): they sit near 1 (roughly 0.7 to 1.2), where G's
    own spread over an order of magnitude."""
    g = tf.constant(np.random.default_rng(SEED).normal(size=(rows, columns)))
    abc = [tf.constant(v, tf.float64) for v in (3.4445, -4.7750, 2.0315)]
    return np.linalg.svd(newton_schulz(g, *abc, steps).numpy(), compute_uv=False)


def muon_update_rms(rows: int = 64, columns: int = 32) -> float:
    """RMS of one Muon step on a [rows, columns] variable, over the learning rate (weight decay
    0, default rms_rate 0.2): about rms_rate, since NS(d) has RMS about 1/sqrt(max(rows,
    columns)) and the step is scaled by sqrt(max(rows, columns)) rms_rate."""
    rng = np.random.default_rng(SEED)
    opt = registry.create("muon", {"learning_rate": 0.01, "weight_decay": 0.0})
    var = tf.Variable(rng.normal(size=(rows, columns)))
    before = var.numpy()
    opt.apply_gradients([(tf.constant(rng.normal(size=(rows, columns))), var)])
    return float(np.sqrt(np.mean((var.numpy() - before) ** 2)) / np.float32(0.01))


def schedule_free_average_weights(steps: int = 10) -> np.ndarray:
    """c_t = gamma_t**2 / sum_i gamma_i**2, the weight of the newest z in the average x, at
    steps 1..`steps` of the lab's paper form (beta_2 0.999, no warm-up), float64 [steps]: 1 at
    step 1, then about 2 / (t + 1) (gamma_t**2 grows like t early on), above Keras's 1/t."""
    opt = registry.create("schedule_free_adamw", {"learning_rate": 0.01})
    var = tf.Variable(np.zeros(3))
    out, previous = [], 0.0
    for _ in range(steps):
        opt.apply_gradients([(tf.constant(np.ones(3)), var)])
        total = float(opt.get_slot(var, "weight_sum").numpy())
        out.append((total - previous) / total)
        previous = total
    return np.array(out)


__all__ = ["adafactor_slot_sizes", "lion_derivatives", "lion_step_lengths",
           "muon_singular_values", "muon_update_rms", "schedule_free_average_weights"]
