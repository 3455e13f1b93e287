"""Lion (EvoLved Sign Momentum) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf
import tf_keras

from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.base import RuleOptimizer


class LionSlots(NamedTuple):
    """Lion's slot for one variable (the `add_slot` name)."""

    m: tf.Tensor  # [*var.shape], var.dtype: momentum, beta_2 * m + (1 - beta_2) * grad


def lion_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Lion's scalars: `learning_rate`, `beta_1`, `beta_2`, `1 - beta_1`, `1 - beta_2` and
    `decay = learning_rate * weight_decay`, `retain = 1 - decay` (scalars of the hyperparameters' dtype).

    Lion has no bias correction, so `step` (the 1-based step t) is not used.
    """
    del step
    beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
    return {"learning_rate": hypers["learning_rate"], "beta_1": beta_1, "beta_2": beta_2,
            "one_minus_beta_1": 1 - beta_1, "one_minus_beta_2": 1 - beta_2,
            "decay": hypers["learning_rate"] * hypers["weight_decay"],
            "retain": 1 - hypers["learning_rate"] * hypers["weight_decay"]}


def lion_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Lion step on one variable; pure.

        var <- var - decay * var                                  (decay = lr * weight_decay)
        var <- var - learning_rate * sign(beta_1 * m + (1 - beta_1) * grad)
        m   <- beta_2 * m + (1 - beta_2) * grad

    Args:
        grad, var: tensors of one shape and real float dtype.
        slots: `m`, shaped like `var`.
        coeffs: from `lion_coefficients`.

    Returns:
        (new_var, {"m": new_m}), same shapes and dtype as `var`.
    """
    m = slots["m"]
    direction = tf.sign(coeffs["beta_1"] * m + coeffs["one_minus_beta_1"] * grad)
    decayed = var * coeffs["retain"]  # one product per element (see adamw_update)
    new_m = coeffs["beta_2"] * m + coeffs["one_minus_beta_2"] * grad
    return decayed - coeffs["learning_rate"] * direction, {"m": new_m}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Lion(RuleOptimizer):
    """Lion (Chen et al. 2023, arXiv:2302.06675, Program 1): the sign of an interpolated momentum.

    Update for each variable `var` with gradient `grad` (no bias correction, no epsilon):

        var = var - learning_rate * weight_decay * var        # decoupled decay, first
        c   = beta_1 * m + (1 - beta_1) * grad
        var = var - learning_rate * sign(c)
        m   = beta_2 * m + (1 - beta_2) * grad

    Every coordinate whose `c` is not 0 moves by exactly `learning_rate` (plus decay), so the
    paper (sec. 3.2) recommends a learning rate 3-10x smaller than AdamW's and a weight decay
    3-10x larger. The decay is applied before the step, scaled by the learning rate, as Keras 3
    applies `weight_decay` (the same number as the paper's `lr * lambda * var` term, which it
    adds to the sign inside the step: sign(c) does not depend on `var`, so both orders agree).

    Keras 3 parity: `keras.optimizers.Lion` (slot `momentum` = this `m`) gives the same weights
    and slots step for step (tests/test_keras3_algorithms.py). Keras 3 densifies an
    `IndexedSlices` gradient (every row's momentum decays; every row of `c` = beta_1 m != 0
    moves); this class's sparse update is lazy (`RuleOptimizer._resource_apply_sparse`): only
    the rows in the batch change, in `var` and in `m`.

    Hyper-gradients: `sign` has derivative 0 wherever `c != 0` (and none at 0). The weights
    depend on `beta_1` and `beta_2` only through the signs, so d(validation loss)/d(beta_1) and
    d/d(beta_2) are exactly 0 wherever no sign flips within the perturbation (almost
    everywhere): forward mode, reverse mode and finite differences all give 0. d/d(learning_rate)
    and d/d(weight_decay) flow through the step size and the decay: the derivative of the
    piecewise-smooth validation loss between sign flips.

    Slots: `LionSlots` (`m`), created in `_create_slots` from that record.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3 (Keras 3's).
        beta_1: finite float; UI [0, 1). Default 0.9.
        beta_2: finite float; UI [0, 1). Default 0.99.
        weight_decay: finite float; UI [0, 1]. Default 0.0 (off, as Keras 3's None).

    Raises:
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses (NaN/inf, bool,
            string, negative learning_rate, non-scalar tensor), or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("lion")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("lion")
    SLOTS = LionSlots

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.99, weight_decay=0.0,
                 name="Lion", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("weight_decay", weight_decay)

    def coefficients(self, hypers, step):
        return lion_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return lion_update(grad, var, slots, coeffs)
