"""Gradient accumulation: any pure rule applied to the mean of k micro-batch gradients."""

from __future__ import annotations

from typing import Any, NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.adam import Adam
from optimizers.base import DensifiedSparse, RuleOptimizer
from optimizers.wrapping import Wrapper
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.catalog import MAX_ACCUMULATION_STEPS

# `get_config` keys of OptimizerV2 itself; every other key but the options is an inner hyperparameter.
_BASE_CONFIG_KEYS = ("name", "clipnorm", "clipvalue", "global_clipnorm", "decay")



class AccumulationSlots(NamedTuple):
    """The wrapper's own slot for one variable, after the inner rule's slots."""

    grad_accum: tf.Tensor  # [*var.shape], var.dtype: sum of this window's micro-batch gradients


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class GradientAccumulation(DensifiedSparse, Wrapper, RuleOptimizer):
    """Average the gradients of `accumulation_steps` micro-batches, then apply the inner rule.

    Update for each variable `var` with micro-batch gradient `grad` at micro step
    t = iterations + 1, with k = accumulation_steps:

        acc   = grad_accum + grad
        apply = (t mod k == 0)
        if apply:  var, inner_slots = inner.update(acc / k, var, inner_slots)   # at inner step t // k
                   grad_accum = 0
        else:      grad_accum = acc                                            # var, slots unchanged

    With a mean loss, k micro-batches of size B/k accumulated this way give exactly the update of
    one batch of size B. The branch is a `tf.where` on `apply`, so the rule stays pure and
    differentiable (the inner update is computed every micro step and discarded when not applied).

    `iterations` counts micro-batches (`apply_gradients` calls), not applied updates; the inner
    rule's step, used e.g. by Adam's bias correction, is `max(t // k, 1)`, so after j applied
    updates Adam sees t = j exactly as if it ran unwrapped with the big batch.

    Args:
        inner: the wrapped `RuleOptimizer` object (default `Adam()`); decides which slots exist.
            Its pure `coefficients` / `update` are called and its options (nesterov, amsgrad,
            centered, initial_accumulator_value) apply; its hyperparameters at construction
            (floats, callables, tensors, a learning-rate schedule; and its `decay`, counted in
            micro-batches here) become this optimizer's (registered here with `_set_hyper`, so they
            change live as usual; the inner object's own `_hyper` is not read afterwards).
        accumulation_steps: int k >= 1 (default 2); decides *when* the update happens, and
            changing it in the middle of a window would divide a partial sum by the wrong k and
            corrupt the average, so it is a plain option (OPTIONS), not a live hyperparameter.
        name, **kwargs: OptimizerV2's own (`clipnorm`, `clipvalue`, `global_clipnorm`).

    In the registry as "accumulation" with options `inner` (a registry name, default "adam")
    and `accumulation_steps`; `get_config` writes `inner` as that registry name and the inner
    hyperparameters flat, and `from_config` builds the inner rule from the class it is passed
    (`registry.from_config` resolves the name).

    Slots: the inner rule's slots (same names and initializers) then `AccumulationSlots`.

    Sparse gradients (`tf.IndexedSlices`, e.g. from an `Embedding`) are densified: the averaged
    gradient must reach every row touched in *any* micro-batch of the window, including rows
    absent from the micro-batch that happens to close it, so the lazy row-wise update of
    `RuleOptimizer` would miss them.

    Raises:
        TypeError: `inner` is a name or not an optimizer; an unknown keyword argument.
        ValueError: `inner` is not a plain `RuleOptimizer` (`wrapping.check_inner`), or
            `accumulation_steps` not an int in [1, MAX_ACCUMULATION_STEPS].
    """

    REGISTRY_NAME = "accumulation"
    PASSES_INNER_OPTIONS = True  # the registry accepts the inner rule's options beside ours
    INNER_BASE = RuleOptimizer
    DEFAULT_INNER = Adam
    OPTIONS = catalog.option_names("accumulation")
    SLOTS = AccumulationSlots
    _initial_decay: float  # the OptimizerV2's initial `decay`, set by its constructor

    def __init__(self, inner=None, accumulation_steps=2, name="GradientAccumulation", **kwargs):
        inner = self.checked_inner(inner)
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) or (
            not 1 <= accumulation_steps <= MAX_ACCUMULATION_STEPS
        ):
            raise ValueError(
                f"accumulation_steps={accumulation_steps!r} refused: must be an int in "
                f"[1, {MAX_ACCUMULATION_STEPS}]"
            )
        super().__init__(name, **kwargs)
        self.inner = inner
        self.accumulation_steps = accumulation_steps
        for spec in self.hyperparameter_specs():  # floats, callables, tensors, schedules
            self._set_hyper(spec.name, inner._hyper[spec.name])
        if not self._initial_decay:  # the inner `decay` (counted here in micro-batches)
            self._initial_decay = inner._initial_decay

    def hyperparameter_specs(self):
        """Exactly the inner rule's specs."""
        return self.inner.hyperparameter_specs()

    def declared_slot_names(self) -> tuple[str, ...]:
        """The inner rule's slots, then `grad_accum`: all are created on this optimizer."""
        return tuple(self.inner.slot_names_for_rule()) + super().declared_slot_names()

    def slot_initializer(self, name, var):
        if name in self.inner.slot_names_for_rule():
            return self.inner.slot_initializer(name, var)
        return super().slot_initializer(name, var)

    def slot_shape(self, name, var):
        if name in self.inner.slot_names_for_rule():
            return self.inner.slot_shape(name, var)
        return super().slot_shape(name, var)

    def coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, Any]:
        """Inner coefficients at inner step max(step // k, 1), plus `apply` (bool) and `k`."""
        k = tf.cast(self.accumulation_steps, step.dtype)
        inner_step = tf.maximum(tf.math.floordiv(step, k), tf.ones_like(step))
        coeffs = dict(self.inner.coefficients(hypers, inner_step))
        coeffs["apply"] = tf.equal(tf.math.floormod(step, k), tf.zeros_like(step))
        coeffs["k"] = k
        return coeffs

    def update(self, grad, var, slots, coeffs):
        apply = coeffs["apply"]
        acc = slots["grad_accum"] + grad
        inner_slots = {name: slots[name] for name in self.inner.slot_names_for_rule()}
        new_var, new_inner = self.inner.update(acc / coeffs["k"], var, inner_slots, coeffs)
        new_slots = {n: tf.where(apply, new_inner[n], inner_slots[n]) for n in inner_slots}
        new_slots["grad_accum"] = tf.where(apply, tf.zeros_like(acc), acc)
        return tf.where(apply, new_var, var), new_slots


    # ----- serialization --------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Base config, the inner hyperparameters (flat), `inner` as its registry name, and
        `accumulation_steps`.

        Raises:
            KeyError: the inner optimizer's class is not registered (a config could not name it).
        """
        config = super().get_config()
        config["inner"] = self.inner_name(self.inner)
        for option in self.inner.OPTIONS:  # e.g. nesterov, amsgrad, centered
            config[option] = getattr(self.inner, option)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuild from `get_config`: the inner rule's class comes from `custom_objects`, keyed
        by the registry name in `inner` (`registry.from_config` passes it); the remaining keys
        are its options and hyperparameters, checked against its specs' UI ranges as
        `registry.create` checks them.

        Raises:
            KeyError: `inner` names no class of `custom_objects`, or a key is not an inner
                hyperparameter (the message lists them).
            ValueError, InvalidHyperparameter: as the constructor / `HyperSpec.validate`.
        """
        config = dict(config)
        base = {k: config.pop(k) for k in _BASE_CONFIG_KEYS if k in config}
        steps = config.pop("accumulation_steps", 2)
        inner_cls = cls.inner_class(config.pop("inner", "adam"), custom_objects)
        inner_options = {k: config.pop(k) for k in inner_cls.OPTIONS if k in config}
        specs = {spec.name: spec for spec in inner_cls.HYPERPARAMETERS}
        for key in config:
            if key not in specs:
                raise KeyError(f"hyperparameter {key!r} refused: {inner_cls.__name__} has "
                               f"{', '.join(specs)}")
        inner = inner_cls(**inner_options, **{k: specs[k].validate(v) for k, v in config.items()})
        return cls(inner=inner, accumulation_steps=steps, **base)
