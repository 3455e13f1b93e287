"""LAMB (layer-wise adaptive moments) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf
import tf_keras

from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.adam import adam_moments
from optimizers.base import RuleOptimizer
from optimizers.rules import keras_epsilon, safe_sqrt


class LambSlots(NamedTuple):
    """LAMB's slots for one variable (the `add_slot` names, in creation order)."""

    m: tf.Tensor  # [*var.shape], var.dtype: first-moment estimate (running mean of grad)
    v: tf.Tensor  # [*var.shape], var.dtype: second-moment estimate (running mean of grad**2)


def lamb_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """LAMB's scalars at 1-based step `step` (You et al. 2020, Algorithm 2).

    Returns:
        dict with `learning_rate`, `beta_1`, `beta_2`, `epsilon`, `one_minus_beta_1`,
        `one_minus_beta_2`, the bias corrections `correction_1 = 1 - beta_1**t` and
        `correction_2 = 1 - beta_2**t`, `decay = learning_rate * weight_decay` and
        `retain = 1 - decay`; scalars of the hyperparameters' dtype.
    """
    beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
    return {"learning_rate": hypers["learning_rate"], "beta_1": beta_1, "beta_2": beta_2,
            "epsilon": hypers["epsilon"], "one_minus_beta_1": 1 - beta_1,
            "one_minus_beta_2": 1 - beta_2, "correction_1": 1 - beta_1**step,
            "correction_2": 1 - beta_2**step,
            "decay": hypers["learning_rate"] * hypers["weight_decay"],
            "retain": 1 - hypers["learning_rate"] * hypers["weight_decay"]}


def trust_ratio(var: tf.Tensor, update: tf.Tensor) -> tf.Tensor:
    """||var|| / ||update|| (Euclidean norms over every element), 1 when either norm is 0.

    The norms use `safe_sqrt`, so the ratio has a finite derivative even when a norm is 0.
    Returns a scalar of `var`'s dtype.
    """
    var_norm = safe_sqrt(tf.reduce_sum(tf.square(var)))
    update_norm = safe_sqrt(tf.reduce_sum(tf.square(update)))
    both = tf.logical_and(var_norm > 0, update_norm > 0)
    one = tf.ones_like(var_norm)
    return tf.where(both, var_norm / tf.where(both, update_norm, one), one)


def lamb_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One LAMB step on one variable (a whole layer's weight tensor); pure and differentiable.

        var <- var - decay * var                               (decay = lr * weight_decay)
        m   <- beta_1 * m + (1 - beta_1) * grad
        v   <- beta_2 * v + (1 - beta_2) * grad**2
        u    = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
        var <- var - learning_rate * trust_ratio(var, u) * u

    Args:
        grad, var: tensors of one shape and real float dtype.
        slots: `m`, `v`, shaped like `var`.
        coeffs: from `lamb_coefficients`.

    Returns:
        (new_var, {"m", "v"}), same shapes and dtype as `var`.
    """
    m, v = adam_moments(grad, slots["m"], slots["v"], coeffs)
    update = (m / coeffs["correction_1"]) / (
        safe_sqrt(v / coeffs["correction_2"]) + coeffs["epsilon"])
    decayed = var * coeffs["retain"]  # one product per element (see adamw_update)
    step = coeffs["learning_rate"] * trust_ratio(decayed, update)
    return decayed - step * update, {"m": m, "v": v}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Lamb(RuleOptimizer):
    """LAMB (You et al. 2020, arXiv:1904.00962, Algorithm 2): Adam's step rescaled per layer.

    Update for each variable `var` (one layer's tensor) with gradient `grad` at step
    t = iterations + 1:

        var = var - learning_rate * weight_decay * var             # decoupled decay, first
        m   = beta_1 * m + (1 - beta_1) * grad
        v   = beta_2 * v + (1 - beta_2) * grad**2
        u   = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
        var = var - learning_rate * (||var|| / ||u||) * u          # ratio 1 if a norm is 0

    The trust ratio ||var|| / ||u|| makes every layer move by `learning_rate` times its own
    norm, whatever the scale of its gradients (the paper's phi is the identity here).

    Weight decay is NOT inside the trust ratio, as in Keras 3 (measured on Keras 3.15: it
    applies `weight_decay` to every variable before the step, scaled by the learning rate), where
    the paper adds `lambda * var` to `u` before taking the norm. The ratio uses the decayed
    variable's norm.

    Keras 3 parity: `keras.optimizers.Lamb` (slots `momentum`, `velocity` = this `m`, `v`) gives
    the same weights and slots step for step (tests/test_keras3_algorithms.py). Keras 3
    densifies an `IndexedSlices` gradient: every row's m and v decay and the norms are over the
    whole table. This class's sparse update is lazy (`RuleOptimizer._resource_apply_sparse`):
    the rule runs on the batch's rows only, so the trust ratio is ||rows|| / ||u of the rows||,
    the rows a step touches taken as the layer; other rows and their slots are untouched.

    Hyper-gradients: every hyperparameter has one (forward = reverse = finite differences,
    tests/test_keras3_algorithms.py); the norms use the finite-derivative square root.

    Slots: `LambSlots` (`m`, `v`), created in `_create_slots` from that record.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        beta_1: finite float; UI [0, 1). Default 0.9.
        beta_2: finite float; UI [0, 1). Default 0.999.
        epsilon: float >= 0; 0 or None means 1e-7 (Keras). UI (0, 1]. Default 1e-7.
        weight_decay: finite float; UI [0, 1]. Default 0.0 (off, as Keras 3's None).

    Raises:
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses (NaN/inf, bool,
            string, negative learning_rate or epsilon, non-scalar tensor), or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("lamb")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("lamb")
    SLOTS = LambSlots

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 weight_decay=0.0, name="Lamb", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", keras_epsilon(epsilon))
        self._set_hyper("weight_decay", weight_decay)

    def coefficients(self, hypers, step):
        return lamb_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return lamb_update(grad, var, slots, coeffs)
