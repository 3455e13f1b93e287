"""Adam and AMSGrad as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.rules import keras_epsilon, safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free



class AdamSlots(NamedTuple):
    """Adam's slots for one variable (the `add_slot` names, in creation order)."""

    m: tf.Tensor     # [*var.shape], var.dtype: first-moment estimate (running mean of grad)
    v: tf.Tensor     # [*var.shape], var.dtype: second-moment estimate (running mean of grad**2)
    vhat: tf.Tensor  # [*var.shape], var.dtype: running max of v (AMSGrad; only when amsgrad)


def adam_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of Adam at 1-based step `step` (Kingma & Ba 2015, sec. 2).

    `lr_t = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)` folds both bias corrections
    into the step size, as TensorFlow/Keras do ("epsilon-hat" form, end of sec. 2 of the paper).

    Args:
        hypers: `learning_rate`, `beta_1`, `beta_2`, `epsilon` as scalar float tensors.
        step: scalar float tensor t >= 1 (same dtype).

    Returns:
        dict with `lr_t`, `beta_1`, `beta_2`, `epsilon`, and `one_minus_beta_1`,
        `one_minus_beta_2` (1 - beta, computed here once per step rather than per variable by
        `adam_moments`), all scalars of the same dtype.
    """
    beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
    lr_t = hypers["learning_rate"] * safe_sqrt(1 - beta_2**step) / (1 - beta_1**step)
    return {"lr_t": lr_t, "beta_1": beta_1, "beta_2": beta_2, "epsilon": hypers["epsilon"],
            "one_minus_beta_1": 1 - beta_1, "one_minus_beta_2": 1 - beta_2}


def adam_moments(
    grad: tf.Tensor, m: tf.Tensor, v: tf.Tensor, coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, tf.Tensor]:
    """The moment estimates `m_t = b1 m + (1 - b1) g`, `v_t = b2 v + (1 - b2) g**2`.

    `coeffs` from `adam_coefficients` (it holds `one_minus_beta_1/2`, so the per-variable work
    is element-wise only).
    """
    beta_1, beta_2 = coeffs["beta_1"], coeffs["beta_2"]
    return (beta_1 * m + coeffs["one_minus_beta_1"] * grad,
            beta_2 * v + coeffs["one_minus_beta_2"] * tf.square(grad))


def adam_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    amsgrad: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Adam (or AMSGrad) step on one variable; pure and differentiable.

        m    <- beta_1 * m + (1 - beta_1) * grad
        v    <- beta_2 * v + (1 - beta_2) * grad**2
        vhat <- max(vhat, v)                                   (AMSGrad only)
        var  <- var - lr_t * m / (sqrt(v or vhat) + epsilon)

    Args:
        grad, var: tensors of one shape and float dtype.
        slots: `m`, `v` (and `vhat` when `amsgrad`), shaped like `var`.
        coeffs: from `adam_coefficients`.
        amsgrad: use the running maximum `vhat` in the denominator (Reddi et al. 2018).

    Returns:
        (new_var, {"m", "v"[, "vhat"]}), same shapes and dtype as `var`.
    """
    step, new_slots = adam_decrement(grad, slots, coeffs, amsgrad)
    return var - step, new_slots


def adam_decrement(
    grad: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    amsgrad: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`adam_update` without the variable: (step, new_slots), new_var = var - step.

    `step = lr_t * m / (sqrt(v or vhat) + epsilon)`, shaped like `grad`; the variable is not
    needed to compute it, which lets the OptimizerV2 adapter subtract it in place.
    """
    m, v = adam_moments(grad, slots["m"], slots["v"], coeffs)
    new_slots = {"m": m, "v": v}
    denominator_source = v
    if amsgrad:
        new_slots["vhat"] = denominator_source = tf.maximum(slots["vhat"], v)
    step = coeffs["lr_t"] * m / (safe_sqrt(denominator_source) + coeffs["epsilon"])
    return step, new_slots


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Adam(RuleOptimizer):
    """Adam (Kingma & Ba 2015, arXiv:1412.6980) with the AMSGrad option (Reddi et al. 2018).

    Update for each variable `var` with gradient `grad` at step t = iterations + 1:

        lr_t = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m    = beta_1 * m + (1 - beta_1) * grad
        v    = beta_2 * v + (1 - beta_2) * grad**2
        vhat = max(vhat, v)                                  # amsgrad=True only
        var  = var - lr_t * m / (sqrt(v or vhat) + epsilon)

    This is TensorFlow's "epsilon-hat" form (epsilon added after the bias correction is folded
    into `lr_t`), so it matches `tf_keras.optimizers.legacy.Adam`; the paper's Algorithm 1 adds
    epsilon to sqrt(v_hat) instead, which differs when sqrt(v) is comparable to epsilon.

    Unlike the Keras class, `epsilon` is registered with `_set_hyper` (it is a differentiable
    hyperparameter and can be changed live). `amsgrad` stays a plain attribute: it decides
    whether the `vhat` slot exists, which cannot change after `_create_slots` ran.

    Slots: `AdamSlots` (`m`, `v`, and `vhat` when `amsgrad`).

    Dtypes: float16, bfloat16, float32, float64 (as `tf_keras.optimizers.legacy.Adam`, whose
    fused kernel has no complex version).

    `epsilon` 0 or None means 1e-7, as Keras (`epsilon or backend.epsilon()`); a live
    `_set_hyper("epsilon", 0.0)` sets a true 0.

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}
        amsgrad: bool, default False.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses (NaN/inf, bool, string, negative
            learning_rate or epsilon, non-scalar tensor), or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("adam")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adam")
    SLOTS = AdamSlots
    OPTIONAL_SLOTS = {"vhat": "amsgrad"}

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-7,
        amsgrad=False,
        name="Adam",
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", keras_epsilon(epsilon))
        self.amsgrad = bool(amsgrad)

    def coefficients(self, hypers, step):
        return adam_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adam_update(grad, var, slots, coeffs, amsgrad=self.amsgrad)


    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return adam_decrement(grad, slots, coeffs, amsgrad=self.amsgrad)

    # The fused path: the kernels `tf_keras.optimizers.legacy.Adam` runs. They fold the bias
    # corrections themselves (lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)) from the powers.
    def fused_kernel(self, var):
        del var
        return "ResourceApplyAdamWithAmsgrad" if self.amsgrad else "ResourceApplyAdam"

    def fused_coefficients(self, hypers, step):
        return adam_kernel_coefficients(hypers, step)

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        return apply_adam_kernel(kernel, grad, var, slots, coeffs, self._use_locking)


def adam_kernel_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor
                             ) -> dict[str, tf.Tensor]:
    """What Adam's kernels take beyond `adam_coefficients`: the (decayed) learning rate `lr`
    and `beta_1_power = beta_1**t`, `beta_2_power = beta_2**t` at 1-based step `t` (scalars)."""
    return {"lr": hypers["learning_rate"], "beta_1_power": hypers["beta_1"] ** step,
            "beta_2_power": hypers["beta_2"] ** step}


def apply_adam_kernel(kernel: str, grad: tf.Tensor, var: tf.Variable,
                      slots: Mapping[str, tf.Variable], coeffs: Mapping[str, tf.Tensor],
                      use_locking: bool):
    """`tf.raw_ops.ResourceApplyAdam` (or `...WithAmsgrad` with a `vhat` slot) on `var`'s
    handle and its slots' handles, in place (the update of `adam_update`, kernel rounding)."""
    args = dict(var=var.handle, m=slots["m"].handle, v=slots["v"].handle,
                beta1_power=coeffs["beta_1_power"], beta2_power=coeffs["beta_2_power"],
                lr=coeffs["lr"], beta1=coeffs["beta_1"], beta2=coeffs["beta_2"],
                epsilon=coeffs["epsilon"], grad=grad, use_locking=use_locking)
    if kernel == "ResourceApplyAdamWithAmsgrad":
        return tf.raw_ops.ResourceApplyAdamWithAmsgrad(vhat=slots["vhat"].handle, **args)
    return tf.raw_ops.ResourceApplyAdam(**args)
