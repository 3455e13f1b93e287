"""Adamax (Adam with the infinity norm) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.rules import keras_epsilon
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free


class AdamaxSlots(NamedTuple):
    """Adamax's slots for one variable (the `add_slot` names, in creation order)."""

    m: tf.Tensor  # [*var.shape], var.dtype: first-moment estimate (running mean of grad)
    v: tf.Tensor  # [*var.shape], var.dtype: u, exponentially weighted infinity norm of grad


def adamax_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of Adamax at 1-based step `step` (Kingma & Ba 2015, Algorithm 2).

    Returns:
        dict with `lr_t = learning_rate / (1 - beta_1**t)` (the bias correction of m; u needs
        none), `beta_1`, `beta_2`, `epsilon`, `one_minus_beta_1`, scalars of the same dtype.
    """
    beta_1 = hypers["beta_1"]
    return {"lr_t": hypers["learning_rate"] / (1 - beta_1**step), "beta_1": beta_1,
            "beta_2": hypers["beta_2"], "epsilon": hypers["epsilon"],
            "one_minus_beta_1": 1 - beta_1}


def adamax_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Adamax step on one variable; pure and differentiable (see `Adamax`).

    Args:
        grad, var: tensors of one shape and real float dtype.
        slots: `m`, `v` (u), shaped like `var`.
        coeffs: from `adamax_coefficients`.

    Returns:
        (new_var, {"m", "v"}), same shapes and dtype as `var`.
    """
    step, new_slots = adamax_decrement(grad, slots, coeffs)
    return var - step, new_slots


def adamax_decrement(
    grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`adamax_update` without the variable: (lr_t * m / (u + epsilon), new_slots), shaped like
    `grad`; new_var = var - the first."""
    m = coeffs["beta_1"] * slots["m"] + coeffs["one_minus_beta_1"] * grad
    u = tf.maximum(coeffs["beta_2"] * slots["v"], tf.abs(grad))
    return coeffs["lr_t"] * m / (u + coeffs["epsilon"]), {"m": m, "v": u}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Adamax(RuleOptimizer):
    """Adamax (Kingma & Ba 2015, arXiv:1412.6980, sec. 7.1, Algorithm 2), Keras form.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1:

        m   = beta_1 * m + (1 - beta_1) * grad
        u   = max(beta_2 * u, |grad|)                 # the `v` slot
        var = var - learning_rate / (1 - beta_1**t) * m / (u + epsilon)

    The paper has no epsilon (u > 0 once a gradient was non-zero); Keras adds it to u, as here,
    so this matches `tf_keras.optimizers.legacy.Adamax` (its `ResourceApplyAdaMax` kernel,
    dense, and its sparse path, which updates only the rows of an `IndexedSlices`, slots
    included: the lab's sparse path does the same with the rule). Unlike Keras, `epsilon` is a
    `_set_hyper` hyperparameter (live and differentiable). The derivative of max and |.| is
    taken one-sided, as TensorFlow's gradients of `tf.maximum` and `tf.abs` do (0 at grad = 0).

    Slots: `AdamaxSlots` (`m`, `v`), both starting at 0.

    Dtypes: float16, float32, float64 (as Keras; its dense kernel has no bfloat16, where the
    lab runs the rule) and bfloat16. No complex: Keras refuses it (|grad| is real).

    Allowed values: the library (this class, `_set_hyper`) follows Keras's rules
    (`HyperSpec.library_check`); the lab's UI, CLI, URL and config import offer the narrower
    UI range (`HyperSpec.validate`, via `registry.validate_hypers`), floats only. Keyword
    arguments of the base class: `lr` (alias of learning_rate), `decay` (float >= 0:
    learning_rate / (1 + decay * iterations), via `_decayed_lr`), `clipnorm`, `clipvalue`,
    `global_clipnorm`.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        beta_1: library: finite float, zero-arg callable or scalar tensor; UI: [0, 1). Default 0.9.
        beta_2: library: as beta_1; UI: [0, 1). Default 0.999.
        epsilon: library: float >= 0, callable or scalar tensor; 0 or None means 1e-7, as Keras
            (`epsilon or backend.epsilon()`). UI: (0, 1]. Default 1e-7.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses, or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("adamax")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adamax")
    SLOTS = AdamaxSlots

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 name="Adamax", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", keras_epsilon(epsilon))

    def coefficients(self, hypers, step):
        return adamax_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adamax_update(grad, var, slots, coeffs)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return adamax_decrement(grad, slots, coeffs)

    # The fused path: the kernel `tf_keras.optimizers.legacy.Adamax` runs; it folds the bias
    # correction itself (lr / (1 - beta_1**t)) from `beta_1**t`.
    def fused_kernel(self, var):
        del var
        return "ResourceApplyAdaMax"

    def fused_coefficients(self, hypers, step):
        return {"lr": hypers["learning_rate"], "beta_1_power": hypers["beta_1"] ** step}

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        del kernel
        return tf.raw_ops.ResourceApplyAdaMax(
            var=var.handle, m=slots["m"].handle, v=slots["v"].handle,
            beta1_power=coeffs["beta_1_power"], lr=coeffs["lr"], beta1=coeffs["beta_1"],
            beta2=coeffs["beta_2"], epsilon=coeffs["epsilon"], grad=grad,
            use_locking=self._use_locking)
