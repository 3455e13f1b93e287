"""RMSprop (plain, centered, with momentum) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.momentum_regime import MomentumRegime
from optimizers.hyperparams import EPSILON, LEARNING_RATE, MOMENTUM  # noqa: F401
from optimizers.rules import keras_epsilon, safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.catalog import RHO  # noqa: F401  (public names kept)


class RMSpropSlots(NamedTuple):
    """RMSprop's slots for one variable (the `add_slot` names, in creation order)."""

    rms: tf.Tensor       # [*var.shape], var.dtype: running mean of grad**2
    mg: tf.Tensor        # [*var.shape], var.dtype: running mean of grad (only when centered)
    momentum: tf.Tensor  # [*var.shape], var.dtype: the last update (with momentum: its buffer)


def rmsprop_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Scalar coefficients of RMSprop (independent of the step).

    `eps_inside` / `eps_outside` place epsilon inside the square root when momentum > 0 and
    outside when momentum == 0 (Keras' two regimes): a scalar `tf.where` on momentum's value,
    computed once per step rather than per element.
    """
    del step
    momentum, epsilon = hypers["momentum"], hypers["epsilon"]
    positive = (tf.math.real(momentum) if momentum.dtype.is_complex else momentum) > 0
    eps_inside = tf.where(positive, epsilon, tf.zeros_like(epsilon))
    return {
        "lr_t": hypers["learning_rate"],
        "rho": hypers["rho"],
        "momentum": momentum,
        "epsilon": epsilon,
        "eps_inside": eps_inside,
        "eps_outside": epsilon - eps_inside,
        "one_minus_rho": 1 - hypers["rho"],  # once per step, not per variable
    }


def rmsprop_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    centered: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One RMSprop step on one variable; pure and differentiable.

        rms   <- rho * rms + (1 - rho) * grad**2
        mg    <- rho * mg + (1 - rho) * grad                   (centered only)
        denom  = rms - mg**2 if centered else rms
        denominator = sqrt(denom + epsilon)   if momentum > 0  (Keras' fused kernel)
                      sqrt(denom) + epsilon   if momentum == 0 (Keras' Python branch)
        mom   <- momentum * mom + lr_t * grad / denominator
        var   <- var - mom

    The regime is picked by a `tf.where` on the *value* of `momentum` (in the coefficients:
    `denominator = safe_sqrt(denom + eps_inside) + eps_outside`, one of the two being 0), so
    momentum stays a live, differentiable hyperparameter; with momentum = 0, `mom` is just this
    step's update.

    Args:
        grad, var: tensors of one shape and float dtype.
        slots: `rms`, `momentum` (and `mg` when `centered`), shaped like `var`.
        coeffs: from `rmsprop_coefficients`.
        centered: normalise by the estimated variance rms - mg**2 instead of rms.

    Returns:
        (new_var, {"rms"[, "mg"], "momentum"}), same shapes and dtype as `var`.
    """
    mom, new_slots = rmsprop_decrement(grad, slots, coeffs, centered)
    return var - mom, new_slots


def rmsprop_decrement(
    grad: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    centered: bool = False,
    regime: bool | None = None,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`rmsprop_update` without the variable: (mom, new_slots), new_var = var - mom.

    `mom` (shaped like `grad`) is also the new `momentum` slot; the variable is not needed to
    compute it, which lets the OptimizerV2 adapter subtract it in place.

    `regime` None picks the regime by momentum's value (the differentiable rule); True / False
    fixes it at trace time (`optimizers.momentum_regime`, the fused apply path): False drops
    the momentum term (`mom = lr_t * grad / (sqrt(denom) + epsilon)`, no read or write of the
    momentum slot), True puts epsilon inside the square root.
    """
    rho, momentum = coeffs["rho"], coeffs["momentum"]
    rms = rho * slots["rms"] + coeffs["one_minus_rho"] * tf.square(grad)
    new_slots = {"rms": rms}
    denom = rms
    if centered:
        mg = rho * slots["mg"] + coeffs["one_minus_rho"] * grad
        new_slots["mg"] = mg
        denom = rms - tf.square(mg)
    # rounding can push rms - mg**2 just below 0: keep the root at 0 there (not NaN)
    if regime is None:
        denominator = (safe_sqrt(denom + coeffs["eps_inside"], clamp_negative=centered)
                       + coeffs["eps_outside"])
    elif regime:
        denominator = safe_sqrt(denom + coeffs["epsilon"], clamp_negative=centered)
    else:
        denominator = safe_sqrt(denom, clamp_negative=centered) + coeffs["epsilon"]
    mom = coeffs["lr_t"] * grad / denominator
    if regime is False:  # Keras's plain path: no momentum buffer is read or written
        return mom, new_slots
    mom = momentum * slots["momentum"] + mom
    new_slots["momentum"] = mom
    return mom, new_slots


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class RMSprop(MomentumRegime, RuleOptimizer):
    """RMSprop (Tieleman & Hinton 2012), optionally centered (Graves 2013) and with momentum.

    Update for each variable `var` with gradient `grad`:

        rms = rho * rms + (1 - rho) * grad**2
        mg  = rho * mg + (1 - rho) * grad                    # centered=True only
        denom = rms - mg**2 if centered else rms
        if momentum > 0:  mom = momentum * mom + learning_rate * grad / sqrt(denom + epsilon)
        else:             mom = learning_rate * grad / (sqrt(denom) + epsilon)
        var = var - mom

    Both regimes match `tf_keras.optimizers.legacy.RMSprop`, whose momentum > 0 path (the fused
    `ResourceApplyRMSProp` kernel) puts epsilon *inside* the square root and whose momentum == 0
    path puts it outside. The `momentum` slot always exists (Keras only creates it when
    momentum > 0), so momentum can be changed live in both directions. Unlike Keras, `epsilon`
    is a `_set_hyper` hyperparameter.

    Which regime runs: the pure rule (`update`, what the hyper-gradient engine differentiates,
    and the apply path with `fused=False`) picks it by momentum's current VALUE (a `tf.where`),
    so it follows every live change. The fused path (`fused=True`, the default) picks it in
    Python, as Keras does, from the last value given to `_set_hyper("momentum", ...)`
    (`optimizers.momentum_regime`): the momentum kernel (`ResourceApplyRMSProp` /
    `ResourceApplyCenteredRMSProp`) or plain ops without the momentum term, which neither read
    nor write the momentum slot (Keras has none then). A traced step keeps the regime it was
    traced with (a Python value baked into the trace, like `self.t_cur = 5`): when a live
    change crosses 0, `trace_signature()` changes and the lab's run loop retraces its step
    (counted as a retrace); eager calls follow at once.

    `centered` is a plain attribute (listed in OPTIONS): it decides whether the `mg` slot
    exists, which cannot change after `_create_slots` ran.

    Slots: `RMSpropSlots` (`rms`, `mg` when centered, `momentum`).

    Dtypes: float16, bfloat16, float32, float64, complex64, complex128 (as Keras). With a
    complex dtype the momentum regime is chosen on the real part of `momentum`. With a callable
    or tensor `momentum` whose value is 0, Keras takes the fused (epsilon inside) path; the lab
    picks by value (epsilon outside): they differ only in that case.

    `epsilon` 0 or None means 1e-7, as Keras (`epsilon or backend.epsilon()`); a live
    `_set_hyper("epsilon", 0.0)` sets a true 0.

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}
        centered: bool, default False.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses (e.g. momentum outside [0, 1],
            NaN/inf, bool, string), or a negative `decay`.
    """

    HYPERPARAMETERS = catalog.own_specs("rmsprop")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("rmsprop")
    SLOTS = RMSpropSlots
    OPTIONAL_SLOTS = {"mg": "centered"}

    def __init__(
        self,
        learning_rate=1e-3,
        rho=0.9,
        momentum=0.0,
        epsilon=1e-7,
        centered=False,
        name="RMSprop",
        **kwargs,
    ):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("rho", rho)
        self._set_hyper("momentum", momentum)
        self._set_hyper("epsilon", keras_epsilon(epsilon))
        self.centered = bool(centered)

    def coefficients(self, hypers, step):
        return rmsprop_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return rmsprop_update(grad, var, slots, coeffs, centered=self.centered)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path;
        with `fused`, in the regime `_set_hyper` chose: see the class docstring)."""
        return rmsprop_decrement(grad, slots, coeffs, centered=self.centered,
                                 regime=self.fused_regime())

    # The fused path, momentum regime: the kernels Keras runs when momentum > 0. Without
    # momentum Keras runs plain ops, and so does the lab (`update_decrement`, regime False).
    def fused_kernel(self, var):
        del var
        if not self.momentum_on:
            return None
        return "ResourceApplyCenteredRMSProp" if self.centered else "ResourceApplyRMSProp"

    def fused_apply(self, kernel, grad, var, slots, coeffs):
        args = dict(var=var.handle, ms=slots["rms"].handle, mom=slots["momentum"].handle,
                    lr=coeffs["lr_t"], rho=coeffs["rho"], momentum=coeffs["momentum"],
                    epsilon=coeffs["epsilon"], grad=grad, use_locking=self._use_locking)
        if kernel == "ResourceApplyCenteredRMSProp":
            return tf.raw_ops.ResourceApplyCenteredRMSProp(mg=slots["mg"].handle, **args)
        return tf.raw_ops.ResourceApplyRMSProp(**args)
