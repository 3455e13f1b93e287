"""Nadam (Adam with Nesterov momentum) as a pure rule plus its OptimizerV2 adapter."""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.adam import adam_moments
from optimizers.base import RuleOptimizer
from optimizers.hyperparams import check_decay
from optimizers.rules import derivative_free, keras_epsilon, safe_sqrt
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free

SCHEDULE_DECAY = 0.004  # Dozat 2016's (and Keras 2's) decay of the momentum schedule
MOMENTUM_BASE = 0.96    # u_t = beta_1 (1 - 0.5 * MOMENTUM_BASE**(schedule_decay * t))


class NadamSlots(NamedTuple):
    """Nadam's slots for one variable (the `add_slot` names, in creation order)."""

    m: tf.Tensor        # [*var.shape], var.dtype: first-moment estimate (running mean of grad)
    v: tf.Tensor        # [*var.shape], var.dtype: second-moment estimate (mean of grad**2)
    m_cache: tf.Tensor  # [], var.dtype: u_1 * ... * u_t, the momentum cache (starts at 1)


def nadam_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor,
                       schedule_decay: float = SCHEDULE_DECAY) -> dict[str, tf.Tensor]:
    """Scalar coefficients of Nadam at 1-based step `step` (Dozat 2016, Algorithm 2).

    The momentum schedule of Keras 2 (from Dozat's code): u_t = beta_1 (1 - 0.5 *
    0.96**(schedule_decay * t)), evaluated at t and t + 1.

    Args:
        hypers: `learning_rate`, `beta_1`, `beta_2`, `epsilon` as scalar tensors.
        step: scalar tensor t >= 1 (same dtype).
        schedule_decay: float >= 0, the decay of the momentum schedule (an option).

    Returns:
        dict with `lr_t`, `beta_1`, `beta_2`, `one_minus_beta_1`, `one_minus_beta_2` (as
        `adam_moments` reads them), `epsilon`, `u_t`, `u_next` (u_{t+1}), `one_minus_u_t` and
        `v_correction` = 1 - beta_2**t, scalars of the hyperparameters' dtype.
    """
    beta_1, beta_2 = hypers["beta_1"], hypers["beta_2"]
    # 0.96 as Keras 2 has it: a float32 constant cast to the dtype (0.9599999785 in float64)
    base = tf.cast(tf.constant(MOMENTUM_BASE, tf.float32), beta_1.dtype)
    u_t = beta_1 * (1.0 - 0.5 * tf.pow(base, schedule_decay * step))
    u_next = beta_1 * (1.0 - 0.5 * tf.pow(base, schedule_decay * (step + 1)))
    return {"lr_t": hypers["learning_rate"], "beta_1": beta_1, "beta_2": beta_2,
            "one_minus_beta_1": 1 - beta_1, "one_minus_beta_2": 1 - beta_2,
            "epsilon": hypers["epsilon"], "u_t": u_t, "u_next": u_next,
            "one_minus_u_t": 1.0 - u_t, "v_correction": 1.0 - tf.pow(beta_2, step)}


def nadam_momentum_cache(m_cache: tf.Tensor, coeffs: Mapping[str, tf.Tensor]
                         ) -> tuple[tf.Tensor, tf.Tensor]:
    """(u_1 ... u_t, u_1 ... u_{t+1}) from the cache of the previous step, u_1 ... u_{t-1}."""
    cache = m_cache * coeffs["u_t"]
    return cache, cache * coeffs["u_next"]


def nadam_direction(grad: tf.Tensor, m: tf.Tensor, v: tf.Tensor, cache: tf.Tensor,
                    cache_next: tf.Tensor, coeffs: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """The step lr * m_bar / (sqrt(v / (1 - beta_2**t)) + epsilon), shaped like `grad`, from
    this step's moments `m`, `v` and momentum caches (`nadam_momentum_cache`)."""
    m_bar = (coeffs["one_minus_u_t"] * (grad / (1.0 - cache))
             + coeffs["u_next"] * (m / (1.0 - cache_next)))
    return coeffs["lr_t"] * m_bar / (safe_sqrt(v / coeffs["v_correction"]) + coeffs["epsilon"])


def nadam_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One Nadam step on one variable; pure and differentiable (see `Nadam`), the momentum
    cache included, so hyper-gradients flow through it (d m_cache / d beta_1 != 0).

    Args:
        grad, var: tensors of one shape and float or complex dtype.
        slots: `m`, `v` shaped like `var`; `m_cache` a scalar of var's dtype.
        coeffs: from `nadam_coefficients`.

    Returns:
        (new_var, {"m", "v", "m_cache"}), same shapes and dtype as the inputs.
    """
    step, new_slots = nadam_decrement(grad, slots, coeffs)
    return var - step, new_slots


def nadam_decrement(
    grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """`nadam_update` without the variable: (step, new_slots), new_var = var - step."""
    m, v = adam_moments(grad, slots["m"], slots["v"], coeffs)
    cache, cache_next = nadam_momentum_cache(slots["m_cache"], coeffs)
    step = nadam_direction(grad, m, v, cache, cache_next, coeffs)
    return step, {"m": m, "v": v, "m_cache": cache}


def _check_schedule_decay(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value >= 0):
        raise ValueError(f"schedule_decay={value!r} refused: must be a finite float >= 0")
    return float(value)


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Nadam(RuleOptimizer):
    """Nadam (Dozat 2016, "Incorporating Nesterov Momentum into Adam", ICLR workshop,
    Algorithm 2) with Keras 2's momentum schedule, as `tf_keras.optimizers.legacy.Nadam`.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1
    (sd = schedule_decay, 0.004):

        u_t       = beta_1 * (1 - 0.5 * 0.96**(sd * t))             # momentum schedule
        m_cache   = m_cache * u_t                                   # u_1 ... u_t
        m         = beta_1 * m + (1 - beta_1) * grad
        v         = beta_2 * v + (1 - beta_2) * grad**2
        m_bar     = (1 - u_t) * grad / (1 - m_cache)
                    + u_{t+1} * m / (1 - m_cache * u_{t+1})
        var       = var - learning_rate * m_bar / (sqrt(v / (1 - beta_2**t)) + epsilon)

    The momentum cache is state: Keras 2 keeps it in one non-slot weight (`momentum_cache`);
    here it is the slot `m_cache`, a scalar per variable (all equal), so the pure rule carries
    it like any slot and hyper-gradients with respect to beta_1 flow through the product
    u_1 ... u_t (a live change of beta_1 changes the later factors only, as in Keras).

    Sparse gradients (`IndexedSlices`) follow Keras 2: the moments `m`, `v` of EVERY row decay
    (beta_1 m, beta_2 v) and the batch's rows add their gradient terms; only the rows in the
    batch move. (The lab's other optimizers leave absent rows' slots alone; Keras's Nadam does
    not.) With every row in the batch this equals the dense update.

    Differences with Keras, all supersets: `epsilon` is a `_set_hyper` hyperparameter (live and
    differentiable); a `LearningRateSchedule` learning rate is accepted (Keras 2's Nadam
    refuses one), evaluated at `iterations`; `schedule_decay` is an option written in
    `get_config`. Keras takes `schedule_decay` (default 0.004) as its `decay`, writes it under
    `"decay"` in its config and discards a `decay` keyword, so its own `from_config` loses a
    non-default value; here `decay` without `schedule_decay` is read as the schedule decay,
    so a Keras config round-trips (a `decay` keyword given to Keras's constructor itself is
    ignored there). The learning rate is never divided by 1 + decay * iterations (as Keras).

    Slots: `NadamSlots` (`m`, `v` from 0; `m_cache`, shape [], from 1).

    Dtypes: float16, float32, float64, complex64, complex128 (Keras's Nadam is plain ops:
    complex squares and principal roots). bfloat16 gives NaN, as Keras's: the default
    beta_2 = 0.999 rounds to 1.0 there, so 1 - beta_2**t = 0.

    Allowed values: the library (this class, `_set_hyper`) follows Keras's rules
    (`HyperSpec.library_check`); the lab's UI, CLI, URL and config import offer the narrower
    UI range (`HyperSpec.validate`, via `registry.validate_hypers`), floats only. Keyword
    arguments of the base class: `lr` (alias of learning_rate), `clipnorm`, `clipvalue`,
    `global_clipnorm`; `decay` as said above.

    Args:
        learning_rate: library: float >= 0, `LearningRateSchedule`, zero-arg callable, scalar
            tensor or tf.Variable; UI: float in (0, 10]. Default 1e-3.
        beta_1: library: finite float, zero-arg callable or scalar tensor; UI: [0, 1). Default 0.9.
        beta_2: library: as beta_1; UI: [0, 1). Default 0.999.
        epsilon: library: float >= 0, callable or scalar tensor; 0 or None means 1e-7, as Keras.
            UI: (0, 1]. Default 1e-7.
        schedule_decay: float >= 0 (option), the momentum schedule's decay. Default 0.004.

    Raises:
        InvalidHyperparameter: a value `library_check` refuses, or a negative `decay`.
        ValueError: `schedule_decay` negative, NaN, infinite or not a number.
    """

    HYPERPARAMETERS = catalog.own_specs("nadam")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("nadam")
    SLOTS = NadamSlots

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 schedule_decay=SCHEDULE_DECAY, name="Nadam", **kwargs):
        self.schedule_decay = _check_schedule_decay(schedule_decay)
        if "decay" in kwargs:  # Keras's config key of the schedule decay
            decay = check_decay(kwargs.pop("decay"))
            if schedule_decay == SCHEDULE_DECAY:
                self.schedule_decay = decay
        super().__init__(name, **kwargs)  # no `decay`: the learning rate is not decayed
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self._set_hyper("epsilon", keras_epsilon(epsilon))

    def slot_shape(self, name, var):
        """`m_cache` is one scalar per variable (Keras 2's non-slot `momentum_cache`)."""
        return tf.TensorShape([]) if name == "m_cache" else var.shape

    def slot_initializer(self, name, var):
        """`m_cache` starts at 1 (an empty product); `m` and `v` at 0."""
        return "ones" if name == "m_cache" else super().slot_initializer(name, var)

    def coefficients(self, hypers, step):
        return nadam_coefficients(hypers, step, self.schedule_decay)

    def update(self, grad, var, slots, coeffs):
        return nadam_update(grad, var, slots, coeffs)

    def update_decrement(self, grad, slots, coeffs):
        """`update` as (delta, new_slots) with new_var = var - delta (the in-place apply path)."""
        return nadam_decrement(grad, slots, coeffs)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        """Keras 2's sparse Nadam: every row's `m`, `v` decay, the batch rows (`indices`,
        unique) add (1 - beta) * grad terms, and only those rows of `var` move; `m_cache`
        advances once. Shapes as `RuleOptimizer._resource_apply_sparse`."""
        coeffs = self._coefficients_for(var, apply_state)
        m, v, m_cache = (self.get_slot(var, n) for n in ("m", "v", "m_cache"))
        with derivative_free():
            cache, cache_next = nadam_momentum_cache(m_cache.value(), coeffs)
            m.assign(m.value() * coeffs["beta_1"], read_value=False)
            m.scatter_add(tf.IndexedSlices(grad * coeffs["one_minus_beta_1"], indices))
            v.assign(v.value() * coeffs["beta_2"], read_value=False)
            v.scatter_add(tf.IndexedSlices(tf.square(grad) * coeffs["one_minus_beta_2"], indices))
            step = nadam_direction(grad, tf.gather(m, indices), tf.gather(v, indices), cache,
                                   cache_next, coeffs)
        return tf.group(var.scatter_sub(tf.IndexedSlices(step, indices)),
                        m_cache.assign(cache, read_value=False))

    def get_config(self) -> dict[str, Any]:
        """The base config with `decay` = `schedule_decay`, as Keras 2 writes it."""
        config = super().get_config()
        config["decay"] = self.schedule_decay
        return config
