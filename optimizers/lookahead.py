"""Lookahead: a wrapper optimizer, the case where overriding `apply_gradients` is the right call."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from optimizers.base import shortest_float
from optimizers.hyperparams import HyperSpec, find_spec

LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer

LOOKAHEAD_REFERENCE = (
    "Zhang, Lucas, Hinton & Ba 2019, 'Lookahead Optimizer: k steps forward, 1 step back', "
    "NeurIPS, arXiv:1907.08610, Algorithm 1"
)
SYNC_PERIOD = HyperSpec(
    "sync_period", 6.0, 1.0, 1000.0, "k: inner (fast) steps between two slow-weight syncs",
    reference=LOOKAHEAD_REFERENCE, integer=True,
)
SLOW_STEP_SIZE = HyperSpec(
    "slow_step_size", 0.5, 0.0, 1.0, "alpha: fraction of the way the slow weights move to the fast",
    reference=LOOKAHEAD_REFERENCE, low_inclusive=False,
)

# Keywords of OptimizerV2 itself; any other keyword of Lookahead is an inner hyperparameter.
_BASE_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay",
                "gradient_aggregator", "gradient_transformers")


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Lookahead(LegacyOptimizer):
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

    Slots: `slow` (shaped like its variable, same dtype), through the usual `get_slot_names()` /
    `get_slot(var, "slow")`. The inner optimizer's slots stay the inner optimizer's
    (`lookahead.inner.get_slot(var, "m")`; `slot_names_with_inner()` / `slot_with_inner()` give
    both). They must not be exposed through this optimizer's `get_slot_names`: `tf.train.Checkpoint`
    asks every optimizer in the object graph for its slots by those two methods, so the inner
    slots would be claimed twice and saving fails ("A slot variable was re-used as a dependency"),
    the classic failure of wrapper optimizers. The inner optimizer is a tracked dependency
    (`inner_optimizer`), so a checkpoint of the model and this optimizer saves and restores both
    optimizers' slots and step counters (slots are restored when they are created, at the first
    step after the restore or by `_create_all_weights`, as for any OptimizerV2).

    In the registry as "lookahead" (option `inner`, a registry name of a plain rule): it offers
    the engine's API of a `RuleOptimizer` without being one. `hyperparameter_specs()` /
    `spec()` / `hyper_values()` / `_set_hyper` cover its own hyperparameters then the inner
    optimizer's (delegated, validated there), and `slot_names_for_rule()` / `get_slot()` name
    `slow` then the inner slots, so the Train page plots them and changes any of them live. It has
    no pure `coefficients` / `update`, so hyper-gradients refuse it (`RunConfig`).

    Args:
        inner: the wrapped optimizer instance, or a registry name (default "adam"; not
            "lookahead" or "accumulation").
        sync_period, slow_step_size: as above.
        **kwargs: OptimizerV2's own (`clipnorm`, `clipvalue`, ...); any other keyword is an inner
            hyperparameter (`registry.create("lookahead", {"learning_rate": ...})`).

    Raises:
        InvalidHyperparameter: a hyperparameter outside its range.
        KeyError: `inner` is a string that is not a registered optimizer name, or a keyword
            that is not a hyperparameter of the inner optimizer.
        ValueError: `inner` is "lookahead" or "accumulation".
    """

    HYPERPARAMETERS = (SYNC_PERIOD, SLOW_STEP_SIZE)
    OPTIONS = ("inner",)
    SLOTS = ("slow",)

    def __init__(self, inner: Any = "adam", sync_period=6, slow_step_size=0.5, name="Lookahead",
                 **kwargs):
        own_kwargs = {k: kwargs.pop(k) for k in _BASE_KWARGS if k in kwargs}
        inner_hypers = kwargs  # everything else: the inner optimizer's hyperparameters
        super().__init__(name, **own_kwargs)
        from optimizers import registry

        if isinstance(inner, str):
            if inner in ("lookahead", "accumulation"):
                raise ValueError(f"option inner={inner!r} refused: Lookahead wraps a plain rule")
            inner = registry.create(inner, inner_hypers)
        elif isinstance(inner, LegacyOptimizer):
            for key, value in inner_hypers.items():
                inner._set_hyper(key, value)
        else:
            raise TypeError(f"inner={inner!r} refused: must be an OptimizerV2 or a registry name")
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
        """`slow` then the inner optimizer's slots: every slot `get_slot(var, name)` answers."""
        inner = getattr(self.inner, "slot_names_for_rule", None)
        inner_names = tuple(inner()) if inner is not None else tuple(self.inner.get_slot_names())
        return self.SLOTS + tuple(n for n in inner_names if n not in self.SLOTS)

    def get_slot(self, var, slot_name):
        """This optimizer's `slow`; any other name is looked up in the inner optimizer.

        `get_slot_names()` stays this optimizer's own (`slow`): see the class docstring
        (`tf.train.Checkpoint` walks `get_slot_names`, so the inner slots are not listed there).
        """
        if slot_name in self.SLOTS:
            return super().get_slot(var, slot_name)
        return self.inner.get_slot(var, slot_name)

    # ----- weights --------------------------------------------------------------------------
    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, "slow", initializer=var)

    def _create_all_weights(self, var_list):
        """Own hypers and `slow` slots, and the inner optimizer's weights (all before a trace)."""
        super()._create_all_weights(var_list)
        self.inner._create_all_weights(var_list)

    def slot_names_with_inner(self) -> list[str]:
        """This optimizer's slot names (`slow`) then the inner optimizer's."""
        own = self.get_slot_names()
        return own + [n for n in self.inner.get_slot_names() if n not in own]

    def slot_with_inner(self, var, slot_name):
        """`get_slot` of this optimizer for `slow`, of the inner optimizer for its slots."""
        if slot_name in self.get_slot_names():
            return self.get_slot(var, slot_name)
        return self.inner.get_slot(var, slot_name)

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
        config = super().get_config()
        config.update({
            "inner": tf_keras.saving.serialize_keras_object(self.inner),
            "sync_period": shortest_float(self._serialize_hyperparameter("sync_period")),
            "slow_step_size": shortest_float(self._serialize_hyperparameter("slow_step_size")),
        })
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = config.pop("inner")
        if isinstance(inner, dict):
            inner = tf_keras.optimizers.deserialize(
                inner, custom_objects=custom_objects, use_legacy_optimizer=True
            )
        return cls(inner=inner, **config)


__all__ = ["Lookahead", "LOOKAHEAD_REFERENCE"]
