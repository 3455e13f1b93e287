"""Adagrad as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

import math
from typing import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.hyperparams import EPSILON, LEARNING_RATE
from optimizers.rules import safe_sqrt

ADAGRAD_REFERENCE = (
    "Duchi, Hazan & Singer 2011, 'Adaptive Subgradient Methods for Online Learning and "
    "Stochastic Optimization', JMLR 12, eq. (1) diagonal form"
)


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
    accumulator = slots["accumulator"] + tf.square(grad)
    step = coeffs["lr_t"] * grad / (safe_sqrt(accumulator) + coeffs["epsilon"])
    return var - step, {"accumulator": accumulator}


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

    Slots (shaped like the variable, same dtype): `accumulator`.

    Args:
        learning_rate: float in (0, 10], default 1e-3.
        epsilon: float in (0, 1], default 1e-7.
        initial_accumulator_value: float >= 0, default 0.1.

    Raises:
        InvalidHyperparameter: a hyperparameter outside its range, NaN/inf or not a number.
        ValueError: `initial_accumulator_value` negative, NaN or not a number.
    """

    HYPERPARAMETERS = (LEARNING_RATE, EPSILON)
    OPTIONS = ("initial_accumulator_value",)

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
        self._set_hyper("epsilon", epsilon)
        if isinstance(initial_accumulator_value, bool) or not (
            isinstance(initial_accumulator_value, (int, float))
            and 0.0 <= initial_accumulator_value < math.inf
        ):
            raise ValueError(
                f"initial_accumulator_value={initial_accumulator_value!r} refused: "
                "must be a finite float >= 0"
            )
        self.initial_accumulator_value = float(initial_accumulator_value)

    def slot_initializers(self) -> dict[str, tf_keras.initializers.Initializer]:
        """Initializer of each slot (used by `GradientAccumulation` to create this rule's slots)."""
        return {"accumulator": tf.constant_initializer(self.initial_accumulator_value)}

    def _create_slots(self, var_list):
        initializer = tf.constant_initializer(self.initial_accumulator_value)
        for var in var_list:
            self.add_slot(var, "accumulator", initializer=initializer)

    def slot_names_for_rule(self):
        return ("accumulator",)

    def coefficients(self, hypers, step):
        return adagrad_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adagrad_update(grad, var, slots, coeffs)
