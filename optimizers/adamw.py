"""AdamW (decoupled weight decay) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.adam import Adam, adam_coefficients, adam_update
from optimizers.hyperparams import BETA_1, BETA_2, EPSILON, LEARNING_RATE  # noqa: F401
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.catalog import ADAMW_REFERENCE, WEIGHT_DECAY  # noqa: F401  (public names kept)


def adamw_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Adam's coefficients plus `decay = learning_rate * weight_decay` (Keras 3 convention) and
    `retain = 1 - decay`, the factor that scales `var` (one product per element)."""
    coeffs = adam_coefficients(hypers, step)
    coeffs["decay"] = hypers["learning_rate"] * hypers["weight_decay"]
    coeffs["retain"] = 1 - coeffs["decay"]
    return coeffs


def adamw_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    amsgrad: bool = False,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One AdamW step: shrink `var` by `decay * var`, then take the Adam step from there.

        var <- var - decay * var          (decay = learning_rate * weight_decay)
        var, slots <- adam_update(grad, var, slots)

    The gradient (hence m and v) never sees the decay: that is what "decoupled" means.
    """
    # var * (1 - decay), not var - decay * var: one full-tensor product instead of two
    # operations (under XLA the two-operation form cost 3-5% of a step of this MLP, measured
    # with bench/bench_optimizers.py)
    decayed = var * coeffs["retain"]
    return adam_update(grad, decayed, slots, coeffs, amsgrad=amsgrad)


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, arXiv:1711.05101).

    Update for each variable `var` with gradient `grad` at step t = iterations + 1:

        var  = var - learning_rate * weight_decay * var      # decoupled decay, first
        lr_t = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m    = beta_1 * m + (1 - beta_1) * grad
        v    = beta_2 * v + (1 - beta_2) * grad**2
        vhat = max(vhat, v)                                  # amsgrad=True only
        var  = var - lr_t * m / (sqrt(v or vhat) + epsilon)

    Convention: the decay is multiplied by the learning rate, as Keras 3 `keras.optimizers.AdamW`
    does (`variable -= variable * weight_decay * learning_rate` before the step), which is the
    paper's `eta_t * lambda * theta` with the schedule multiplier folded into `learning_rate`.
    TensorFlow Addons' `tfa.optimizers.AdamW` instead applies the *unscaled* decay
    `var -= weight_decay * var`, so its `weight_decay` is typically ~`learning_rate` times smaller
    and must be scheduled alongside the learning rate by hand. The same number therefore means
    very different regularisation in the two libraries.

    `amsgrad` is a plain attribute (listed in OPTIONS): it decides whether the `vhat` slot
    exists, which cannot change after `_create_slots` ran.

    Slots: Adam's `AdamSlots` (`m`, `v`, and `vhat` when `amsgrad`), inherited.

    {{allowed_values}}

    Args:
        {{hyperparameter_args}}
        amsgrad: bool, default False.

    Raises:
        InvalidHyperparameter: a hyperparameter outside its range, NaN/inf or not a number.
    """

    HYPERPARAMETERS = catalog.own_specs("adamw")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("adamw")

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-7,
        weight_decay=0.004,
        amsgrad=False,
        name="AdamW",
        **kwargs,
    ):
        # Adam's four `_set_hyper` calls, its `amsgrad` attribute and its slot record
        # (`AdamSlots`: m, v[, vhat]) are inherited; AdamW only adds one hyperparameter and the decay.
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, **kwargs)
        self._set_hyper("weight_decay", weight_decay)

    def coefficients(self, hypers, step):
        return adamw_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return adamw_update(grad, var, slots, coeffs, amsgrad=self.amsgrad)

    def update_decrement(self, grad, slots, coeffs):
        """None: the decay needs the variable, so the apply path uses `update` (not Adam's)."""
        return None

    def fused_kernel(self, var):
        """None: no Keras kernel does AdamW, and an in-place decay followed by Adam's kernel
        measured 1.12-1.15x `tf_keras.optimizers.AdamW` per step against 1.02x for the rule
        (bench/bench_optimizers.py), so the rule runs."""
        del var
        return None
