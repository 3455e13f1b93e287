"""Lookahead: a wrapper optimizer, the case where overriding `apply_gradients` is the right call."""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf
import tf_keras

from optimizers.adam import Adam
from optimizers.base import DeclaredSlots, shortest_float
from optimizers.hyperparams import HyperSpec, find_spec
from optimizers.wrapping import LegacyOptimizer, OwnWeightsWrapper, Wrapper
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.catalog import (LOOKAHEAD_REFERENCE, SLOW_STEP_SIZE,  # noqa: F401 (public)
                                SYNC_PERIOD)


class LookaheadSlots(NamedTuple):
    """Lookahead's own slot for one variable (the inner optimizer keeps its own slots)."""

    slow: tf.Tensor  # [*var.shape], var.dtype: the slow weights; start equal to the variable


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Lookahead(OwnWeightsWrapper, Wrapper, DeclaredSlots, LegacyOptimizer):
    """Lookahead (Zhang et al. 2019, arXiv:1907.08610, Algorithm 1) around any OptimizerV2.

    The wrapped ("inner") optimizer updates the fast weights `var` every step. Every `k` steps
    the slow weights `slow` move a fraction `alpha` towards the fast ones and the fast weights are
    reset onto them. With t = iterations + 1 (this optimizer's own step counter):

        var  <- inner step(var, grad)                       # every step, inner slots too
        if t mod k == 0:
            slow <- slow + alpha * (var - slow)
            var  <- slow
        # slow starts equal to var (its value when the slot is created)

    Why this one overrides `apply_gradients` and the other optimizers of the lab don't:
    the base class's `apply_gradients` calls `_resource_apply_dense` once per variable with one
    gradient; an ordinary optimizer only says *how one variable changes* and the base class does
    the rest (weights, `_prepare`, distribution, `iterations += 1`). A wrapper needs to run a
    *whole other optimizer's* `apply_gradients` first (its own `_prepare`, its own slots and its
    own `iterations`, possibly a fused Keras kernel that cannot be called per variable), and
    only then act on the result. That is a step around the base-class loop, not inside it, so the
    override is `apply_gradients` itself: create our weights (`_create_all_weights`, which calls
    `_create_slots` -> the `slow` slots), call `inner.apply_gradients`, then the sync, then
    `iterations += 1`. `_resource_apply_dense` is never called (it raises to say so).

    Hyperparameters (`_set_hyper`, so they change live without a retrace):
        sync_period: k, an integer in [1, 1000], default 6 (float variable; floormod on it).
        slow_step_size: alpha in (0, 1], default 0.5.
    The inner optimizer keeps its own hyperparameters (`lookahead.inner`).

    Slots: `LookaheadSlots` (`slow`), through the usual `get_slot_names()` /
    `get_slot(var, "slow")`. The inner optimizer's slots stay the inner optimizer's
    (`lookahead.inner.get_slot(var, "m")`; `slot_names_for_rule()` / `get_slot()` give both,
    see below). They must not be exposed through this optimizer's `get_slot_names`: `tf.train.Checkpoint`
    asks every optimizer in the object graph for its slots by those two methods, so the inner
    slots would be claimed twice and saving fails ("A slot variable was re-used as a dependency"),
    the classic failure of wrapper optimizers. The inner optimizer is a tracked dependency
    (`inner_optimizer`), so a checkpoint of the model and this optimizer saves and restores both
    optimizers' slots and step counters (slots are restored when they are created, at the first
    step after the restore or by `_create_all_weights`, as for any OptimizerV2).

    In the registry as "lookahead" (option `inner`, a registry name of a plain rule; the
    registry builds that optimizer and passes the object): it offers
    the engine's API of a `RuleOptimizer` without being one. `hyperparameter_specs()` /
    `spec()` / `hyper_values()` / `_set_hyper` cover its own hyperparameters then the inner
    optimizer's (delegated, validated there), and `slot_names_for_rule()` / `get_slot()` name
    `slow` then the inner slots, so the Train page plots them and changes any of them live. It has
    no pure `coefficients` / `update`, so hyper-gradients refuse it (`RunConfig`).

    Args:
        inner: the wrapped optimizer object (default `Adam()`): any OptimizerV2 that is not a
            wrapper (`wrapping.check_inner`), e.g. `Lookahead(inner=SGD(learning_rate=0.1))`.
        sync_period, slow_step_size: as above.
        name, **kwargs: OptimizerV2's own (`clipnorm`, `clipvalue`, `global_clipnorm`).

    Raises:
        InvalidHyperparameter: a hyperparameter outside its range.
        TypeError: `inner` is a name (`registry.create` resolves names) or not an optimizer; an
            unknown keyword argument.
        ValueError: `inner` is a wrapper (Lookahead or GradientAccumulation).
    """

    REGISTRY_NAME = "lookahead"
    DEFAULT_INNER = Adam
    HYPERPARAMETERS = catalog.own_specs("lookahead")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("lookahead")
    SLOTS = LookaheadSlots

    def __init__(self, inner: Any = None, sync_period=6, slow_step_size=0.5, name="Lookahead",
                 **kwargs):
        inner = self.checked_inner(inner)
        super().__init__(name, **kwargs)
        self.inner = inner
        self._track_trackable(inner, name="inner_optimizer")
        self._set_hyper("sync_period", sync_period)
        self._set_hyper("slow_step_size", slow_step_size)

    # ----- the engine's API (same names as RuleOptimizer) -----------------------------------
    def _own_spec_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.HYPERPARAMETERS)

    def _inner_specs(self) -> tuple[HyperSpec, ...]:
        specs = getattr(self.inner, "hyperparameter_specs", None)
        return tuple(specs()) if specs is not None else ()

    def hyperparameter_specs(self) -> tuple[HyperSpec, ...]:
        """Own specs (`sync_period`, `slow_step_size`) then the inner optimizer's."""
        return tuple(self.HYPERPARAMETERS) + self._inner_specs()

    def spec(self, name: str) -> HyperSpec:
        """The `HyperSpec` named `name` (own or inner).

        Raises:
            KeyError: no such hyperparameter (message lists the known names).
        """
        return find_spec(self.hyperparameter_specs(), name, type(self).__name__)

    def hyper_values(self) -> dict[str, float]:
        """Every hyperparameter (own, then inner) as a Python float."""
        out = {n: shortest_float(self._serialize_hyperparameter(n)) for n in self._own_spec_names()}
        if hasattr(self.inner, "hyper_values"):
            out.update(self.inner.hyper_values())
        return out

    def _set_hyper(self, name, value):
        """Validate then set: own names here, the inner optimizer's names on `self.inner`."""
        if name in self._own_spec_names():
            spec = {s.name: s for s in self.HYPERPARAMETERS}[name]
            super()._set_hyper(name, spec.validate(value))
        elif name in {s.name for s in self._inner_specs()}:
            self.inner._set_hyper(name, value)  # the inner optimizer validates
        else:
            self.spec(name)  # raises KeyError listing the known names

    def slot_names_for_rule(self) -> tuple[str, ...]:
        """`slow` then the inner optimizer's slots: every slot `get_slot(var, name)` answers.

        Declared names, known before the first step (for a plain Keras inner optimizer without
        `slot_names_for_rule`: the slots it has created so far).
        """
        own = self.declared_slot_names()
        inner = getattr(self.inner, "slot_names_for_rule", None)
        inner_names = tuple(inner()) if inner is not None else tuple(self.inner.get_slot_names())
        return own + tuple(n for n in inner_names if n not in own)

    # ----- weights --------------------------------------------------------------------------
    def slot_initializer(self, name, var):
        """`slow` starts equal to its variable."""
        return var if name == "slow" else super().slot_initializer(name, var)

    # ----- the step -------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, name=None, **kwargs):
        """Inner step, then every `sync_period` steps the slow-weight sync; returns `iterations`."""
        grads_and_vars = list(grads_and_vars)
        var_list = [v for _, v in grads_and_vars]
        with tf.init_scope():
            self._create_all_weights(var_list)
        inner_op = self.inner.apply_gradients(grads_and_vars, name=name, **kwargs)
        with tf.control_dependencies([inner_op]):
            step = tf.cast(self.iterations + 1, tf.float32)
            sync = tf.equal(tf.math.floormod(step, self._get_hyper("sync_period", tf.float32)), 0.0)
            ops = []
            for var in var_list:
                slow = self.get_slot(var, "slow")
                alpha = self._get_hyper("slow_step_size", var.dtype.base_dtype)
                fast = var.read_value()
                old_slow = slow.read_value()
                new_slow = tf.where(sync, old_slow + alpha * (fast - old_slow), old_slow)
                ops.append(slow.assign(new_slow, read_value=False))
                ops.append(var.assign(tf.where(sync, new_slow, fast), read_value=False))
        with tf.control_dependencies(ops):
            return self.iterations.assign_add(1)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        raise NotImplementedError("Lookahead applies updates in apply_gradients (see docstring)")

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        raise NotImplementedError("Lookahead applies updates in apply_gradients (see docstring)")

    # ----- serialization --------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Base config, `inner` as a Keras-serialized entry (class_name, config, ...) and the two
        own hyperparameters."""
        config = super().get_config()
        config.update({
            "inner": tf_keras.saving.serialize_keras_object(self.inner),
            "sync_period": shortest_float(self._serialize_hyperparameter("sync_period")),
            "slow_step_size": shortest_float(self._serialize_hyperparameter("slow_step_size")),
        })
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuild from `get_config`. The inner entry's class is the one `custom_objects` gives
        for the name the entry holds (its `registered_name`, else its `class_name`; a plain string
        is a registry name), else the class registered with Keras under it
        (`Wrapper.inner_class`; `registry.from_config` passes the class): no class named in a
        config is imported or deserialized by Keras.

        Raises:
            KeyError: the inner entry names no registered class.
            ValueError: a malformed inner entry, or a wrapper as inner; TypeError: unknown keys.
        """
        config = dict(config)
        inner = cls.inner_from_entry(config.pop("inner", "adam"), custom_objects)
        return cls(inner=inner, **config)


__all__ = ["Lookahead", "LookaheadSlots"]
