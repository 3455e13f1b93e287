"""SGD with (Nesterov) momentum as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.momentum_regime import MomentumRegime
from optimizers.hyperparams import LEARNING_RATE
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free

SGD_LEARNING_RATE = dataclasses.replace(LEARNING_RATE, default=0.01)


class SGDSlots(NamedTuple):
    """SGD's slot for one variable (the `add_slot` name)."""

    momentum: tf.Tensor  # [*var.shape], var.dtype: velocity buffer, momentum * m - lr * grad


def sgd_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of SGD (independent of the step `step`).

    Returns:
        dict with `lr_t` (the learning rate) and `momentum`.
    """
    del step  # plain SGD has no step-dependent correction
    return {"lr_t": hypers["learning_rate"], "momentum": hypers["momentum"]}


def sgd_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    nesterov: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One SGD step on one variable; pure and differentiable.

        momentum_buf <- momentum * momentum_buf - lr_t * grad
        var          <- var + momentum_buf                              (nesterov=False)
        var          <- var + momentum * momentum_buf - lr_t * grad     (nesterov=True)

    With momentum = 0 both reduce to `var - lr_t * grad`.

    Args:
        grad, var: tensors of one shape and float dtype.
        slots: `momentum` (the velocity buffer), shaped like `var`.
        coeffs: from `sgd_coefficients`.
        nesterov: apply the Nesterov look-ahead form.

    Returns:
        (new_var, {"momentum"}), same shapes and dtype as `var`.
    """
    lr_t, momentum = coeffs["lr_t"], coeffs["momentum"]
    velocity = momentum * slots["momentum"] - lr_t * grad
    if nesterov:
        new_var = var + momentum * velocity - lr_t * grad
    else:
        new_var = var + velocity
    return new_var, {"momentum": velocity}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class SGD(MomentumRegime, RuleOptimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, Keras semantics.

    Update for each variable `var` with gradient `grad`:

        m   = momentum * m - learning_rate * grad
        var = var + m                                         # nesterov=False
        var = var + momentum * m - learning_rate * grad       # nesterov=True

    This matches `tf_keras.optimizers.legacy.SGD` (Polyak 1964 heavy ball; the Nesterov form
    of Sutskever et al. 2013, as rewritten by Bengio et al. 2013, arXiv:1212.0901, eq. 7).

    Difference with Keras: the `momentum` slot is *always* created, even when momentum = 0
    (Keras only creates it when momentum > 0). `momentum` is a `_set_hyper` hyperparameter
    here, so it can be raised live from 0 without a new slot. With momentum = 0 the pure rule
    (`update`, by value) writes `-learning_rate * grad` into the slot; the fused path (the
    default) runs Keras's plain `ResourceApplyGradientDescent` and leaves the slot as it was,
    and with momentum on, `ResourceApplyKerasMomentum` (see `optimizers.momentum_regime` for
    when the regime changes and why a traced step needs a retrace then).

    `nesterov` is a plain attribute (listed in OPTIONS): it selects which formula is traced,
    so it cannot be a tensor and is fixed for the optimizer's life.

    Slots: `SGDSlots` (`momentum`).

    Dtypes: float16, bfloat16, float32, float64, complex64, complex128 (as Keras).

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}
        nesterov: bool, default False.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses (e.g. momentum outside [0, 1],
            NaN/inf, bool, string), or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("sgd")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("sgd")
    SLOTS = SGDSlots

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("momentum", momentum)
        self.nesterov = bool(nesterov)

    def coefficients(self, hypers, step):
        return sgd_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return sgd_update(grad, var, slots, coeffs, nesterov=self.nesterov)

    def update_decrement(self, grad, slots, coeffs):
        """The plain regime of the fused path only (`lr_t * grad`, no slot read or written):
        subtracted in place, as Keras's `ResourceApplyGradientDescent`; None otherwise (the
        apply path then assigns `update`'s result)."""
        if self.fused_regime() is False:
            del slots
            return coeffs["lr_t"] * grad, {}
        return None

    # The fused path: the kernels `tf_keras.optimizers.legacy.SGD` runs in each regime.
    def fused_kernel(self, var):
        del var
        return "ResourceApplyKerasMomentum" if self.momentum_on else "ResourceApplyGradientDescent"

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        if kernel == "ResourceApplyGradientDescent":
            return tf.raw_ops.ResourceApplyGradientDescent(
                var=var.handle, alpha=coeffs["lr_t"], delta=grad, use_locking=self._use_locking)
        return tf.raw_ops.ResourceApplyKerasMomentum(
            var=var.handle, accum=slots["momentum"].handle, lr=coeffs["lr_t"], grad=grad,
            momentum=coeffs["momentum"], use_locking=self._use_locking,
            use_nesterov=self.nesterov)
