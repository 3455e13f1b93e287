"""Schedule-Free AdamW (two iterates and an average instead of a learning-rate schedule) as a
pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import tensorflow as tf
import tf_keras

from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.base import DensifiedSparse, RuleOptimizer
from optimizers.rules import safe_sqrt


class ScheduleFreeSlots(NamedTuple):
    """Schedule-Free AdamW's slots for one variable (the `add_slot` names, in creation order).

    The variable itself holds y, the point where the gradient is taken. The averaged iterate x
    (the one to evaluate) is not stored, as in Keras 3: `eval_point` recovers it from y and z.
    """

    z: tf.Tensor  # [*var.shape], var.dtype: the SGD-like iterate (Keras 3: `momentum`), from var
    v: tf.Tensor  # [*var.shape], var.dtype: second-moment estimate (Keras 3: `velocity`)
    # paper form only: [], var.dtype: sum of gamma_i**2 over the steps so far (the weights of x)
    weight_sum: tf.Tensor


class CopyOf:
    """A slot initializer whose value is `var`'s value when the slot is created (z starts at
    the weights: Algorithm 1, line 2). Called as Keras 2's and Keras 3's initializers are,
    `(shape, dtype=...)`."""

    def __init__(self, var: Any):
        self.var = var

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> tf.Tensor:
        del shape, kwargs
        value = tf.convert_to_tensor(self.var)
        return tf.cast(value, dtype) if dtype is not None else tf.identity(value)


def schedule_free_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor,
                               warmup_steps: int = 0) -> dict[str, tf.Tensor]:
    """Schedule-Free AdamW's scalars at 1-based step t = `step` (both forms).

    Returns:
        dict with `beta_1`, `one_minus_beta_1`, `beta_2`, `one_minus_beta_2`, `epsilon`;
        `lr` = learning_rate * min(1, t / warmup_steps) (warm-up; no factor when
        warmup_steps = 0); `gamma` = lr * sqrt(1 - beta_2**t) (the paper's gamma_t, Algorithm
        1 line 8); `correction_2` = 1 - beta_2**t (Keras 3 divides v by it); `weight` = 1 / t
        (Keras 3's averaging weight); `decay_paper` = gamma * weight_decay (of y, into z);
        `learning_rate` and `weight_decay`, and `retain` = 1 - weight_decay * learning_rate
        (Keras 3 decays y by that factor before the step). Scalars of the hyperparameters' dtype.
    """
    lr = hypers["learning_rate"]
    warmed = lr
    if warmup_steps > 0:
        warmed = lr * tf.minimum(step / tf.cast(warmup_steps, step.dtype),
                                 tf.ones((), step.dtype))
    beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
    correction_2 = 1 - tf.pow(beta_2, step)
    gamma = warmed * safe_sqrt(correction_2)
    return {"beta_1": beta_1, "one_minus_beta_1": 1 - beta_1, "beta_2": beta_2,
            "one_minus_beta_2": 1 - beta_2, "epsilon": hypers["epsilon"], "lr": warmed,
            "gamma": gamma, "correction_2": correction_2, "weight": 1 / step,
            "decay_paper": gamma * hypers["weight_decay"],
            "learning_rate": lr, "weight_decay": hypers["weight_decay"],
            "retain": 1 - hypers["weight_decay"] * lr}


def eval_point(y: tf.Tensor, z: tf.Tensor, beta_1: tf.Tensor) -> tf.Tensor:
    """The averaged iterate x = (y - (1 - beta_1) z) / beta_1 (inverting Algorithm 1, line 5).

    Args:
        y: the variable's value; z: its `z` slot (same shape and dtype); beta_1: scalar > 0.
    Returns:
        Tensor shaped like `y`. Exact only while beta_1 is the value y was built with.
    """
    return (y - (1 - beta_1) * z) / beta_1


def schedule_free_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    keras3_tf_compat: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Schedule-Free AdamW step on one variable holding y; pure and differentiable.

    Paper form (Defazio et al. 2024, arXiv:2405.15682, Algorithm 1), `keras3_tf_compat=False`:
        x  = (y - (1 - beta_1) z) / beta_1
        v  = beta_2 v + (1 - beta_2) grad**2                    (grad taken at y)
        z  = z - gamma grad / (sqrt(v) + epsilon) - gamma lambda y
        S  = S + gamma**2;   c = gamma**2 / S
        x  = (1 - c) x + c z;    y = (1 - beta_1) z + beta_1 x

    Keras 3.15 on TensorFlow, `keras3_tf_compat=True`:
        y  = y - y * weight_decay * learning_rate               (Keras's base decay, first)
        v  = v + (grad**2 - v)(1 - beta_2)
        z  = z - lr grad / (sqrt(v / (1 - beta_2**t)) + epsilon)
        x  = (y - (1 - beta_1) z_NEW) / beta_1                  (the live reference)
        x  = (1 - 1/t) x + (1/t) z;    y = (1 - beta_1) z + beta_1 x
    Keras keeps `momentum_old = momentum.value`, which on TensorFlow is the variable itself,
    not a copy, so after `assign_sub` it reads the updated z. Algebra then gives
    y_new = (1 - 1/t) y + (1/t) z_new: y is the running mean of the z iterates and beta_1
    cancels out (its derivative is 0 up to rounding).

    Args:
        grad, var: tensors of one shape, real float dtype (`var` holds y).
        slots: `z`, `v` shaped like `var`; `weight_sum` (paper form only), a scalar.
        coeffs: from `schedule_free_coefficients`.
        keras3_tf_compat: which form (above).

    Returns:
        (new_var, new_slots) with the same names, shapes and dtype.
    """
    z, v = slots["z"], slots["v"]
    beta_1, one_minus_beta_1 = coeffs["beta_1"], coeffs["one_minus_beta_1"]
    if keras3_tf_compat:
        y = var * coeffs["retain"]  # one product per element (see adamw_update)
        v = v + (tf.square(grad) - v) * coeffs["one_minus_beta_2"]
        denom = safe_sqrt(v / coeffs["correction_2"]) + coeffs["epsilon"]
        z = z - coeffs["lr"] * grad / denom
        x = (y - one_minus_beta_1 * z) / beta_1
        weight = coeffs["weight"]
        x = (1 - weight) * x + weight * z
        return one_minus_beta_1 * z + beta_1 * x, {"z": z, "v": v}
    x = eval_point(var, z, beta_1)
    v = coeffs["beta_2"] * v + coeffs["one_minus_beta_2"] * tf.square(grad)
    gamma = coeffs["gamma"]
    z = z - gamma * grad / (safe_sqrt(v) + coeffs["epsilon"]) - coeffs["decay_paper"] * var
    weight_sum = slots["weight_sum"] + tf.square(gamma)
    c = tf.math.divide_no_nan(tf.square(gamma), weight_sum)
    x = (1 - c) * x + c * z
    return one_minus_beta_1 * z + beta_1 * x, {"z": z, "v": v, "weight_sum": weight_sum}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class ScheduleFreeAdamW(DensifiedSparse, RuleOptimizer):
    """Schedule-Free AdamW (Defazio et al. 2024, arXiv:2405.15682, Algorithm 1): no schedule;
    the gradient is taken at an interpolation y of an SGD-like iterate z and their average x.

    Three sequences (Algorithm 1):

        y_t     = (1 - beta_1) z_t + beta_1 x_t              # the model's variables hold y
        z_{t+1} = z_t - gamma_t grad(y_t) / (sqrt(v_t) + epsilon) - gamma_t lambda y_t
        x_{t+1} = (1 - c_{t+1}) x_t + c_{t+1} z_{t+1},  c_{t+1} = gamma_t**2 / sum_i gamma_i**2
        gamma_t = learning_rate sqrt(1 - beta_2**t) min(1, t / warmup_steps)

    x is a weighted average of every z so far: it plays the part of the schedule's final
    annealing, so nothing has to know the run's length. Evaluate on x, not on y: `eval_point`
    recovers it, x = (y - (1 - beta_1) z) / beta_1 (the run evaluates its validation loss on x).

    `keras3_tf_compat=True` reproduces `keras.optimizers.ScheduleFreeAdamW` of Keras 3.15 on the
    TensorFlow backend, which differs from the paper in four ways (`schedule_free_update`):
    the average's weight is 1/t (not gamma_t**2 / sum gamma_i**2), v is bias-corrected inside
    the square root (epsilon not scaled), weight decay is applied to y before the step, and x_old
    is rebuilt from the already-updated z because `momentum.value` is a live reference to the
    variable, not a snapshot (`read_value()` would copy). With it, weights and both slots equal
    Keras's to 1e-6 in float32 after 20 steps (tests/test_keras3_algorithms.py); the paper form
    differs from Keras by about 1e-2 there. The same lesson as Keras 2's `self.t_cur = 5` vs
    `_set_hyper`: what a traced step reads depends on whether it holds a value or a variable.

    Sparse gradients: x and y couple through z and the average weights of every row; an
    `IndexedSlices` gradient is densified and the dense rule runs (as Keras 3 does).

    Hyper-gradients: every hyperparameter has one in the paper form. With `keras3_tf_compat`,
    beta_1 cancels out of the update (y_new = (1 - 1/t) y + z_new / t), so d/d beta_1 is 0
    up to rounding.

    Slots: `ScheduleFreeSlots` (`z` from the weights, `v`; `weight_sum` in the paper form).

    Args:
        {{hyperparameter_args}}
        warmup_steps: int in [0, 1000000], default 0: linear warm-up of the learning rate.
        keras3_tf_compat: bool, default False: the paper (False) or Keras 3.15 on TensorFlow.

    {{allowed_values}}

    Raises:
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses, or a negative `decay`.
        TypeError: `keras3_tf_compat` not a bool, `warmup_steps` not an int.
        ValueError: `warmup_steps` outside [0, 1000000].
    """

    REGISTRY_NAME = "schedule_free_adamw"
    HYPERPARAMETERS = catalog.own_specs("schedule_free_adamw")  # the one declaration: catalog
    OPTIONS = catalog.option_names("schedule_free_adamw")
    SLOTS = ScheduleFreeSlots
    OPTIONAL_SLOTS = {"weight_sum": "paper_form"}

    def __init__(self, learning_rate=0.0025, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 weight_decay=0.0, warmup_steps=0, keras3_tf_compat=False,
                 name="ScheduleFreeAdamW", **kwargs):
        if not isinstance(keras3_tf_compat, bool):
            raise TypeError(f"keras3_tf_compat={keras3_tf_compat!r} refused: must be True or "
                            "False")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int):
            raise TypeError(f"warmup_steps={warmup_steps!r} refused: must be an int in "
                            "[0, 1000000]")
        if not 0 <= warmup_steps <= 1_000_000:
            raise ValueError(f"warmup_steps={warmup_steps!r} refused: must be an int in "
                             "[0, 1000000]")
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", epsilon)
        self._set_hyper("weight_decay", weight_decay)
        self.warmup_steps, self.keras3_tf_compat = warmup_steps, keras3_tf_compat

    @property
    def paper_form(self) -> bool:
        """True when the rule follows the paper (`keras3_tf_compat=False`)."""
        return not self.keras3_tf_compat

    def slot_initializer(self, name, var):
        """z starts at the weights (`CopyOf`); v and weight_sum at 0."""
        return CopyOf(var) if name == "z" else "zeros"

    def slot_shape(self, name, var):
        """`weight_sum` is one scalar per variable."""
        return tf.TensorShape([]) if name == "weight_sum" else var.shape

    def coefficients(self, hypers, step):
        return schedule_free_coefficients(hypers, step, self.warmup_steps)

    def update(self, grad, var, slots, coeffs):
        return schedule_free_update(grad, var, slots, coeffs, self.keras3_tf_compat)

    def eval_weights(self, variables: list[tf.Variable]) -> list[tf.Tensor]:
        """x for every variable in `variables` (`eval_point` with the current beta_1): the
        weights to evaluate on. A variable without slots yet is its own x (z = y).

        With `keras3_tf_compat` the variables themselves, as Keras 3 evaluates them: there y
        is already the running mean of the z iterates, and the x its step computes is an
        intermediate with no meaning of its own."""
        if self.keras3_tf_compat:
            return [tf.convert_to_tensor(var) for var in variables]
        beta_1 = None
        out = []
        for var in variables:
            try:
                z = self.get_slot(var, "z")
            except KeyError:
                out.append(tf.convert_to_tensor(var))
                continue
            if beta_1 is None:
                beta_1 = self._get_hyper("beta_1", var.dtype)
            out.append(eval_point(tf.convert_to_tensor(var), tf.convert_to_tensor(z),
                                  tf.cast(beta_1, var.dtype)))
        return out

