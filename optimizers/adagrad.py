"""Adagrad as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.rules import keras_epsilon, safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free



class AdagradSlots(NamedTuple):
    """Adagrad's slot for one variable (the `add_slot` name)."""

    accumulator: tf.Tensor  # [*var.shape], var.dtype: sum of grad**2, from initial_accumulator_value


def adagrad_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of Adagrad (independent of the step)."""
    del step
    return {"lr_t": hypers["learning_rate"], "epsilon": hypers["epsilon"]}


def adagrad_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Adagrad step on one variable; pure and differentiable.

        accumulator <- accumulator + grad**2
        var         <- var - lr_t * grad / (sqrt(accumulator) + epsilon)

    Args:
        grad, var: tensors of one shape and float dtype.
        slots: `accumulator`, shaped like `var`.
        coeffs: from `adagrad_coefficients`.

    Returns:
        (new_var, {"accumulator"}), same shapes and dtype as `var`.
    """
    step, new_slots = adagrad_decrement(grad, slots, coeffs)
    return var - step, new_slots


def adagrad_decrement(
    grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`adagrad_update` without the variable: (step, new_slots), new_var = var - step.

    `step = lr_t * grad / (sqrt(accumulator) + epsilon)`, shaped like `grad`; the variable is
    not needed to compute it, which lets the OptimizerV2 adapter subtract it in place.
    """
    accumulator = slots["accumulator"] + tf.square(grad)
    step = coeffs["lr_t"] * grad / (safe_sqrt(accumulator) + coeffs["epsilon"])
    return step, {"accumulator": accumulator}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Adagrad(RuleOptimizer):
    """Adagrad (Duchi, Hazan & Singer 2011, JMLR), Keras form with epsilon outside the root.

    Update for each variable `var` with gradient `grad`:

        accumulator = accumulator + grad**2
        var = var - learning_rate * grad / (sqrt(accumulator) + epsilon)

    Matches `tf_keras.optimizers.legacy.Adagrad` (its `ResourceApplyAdagradV2` kernel). Unlike
    Keras, `epsilon` is a `_set_hyper` hyperparameter (live and differentiable).

    `initial_accumulator_value` is a plain attribute (listed in OPTIONS), not a hyperparameter:
    it is only the constant the `accumulator` slot is initialised with in `_create_slots`, so
    changing it after the first step would have no effect. It must be a float (the registry
    checks option types against the default's, 0.1), e.g. 1.0 rather than 1.

    Slots: `AdagradSlots` (`accumulator`, starting at `initial_accumulator_value`).

    Dtypes: float16, bfloat16, float32, float64, complex64, complex128 (as Keras).

    `epsilon` 0 or None means 1e-7, as Keras (`epsilon or backend.epsilon()`); a live
    `_set_hyper("epsilon", 0.0)` sets a true 0.

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}
        initial_accumulator_value: int or float >= 0 (stored as float), default 0.1.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses, or a negative `decay`.
        ValueError: `initial_accumulator_value` negative, NaN or not a number.
    """

    HYPERPARAMETERS = catalog.own_specs("adagrad")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adagrad")
    SLOTS = AdagradSlots

    def __init__(
        self,
        learning_rate=1e-3,
        epsilon=1e-7,
        initial_accumulator_value=0.1,
        name="Adagrad",
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("epsilon", keras_epsilon(epsilon))
        if isinstance(initial_accumulator_value, bool) or not (
            isinstance(initial_accumulator_value, (int, float))
            and 0.0 <= initial_accumulator_value < math.inf
        ):
            raise ValueError(
                f"initial_accumulator_value={initial_accumulator_value!r} refused: "
                "must be a finite float >= 0"
            )
        self.initial_accumulator_value = float(initial_accumulator_value)

    def slot_initializer(self, name: str, var: tf.Variable) -> Any:
        """`accumulator` starts at `initial_accumulator_value` (also inside `GradientAccumulation`)."""
        if name == "accumulator":
            return tf.constant_initializer(self.initial_accumulator_value)
        return super().slot_initializer(name, var)

    def coefficients(self, hypers, step):
        return adagrad_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adagrad_update(grad, var, slots, coeffs)

    # The fused path: the kernel `tf_keras.optimizers.legacy.Adagrad` runs (same form:
    # accumulator += grad**2; var -= lr * grad / (sqrt(accumulator) + epsilon)).
    def fused_kernel(self, var):
        del var
        return "ResourceApplyAdagradV2"

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        del kernel
        return tf.raw_ops.ResourceApplyAdagradV2(
            var=var.handle, accum=slots["accumulator"].handle, lr=coeffs["lr_t"],
            epsilon=coeffs["epsilon"], grad=grad, use_locking=self._use_locking)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return adagrad_decrement(grad, slots, coeffs)
