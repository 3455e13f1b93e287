"""Adadelta as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.rules import keras_epsilon, safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free


class AdadeltaSlots(NamedTuple):
    """Adadelta's slots for one variable (the `add_slot` names, in creation order)."""

    accum_grad: tf.Tensor  # [*var.shape], var.dtype: running mean E[g^2] of grad**2
    accum_var: tf.Tensor   # [*var.shape], var.dtype: running mean E[dx^2] of update**2


def adadelta_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor
                          ) -> dict[str, tf.Tensor]:
    """Scalar coefficients of Adadelta (independent of the step).

    Returns:
        dict with `lr_t` (the learning rate), `rho`, `epsilon` and `one_minus_rho` (computed
        once per step rather than per variable), scalars of the hyperparameters' dtype.
    """
    del step
    return {"lr_t": hypers["learning_rate"], "rho": hypers["rho"],
            "epsilon": hypers["epsilon"], "one_minus_rho": 1 - hypers["rho"]}


def adadelta_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Adadelta step on one variable; pure and differentiable (see `Adadelta`).

    Args:
        grad, var: tensors of one shape and float or complex dtype.
        slots: `accum_grad`, `accum_var`, shaped like `var`.
        coeffs: from `adadelta_coefficients`.

    Returns:
        (new_var, {"accum_grad", "accum_var"}), same shapes and dtype as `var`.
    """
    step, new_slots = adadelta_decrement(grad, slots, coeffs)
    return var - step, new_slots


def adadelta_decrement(
    grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`adadelta_update` without the variable: (lr_t * update, new_slots), new_var = var - it.

    `update = sqrt(accum_var + epsilon) / sqrt(accum_grad_new + epsilon) * grad` (Zeiler 2012,
    Algorithm 1, lines 4-5), shaped like `grad`; the variable is not needed to compute it, which
    lets the OptimizerV2 adapter subtract it in place.
    """
    rho, one_minus_rho, epsilon = coeffs["rho"], coeffs["one_minus_rho"], coeffs["epsilon"]
    accum_grad = rho * slots["accum_grad"] + one_minus_rho * tf.square(grad)
    update = safe_sqrt(slots["accum_var"] + epsilon) / safe_sqrt(accum_grad + epsilon) * grad
    accum_var = rho * slots["accum_var"] + one_minus_rho * tf.square(update)
    return coeffs["lr_t"] * update, {"accum_grad": accum_grad, "accum_var": accum_var}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Adadelta(RuleOptimizer):
    """Adadelta (Zeiler 2012, arXiv:1212.5701, Algorithm 1) with Keras's learning rate.

    Update for each variable `var` with gradient `grad`:

        accum_grad = rho * accum_grad + (1 - rho) * grad**2                  # E[g^2]_t
        update     = sqrt(accum_var + epsilon) / sqrt(accum_grad + epsilon) * grad
        accum_var  = rho * accum_var + (1 - rho) * update**2                 # E[dx^2]_t
        var        = var - learning_rate * update

    The paper applies `update` with no learning rate (learning_rate = 1.0 gives it); Keras 2
    multiplies it by `learning_rate` (default 0.001), as does this class, so it matches
    `tf_keras.optimizers.legacy.Adadelta` (its `ResourceApplyAdadelta` kernel, dense, and
    `ResourceSparseApplyAdadelta`, which updates only the rows of an `IndexedSlices`: the lab's
    sparse path does the same with the rule). Unlike Keras, `epsilon` is a `_set_hyper`
    hyperparameter (live and differentiable). For complex variables `grad**2` and `update**2`
    are complex squares (not |.|**2) and the square roots principal, as in the kernel.

    Slots: `AdadeltaSlots` (`accum_grad`, `accum_var`, both starting at 0).

    Dtypes: float16, bfloat16, float32, float64, complex64, complex128 (as Keras).

    Allowed values: the library (this class, `_set_hyper`) follows Keras's rules
    (`HyperSpec.library_check`); the lab's UI, CLI, URL and config import offer the narrower
    UI range (`HyperSpec.validate`, via `registry.validate_hypers`), floats only. Keyword
    arguments of the base class: `lr` (alias of learning_rate), `decay` (float >= 0:
    learning_rate / (1 + decay * iterations), via `_decayed_lr`), `clipnorm`, `clipvalue`,
    `global_clipnorm`.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        rho: library: finite float, callable or scalar tensor; UI: [0, 1). Default 0.95.
        epsilon: library: float >= 0, callable or scalar tensor; 0 or None means 1e-7, as Keras
            (`epsilon or backend.epsilon()`). UI: (0, 1]. Default 1e-7.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses, or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("adadelta")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adadelta")
    SLOTS = AdadeltaSlots

    def __init__(self, learning_rate=1e-3, rho=0.95, epsilon=1e-7, name="Adadelta", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("rho", rho)
        self._set_hyper("epsilon", keras_epsilon(epsilon))

    def coefficients(self, hypers, step):
        return adadelta_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adadelta_update(grad, var, slots, coeffs)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return adadelta_decrement(grad, slots, coeffs)

    # The fused path: the kernel `tf_keras.optimizers.legacy.Adadelta` runs (same update).
    def fused_kernel(self, var):
        del var
        return "ResourceApplyAdadelta"

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        del kernel
        return tf.raw_ops.ResourceApplyAdadelta(
            var=var.handle, accum=slots["accum_grad"].handle,
            accum_update=slots["accum_var"].handle, lr=coeffs["lr_t"], rho=coeffs["rho"],
            epsilon=coeffs["epsilon"], grad=grad, use_locking=self._use_locking)
