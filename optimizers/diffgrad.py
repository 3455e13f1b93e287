"""diffGrad as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.adam import adam_coefficients, adam_moments
from optimizers.base import RuleOptimizer
from optimizers.rules import safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free



class DiffGradSlots(NamedTuple):
    """diffGrad's slots for one variable (the `add_slot` names, in creation order)."""

    m: tf.Tensor          # [*var.shape], var.dtype: first-moment estimate, as Adam's
    v: tf.Tensor          # [*var.shape], var.dtype: second-moment estimate, as Adam's
    prev_grad: tf.Tensor  # [*var.shape], var.dtype: the previous step's gradient (0 at start)


def diffgrad_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Adam's coefficients (`lr_t` with both bias corrections folded in), see `adam_coefficients`."""
    return adam_coefficients(hypers, step)


def diffgrad_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One diffGrad step on one variable; pure and differentiable.

        m         <- beta_1 * m + (1 - beta_1) * grad
        v         <- beta_2 * v + (1 - beta_2) * grad**2
        xi         = 1 / (1 + exp(-|prev_grad - grad|))          ("AbsSig" friction, in [0.5, 1))
        var       <- var - lr_t * xi * m / (sqrt(v) + epsilon)
        prev_grad <- grad

    Args:
        grad, var: tensors of one shape and float dtype.
        slots: `m`, `v`, `prev_grad`, shaped like `var`.
        coeffs: from `diffgrad_coefficients`.

    Returns:
        (new_var, {"m", "v", "prev_grad"}), same shapes and dtype as `var`.
    """
    step, new_slots = diffgrad_decrement(grad, slots, coeffs)
    return var - step, new_slots


def diffgrad_decrement(
    grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`diffgrad_update` without the variable: (step, new_slots), new_var = var - step.

    `step = lr_t * xi * m / (sqrt(v) + epsilon)`, shaped like `grad`; the variable is not
    needed to compute it, which lets the OptimizerV2 adapter subtract it in place.
    """
    m, v = adam_moments(grad, slots["m"], slots["v"], coeffs)
    xi = tf.sigmoid(tf.abs(slots["prev_grad"] - grad))
    step = coeffs["lr_t"] * xi * m / (safe_sqrt(v) + coeffs["epsilon"])
    return step, {"m": m, "v": v, "prev_grad": tf.identity(grad)}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class DiffGrad(RuleOptimizer):
    """diffGrad (Dubey et al. 2019, arXiv:1909.11015; IEEE TNNLS 2020): Adam with friction.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1:

        lr_t = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m    = beta_1 * m + (1 - beta_1) * grad
        v    = beta_2 * v + (1 - beta_2) * grad**2
        xi   = 1 / (1 + exp(-|prev_grad - grad|))
        var  = var - lr_t * xi * m / (sqrt(v) + epsilon)
        prev_grad = grad

    `xi` is the "AbsSig" diffGrad friction coefficient of sec. III: where the gradient barely
    changes between steps (flat region or near an optimum) xi -> 0.5 and the step is halved;
    where it changes fast xi -> 1 and the step is Adam's. Epsilon is added after the bias
    correction is folded into `lr_t` (TensorFlow's "epsilon-hat" form, as in `Adam`).

    Step-1 convention: `prev_grad` starts at 0, so the first step uses xi = sigmoid(|grad|),
    exactly as the authors' PyTorch code (`state['previous_grad'] = torch.zeros_like(p)`).

    Which reference: the authors' corrected `diffGrad_v2.py` (github.com/shivram1987/diffGrad,
    "Fixes a bug in original diffGrad code"; its README recommends it), which stores a *copy*,
    `state['previous_grad'] = grad.clone()`. The first release, `diffGrad.py`, stored
    `state['previous_grad'] = grad`, an alias of `p.grad.data`; its own comment says it is
    "used in paper but has the bug that previous grad is overwritten with grad and diff becomes
    always zero". When PyTorch reuses the gradient tensor in place between steps (`zero_grad`
    without `set_to_none`, the default before PyTorch 2.0) the first release therefore computes,
    from step 2 on:

        first release:  xi = sigmoid(0) = 0.5 always  ->  Adam with half the step size
        diffGrad_v2:    xi = sigmoid(|g_{t-1} - g_t|)  ->  what this class computes

    (With `set_to_none=True`, a new gradient tensor each step, the two agree.) Both compute
    epsilon outside the root after folding the bias corrections into the step size, as here;
    the authors' default epsilon is 1e-8, this class's 1e-7 (Keras's). Checked against the two
    files of that repository (the versions indexed by the lab's code search); not re-checked
    here against the equations of the paper (arXiv:1909.11015 / TNNLS).

    Slots: `DiffGradSlots` (`m`, `v`, `prev_grad`).

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}

    Raises:
        InvalidHyperparameter: a hyperparameter outside its range, NaN/inf or not a number.
    """

    HYPERPARAMETERS = catalog.own_specs("diffgrad")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("diffgrad")
    SLOTS = DiffGradSlots

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-7,
        name="DiffGrad",
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", epsilon)

    def coefficients(self, hypers, step):
        return diffgrad_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return diffgrad_update(grad, var, slots, coeffs)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return diffgrad_decrement(grad, slots, coeffs)
