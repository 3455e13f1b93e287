"""FTRL-Proximal as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.rules import safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free


class FtrlSlots(NamedTuple):
    """Ftrl's slots for one variable (the `add_slot` names, in creation order)."""

    accumulator: tf.Tensor  # [*var.shape], var.dtype: n, initial_accumulator_value + sum grad**2
    linear: tf.Tensor       # [*var.shape], var.dtype: z, the linear term (sum of g - sigma var)


def ftrl_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of FTRL-Proximal (independent of the step).

    Returns:
        dict with `lr_t` (learning rate alpha), `l1`, `two_l2` (2 * l2, TensorFlow's
        convention), `two_l2_shrinkage` and `beta`, scalars of the hyperparameters' dtype.
    """
    del step
    return {"lr_t": hypers["learning_rate"], "l1": hypers["l1_regularization_strength"],
            "two_l2": 2 * hypers["l2_regularization_strength"],
            "two_l2_shrinkage": 2 * hypers["l2_shrinkage_regularization_strength"],
            "beta": hypers["beta"]}


def accumulator_power(n: tf.Tensor, learning_rate_power: float) -> tf.Tensor:
    """`n ** -learning_rate_power` (n >= 0), with a finite derivative at n = 0.

    -0.5 (the default, McMahan et al.'s sqrt(n)) uses `safe_sqrt`; another power uses the same
    double-`tf.where` form around `tf.pow`, whose derivative at 0 is infinite for powers in
    (-1, 0). The power is a Python float (an option): the branch is chosen when tracing.
    """
    if learning_rate_power == -0.5:
        return safe_sqrt(n)
    exponent = tf.constant(-learning_rate_power, n.dtype)
    positive = n > 0
    safe = tf.where(positive, n, tf.ones_like(n))
    at_zero = tf.ones_like(n) if learning_rate_power == 0 else tf.zeros_like(n)
    return tf.where(positive, tf.pow(safe, exponent), at_zero)


def ftrl_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    learning_rate_power: float = -0.5,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One FTRL-Proximal step on one variable; pure and differentiable (see `Ftrl`).

    Args:
        grad, var: tensors of one shape and real float dtype.
        slots: `accumulator` (n), `linear` (z), shaped like `var`.
        coeffs: from `ftrl_coefficients`.
        learning_rate_power: p <= 0, the per-coordinate rate is lr / n**-p.

    Returns:
        (new_var, {"accumulator", "linear"}), same shapes and dtype as `var`. The new variable
        is a closed form of z and n (it does not add a step to `var`), so there is no
        `ftrl_decrement`.
    """
    lr_t = coeffs["lr_t"]
    n, z = slots["accumulator"], slots["linear"]
    n_new = n + tf.square(grad)
    root_new = accumulator_power(n_new, learning_rate_power)
    sigma = (root_new - accumulator_power(n, learning_rate_power)) / lr_t
    z_new = z + (grad + coeffs["two_l2_shrinkage"] * var) - sigma * var
    quadratic = (coeffs["beta"] + root_new) / lr_t + coeffs["two_l2"]
    l1 = coeffs["l1"]
    new_var = tf.where(tf.abs(z_new) > l1, (tf.sign(z_new) * l1 - z_new) / quadratic,
                       tf.zeros_like(z_new))
    return new_var, {"accumulator": n_new, "linear": z_new}


def _check_float(option: str, value: Any, low: float, high: float, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{option}={value!r} refused: must be {allowed}")
    return float(value)


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Ftrl(RuleOptimizer):
    """FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the Trenches", KDD,
    Algorithm 1), in TensorFlow's parametrisation, as `tf_keras.optimizers.legacy.Ftrl`.

    Update for each coordinate of `var` with gradient `grad` (p = learning_rate_power, -0.5 by
    default, when n**-p = sqrt(n) as in the paper; lr = learning_rate, the paper's alpha):

        n_new   = n + grad**2                                          # accumulator slot
        sigma   = (n_new**-p - n**-p) / lr
        z       = z + grad + 2 * l2_shrinkage * var - sigma * var       # linear slot
        var     = (sign(z) * l1 - z) / ((beta + n_new**-p) / lr + 2 * l2)   if |z| > l1
                  0                                                          otherwise
        n       = n_new

    The paper's lambda_2 is TensorFlow's 2 * l2_regularization_strength; `beta` enters as in
    the paper's per-coordinate rate alpha / (beta + sqrt(n)) (Keras passes the kernel
    l2 + beta / (2 lr)). `l2_shrinkage_regularization_strength` adds 2 * l2_shrinkage * var to
    the gradient in z only, not in n (tf.raw_ops.ApplyFtrlV2). The weight is the closed-form
    minimiser of the regularised linearised loss, not var minus a step: a coordinate whose
    |z| <= l1 is exactly 0, so weights whose gradient is always 0 become 0 at the first step
    (Keras does the same).

    Matches `tf_keras.optimizers.legacy.Ftrl`: the fused dense path runs
    `ResourceApplyFtrlV2` (Keras runs it with l2_shrinkage > 0 and `ResourceApplyFtrl`,
    the same update with l2_shrinkage = 0, otherwise); sparse gradients update only their rows,
    slots included, as Keras's `ResourceSparseApplyFtrl` kernels. Unlike Keras,
    `l2_shrinkage_regularization_strength` is a `_set_hyper` hyperparameter (live and
    differentiable), so the V2 kernel always runs. `learning_rate_power` and
    `initial_accumulator_value` are options (plain attributes): the power picks the form of the
    root when tracing (a square root with a finite derivative at 0 for -0.5), and the initial
    value only initialises the `accumulator` slot in `_create_slots`. Keras's Ftrl ignores
    the base class's `lr` alias (it reads `learning_rate` only); the lab honours it, as for
    every optimizer. Keras compares `l1`/`l2`/`l2_shrinkage` with 0 in its constructor, so it
    refuses callables there; the lab takes them (and tensors) as for any hyperparameter.

    Slots: `FtrlSlots` (`accumulator` from `initial_accumulator_value`, `linear` from 0).

    Dtypes: float16, bfloat16, float32, float64 (as Keras; no complex: Keras has no kernel).

    Allowed values: the library (this class, `_set_hyper`) follows Keras's rules
    (`HyperSpec.library_check`: the three strengths >= 0); the lab's UI, CLI, URL and config
    import offer the narrower UI range (`HyperSpec.validate`, via `registry.validate_hypers`),
    floats only. Keyword arguments of the base class: `lr` (alias of learning_rate), `decay`
    (float >= 0: learning_rate / (1 + decay * iterations), via `_decayed_lr`), `clipnorm`,
    `clipvalue`, `global_clipnorm`.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        learning_rate_power: float <= 0 (option). Default -0.5.
        initial_accumulator_value: float >= 0 (option). Default 0.1.
        l1_regularization_strength, l2_regularization_strength,
        l2_shrinkage_regularization_strength: library: float >= 0, callable or scalar tensor;
            UI: [0, 10]. Default 0.0.
        beta: library: finite float, callable or scalar tensor; UI: [0, 10]. Default 0.0.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses, or a negative `decay`.
        ValueError: `learning_rate_power` > 0 or `initial_accumulator_value` < 0 (or either
            NaN, infinite or not a number).
    """

    HYPERPARAMETERS = catalog.own_specs("ftrl")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("ftrl")
    SLOTS = FtrlSlots

    def __init__(
        self,
        learning_rate=1e-3,
        learning_rate_power=-0.5,
        initial_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        name="Ftrl",
        l2_shrinkage_regularization_strength=0.0,
        beta=0.0,
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self.learning_rate_power = _check_float(
            "learning_rate_power", learning_rate_power, -math.inf, 0.0, "a finite float <= 0")
        self.initial_accumulator_value = _check_float(
            "initial_accumulator_value", initial_accumulator_value, 0.0, math.inf,
            "a finite float >= 0")
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("l1_regularization_strength", l1_regularization_strength)
        self._set_hyper("l2_regularization_strength", l2_regularization_strength)
        self._set_hyper("l2_shrinkage_regularization_strength",
                        l2_shrinkage_regularization_strength)
        self._set_hyper("beta", beta)

    def slot_initializer(self, name: str, var: tf.Variable) -> Any:
        """`accumulator` starts at `initial_accumulator_value`, `linear` at 0."""
        if name == "accumulator":
            return tf.constant_initializer(self.initial_accumulator_value)
        return super().slot_initializer(name, var)

    def coefficients(self, hypers, step):
        return ftrl_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return ftrl_update(grad, var, slots, coeffs, self.learning_rate_power)

    # The fused path: the kernel Keras runs with l2 shrinkage (the same update without it).
    def fused_kernel(self, var):
        del var
        return "ResourceApplyFtrlV2"

    def fused_coefficients(self, hypers, step):
        """The kernel's `l2` (Keras's l2 + beta / (2 lr), which folds beta into it),
        `l2_shrinkage` and `lr_power`, scalars of the variable's dtype."""
        del step
        lr = hypers["learning_rate"]
        return {"kernel_l2": hypers["l2_regularization_strength"] + hypers["beta"] / (2 * lr),
                "l2_shrinkage": hypers["l2_shrinkage_regularization_strength"],
                "lr_power": tf.constant(self.learning_rate_power, lr.dtype)}

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        del kernel
        return tf.raw_ops.ResourceApplyFtrlV2(
            var=var.handle, accum=slots["accumulator"].handle, linear=slots["linear"].handle,
            grad=grad, lr=coeffs["lr_t"], l1=coeffs["l1"], l2=coeffs["kernel_l2"],
            l2_shrinkage=coeffs["l2_shrinkage"], lr_power=coeffs["lr_power"],
            use_locking=self._use_locking)
