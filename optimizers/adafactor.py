"""Adafactor (factored second moments, no first moment) as a pure rule plus its OptimizerV2
adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf
import tf_keras

from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.base import DensifiedSparse, RuleOptimizer
from optimizers.rules import safe_sqrt


class AdafactorSlots(NamedTuple):
    """Adafactor's slots for one variable of rank k (the `add_slot` names, in creation order).

    For k < 2 there is nothing to factor: `r` and `c` are scalar placeholders (0, never
    updated), as in Keras 3 (whose placeholders are int32; here var.dtype).
    """

    r: tf.Tensor  # k >= 2: [*var.shape[:-1]], var.dtype: row means of grad**2 + eps_1; else []
    c: tf.Tensor  # k >= 2: [*var.shape[:-2], var.shape[-1]], var.dtype: column means; else []
    v: tf.Tensor  # [*var.shape], var.dtype: second-moment estimate (k >= 2: r c / mean(r))


def slot_shape(name: str, shape: tf.TensorShape) -> tf.TensorShape:
    """The shape of slot `name` ("r", "c" or "v") for a variable of `shape` (see
    `AdafactorSlots`)."""
    if name == "v":
        return shape
    if shape.rank < 2:
        return tf.TensorShape([])
    return shape[:-1] if name == "r" else shape[:-2].concatenate(shape[-1:])


def rms(x: tf.Tensor) -> tf.Tensor:
    """Root mean square over every element of `x` (scalar, `x`'s dtype; finite derivative at 0)."""
    return safe_sqrt(tf.reduce_mean(tf.square(x)))


def adafactor_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor,
                           relative_step: bool = True) -> dict[str, tf.Tensor]:
    """Adafactor's scalars at 1-based step t = `step` (Shazeer & Stern 2018, Algorithm 4).

    Returns:
        dict with `rho` = min(learning_rate, 1 / sqrt(t)) when `relative_step`, else
        learning_rate (sec. 8); `beta` = 1 - t**beta_2_decay (sec. 7, eq. 12: 0 at t = 1, so the
        first estimate is grad**2 itself); `one_minus_beta`; `epsilon_1`, `epsilon_2`,
        `clip_threshold`. Scalars of the hyperparameters' dtype.
    """
    rho = hypers["learning_rate"]
    if relative_step:
        rho = tf.minimum(rho, tf.math.rsqrt(step))
    beta = 1 - step ** hypers["beta_2_decay"]
    return {"rho": rho, "beta": beta, "one_minus_beta": 1 - beta,
            "epsilon_1": hypers["epsilon_1"], "epsilon_2": hypers["epsilon_2"],
            "clip_threshold": hypers["clip_threshold"]}


def adafactor_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Adafactor step on one variable; pure and differentiable.

        alpha = max(epsilon_2, RMS(var)) * rho                 (relative step size, sec. 8)
        G     = grad**2 + epsilon_1
        rank >= 2:  r = beta r + (1 - beta) mean(G, axis=-1)   (row means)
                    c = beta c + (1 - beta) mean(G, axis=-2)   (column means)
                    v = r[..., :, None] c[..., None, :] / mean(r, axis=-1)
        rank < 2:   v = beta v + (1 - beta) G                  (r, c unchanged placeholders)
        u     = grad / sqrt(v)
        var  <- var - alpha * u / max(1, RMS(u) / clip_threshold)   (update clipping, sec. 6)

    Args:
        grad, var: tensors of one shape (static rank) and real float dtype.
        slots: `r`, `c`, `v` shaped as `slot_shape` says.
        coeffs: from `adafactor_coefficients`.

    Returns:
        (new_var, {"r", "c", "v"}), same shapes and dtype as the inputs.
    """
    alpha = tf.maximum(coeffs["epsilon_2"], rms(var)) * coeffs["rho"]
    squared = tf.square(grad) + coeffs["epsilon_1"]
    beta, one_minus_beta = coeffs["beta"], coeffs["one_minus_beta"]
    if var.shape.rank >= 2:
        r = beta * slots["r"] + one_minus_beta * tf.reduce_mean(squared, axis=-1)
        c = beta * slots["c"] + one_minus_beta * tf.reduce_mean(squared, axis=-2)
        row_factor = r / tf.reduce_mean(r, axis=-1, keepdims=True)
        v = row_factor[..., :, None] * c[..., None, :]
        new_slots = {"r": r, "c": c, "v": v}
    else:
        v = beta * slots["v"] + one_minus_beta * squared
        new_slots = {"r": slots["r"], "c": slots["c"], "v": v}
    u = grad / safe_sqrt(v)
    clipped = u / tf.maximum(tf.ones_like(alpha), rms(u) / coeffs["clip_threshold"])
    return var - alpha * clipped, new_slots


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Adafactor(DensifiedSparse, RuleOptimizer):
    """Adafactor (Shazeer & Stern 2018, arXiv:1804.04235, Algorithms 4-5): Adam's second moment
    stored as row and column means, no first moment, a step relative to the weights' scale.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1 (the maths in
    `adafactor_update`):

        rho   = min(learning_rate, 1 / sqrt(t))   if relative_step, else learning_rate
        alpha = max(epsilon_2, RMS(var)) * rho
        beta  = 1 - t**beta_2_decay
        G     = grad**2 + epsilon_1
        rank >= 2: r = beta r + (1 - beta) rowmean(G); c = beta c + (1 - beta) colmean(G);
                   v = outer(r, c) / mean(r)
        rank < 2:  v = beta v + (1 - beta) G
        var   = var - alpha * (grad / sqrt(v)) / max(1, RMS(grad / sqrt(v)) / clip_threshold)

    Keras 3 parity: `keras.optimizers.Adafactor` (its r, c, velocity lists = this `r`, `c`,
    `v`) gives the same weights and slots step for step with `relative_step=True`
    (tests/test_keras3_algorithms.py). Keras 3.15 applies min(learning_rate, 1/sqrt(t)) whatever
    `relative_step` says (measured: relative_step=False trains exactly as True); here
    `relative_step=False` uses `learning_rate` as given (the paper's absolute step size), so
    Keras 3 parity holds for `relative_step=True` only. Like Keras 3, the full `v` is kept as a
    slot (so that every slot can be compared), although a rank >= 2 step only reads `r` and `c`.

    Sparse gradients: `r`, `c` and `v = r c / mean(r)` couple every row (a column mean runs over
    all rows), so an `IndexedSlices` gradient is densified (rows outside the batch get a zero
    gradient: their statistics decay towards epsilon_1) and the dense rule runs, as Keras 3 does.

    Hyper-gradients: every hyperparameter has one where the rule is smooth. `max(epsilon_2,
    RMS(var))` passes the derivative to epsilon_2 only while RMS(var) < epsilon_2; the clipping
    max(1, RMS(u)/clip_threshold) passes it to clip_threshold only while it clips; `min(lr,
    1/sqrt(t))` passes it to learning_rate only while learning_rate < 1/sqrt(t). Elsewhere those
    derivatives are exactly 0 (forward = reverse = finite differences = 0).

    Slots: `AdafactorSlots` (`r`, `c`, `v`; shapes by `slot_shape`), created in `_create_slots`
    with the shapes `slot_shape` gives.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        beta_2_decay: finite float; UI [-1, 0]. Default -0.8.
        epsilon_1: float >= 0; UI (0, 1]. Default 1e-30.
        epsilon_2: float >= 0; UI (0, 1]. Default 1e-3.
        clip_threshold: float >= 0; UI (0, 100]. Default 1.0.
        relative_step: bool, default True: rho = min(learning_rate, 1/sqrt(t)).

    Raises:
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses, or a negative `decay`.
        TypeError: `relative_step` that is not a bool.
    """

    HYPERPARAMETERS = catalog.own_specs("adafactor")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adafactor")
    SLOTS = AdafactorSlots

    def __init__(self, learning_rate=1e-3, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3,
                 clip_threshold=1.0, relative_step=True, name="Adafactor", **kwargs):
        if not isinstance(relative_step, bool):
            raise TypeError(f"relative_step={relative_step!r} refused: must be True or False")
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_2_decay", beta_2_decay)
        self._set_hyper("epsilon_1", epsilon_1)
        self._set_hyper("epsilon_2", epsilon_2)
        self._set_hyper("clip_threshold", clip_threshold)
        self.relative_step = relative_step

    def slot_shape(self, name, var):
        """`r` and `c` are not shaped like the variable (see `AdafactorSlots`)."""
        return slot_shape(name, var.shape)

    def coefficients(self, hypers, step):
        return adafactor_coefficients(hypers, step, self.relative_step)

    def update(self, grad, var, slots, coeffs):
        return adafactor_update(grad, var, slots, coeffs)

