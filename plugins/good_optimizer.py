"""Example plugin (correct): AdaBelief, written as a `RuleOptimizer` (pure rule + adapter).

Drop a file like this in the plugins folder (`./plugins`, `$OPTIMIZER_LAB_PLUGINS`, or
`streamlit run app.py -- --plugins DIR`); the app imports it at start, runs the contract check
and, when every item passes, adds it to every page's optimizer list under `REGISTRY_NAME`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.hyperparams import BETA_1, BETA_2, HyperSpec, LEARNING_RATE
from optimizers.rules import safe_sqrt

ADABELIEF_REFERENCE = ("Zhuang, Tang, Ding, Tatikonda, Dvornek, Papademetris & Duncan 2020, "
                       "'AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed "
                       "Gradients', arXiv:2010.07468, Algorithm 2")


class AdaBeliefSlots(NamedTuple):
    """AdaBelief's slots for one variable: the field names are the `add_slot` names."""

    m: tf.Tensor  # [*var.shape], var.dtype: first moment, beta_1 * m + (1 - beta_1) * grad
    s: tf.Tensor  # [*var.shape], var.dtype: "belief", running mean of (grad - m)**2 + epsilon


@tf_keras.saving.register_keras_serializable(package="OptimizerLabPlugins")
class AdaBelief(RuleOptimizer):
    """AdaBelief (Zhuang et al. 2020, arXiv:2010.07468, Algorithm 2): Adam whose denominator is
    the spread of the gradient around its running mean instead of its running square.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1:

        m     = beta_1 * m + (1 - beta_1) * grad
        s     = beta_2 * s + (1 - beta_2) * (grad - m)**2 + epsilon
        m_hat = m / (1 - beta_1**t)
        s_hat = s / (1 - beta_2**t)
        var   = var - learning_rate * m_hat / (sqrt(s_hat) + epsilon)

    `s` uses the new `m` (Algorithm 2), and `epsilon` enters twice: inside `s` and beside the
    root. On the first step m_hat = grad and s_hat = beta_1**2 grad**2 + epsilon / (1 - beta_2),
    so a coordinate with |grad| >> sqrt(epsilon / (1 - beta_2)) moves by learning_rate / beta_1,
    whatever the gradient's scale. When the gradient is steady (grad close to m) the step grows
    beyond Adam's; when it is noisy, it shrinks.

    The root is `optimizers.rules.safe_sqrt` (derivative 0 instead of infinite at 0, same value),
    so hyper-gradients through the rule stay finite; with epsilon > 0 the radicand is positive
    anyway, but a live `epsilon` near 0 and a constant gradient can round it to 0.

    Slots: `AdaBeliefSlots` (`m`, `s`); `RuleOptimizer` creates them in `_create_slots` from
    that record.

    Args:
        learning_rate: float in (0, 10], default 1e-3.
        beta_1: float in [0, 1), default 0.9 (decay of the first moment m).
        beta_2: float in [0, 1), default 0.999 (decay of the belief s).
        epsilon: float in (0, 1], default 1e-8 (the paper's; added to s and to sqrt(s_hat)).

    Raises:
        InvalidHyperparameter: a value outside its range.
    """

    REGISTRY_NAME = "adabelief"
    SLOTS = AdaBeliefSlots
    HYPERPARAMETERS = (
        LEARNING_RATE,
        dataclasses.replace(BETA_1, reference=ADABELIEF_REFERENCE),
        dataclasses.replace(BETA_2, help="decay rate of the belief s, the running mean of "
                            "(grad - m)**2", reference=ADABELIEF_REFERENCE),
        HyperSpec("epsilon", 1e-8, 0.0, 1.0, "added to s and to sqrt(s_hat) so the step stays "
                  "finite", reference=ADABELIEF_REFERENCE, low_inclusive=False, log_scale=True,
                  library_low=0.0),
    )

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 name="AdaBelief", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", epsilon)

    def coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor
                     ) -> dict[str, tf.Tensor]:
        """Scalars of step t: the hyperparameters and both bias corrections 1 - beta**t."""
        beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
        return {"learning_rate": hypers["learning_rate"], "beta_1": beta_1, "beta_2": beta_2,
                "epsilon": hypers["epsilon"], "correction_1": 1 - beta_1**step,
                "correction_2": 1 - beta_2**step}

    def update(self, grad: tf.Tensor, var: tf.Tensor, slots: Mapping[str, tf.Tensor],
               coeffs: Mapping[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """One AdaBelief step on one variable (pure): (new_var, {"m", "s"}), shaped as `var`."""
        beta_1, beta_2, epsilon = coeffs["beta_1"], coeffs["beta_2"], coeffs["epsilon"]
        m = beta_1 * slots["m"] + (1 - beta_1) * grad
        s = beta_2 * slots["s"] + (1 - beta_2) * tf.square(grad - m) + epsilon
        m_hat = m / coeffs["correction_1"]
        s_hat = s / coeffs["correction_2"]
        new_var = var - coeffs["learning_rate"] * m_hat / (safe_sqrt(s_hat) + epsilon)
        return new_var, {"m": m, "s": s}
