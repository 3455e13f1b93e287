"""MovingAverage: an exponential moving average of the weights, kept as a slot, around any rule."""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple
from collections.abc import Iterator

import tensorflow as tf
import tf_keras

from optimizers.adam import Adam
from optimizers.base import DeclaredSlots, shortest_float
from optimizers.hyperparams import HyperSpec, InvalidHyperparameter, find_spec
from optimizers.wrapping import LegacyOptimizer, OwnWeightsWrapper, Wrapper
from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.catalog import AVERAGE_DECAY, MOVING_AVERAGE_REFERENCE  # noqa: F401 (public)


class MovingAverageSlots(NamedTuple):
    """MovingAverage's own slot for one variable (the inner optimizer keeps its own slots)."""

    average: tf.Tensor  # [*var.shape], var.dtype: the moving average; starts equal to var


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class MovingAverage(OwnWeightsWrapper, Wrapper, DeclaredSlots, LegacyOptimizer):
    """Exponential moving average of the weights (TensorFlow Addons' `MovingAverage` semantics).

    The inner optimizer updates `var` every step; then, with n = this optimizer's `iterations`
    before the step (the number of updates already applied, as TFA reads the inner optimizer's
    `iterations` in `_prepare_local`):

        decay = 0                                        if n < start_step
              = min(average_decay, (1 + s) / (10 + s))   if dynamic_decay, s = n - start_step
              = average_decay                            otherwise
        decay = min(decay, (1 + u) / (10 + u))           if num_updates u is given (TF 1.x
                                                          ExponentialMovingAverage; u is read at
                                                          every step when it is a tf.Variable)
        average <- decay * average + (1 - decay) * var   (after the inner update)
        # average starts equal to var (its value when the slot is created)

    so with start_step = k the average is a copy of the weights for the first k steps. The
    training weights are never changed by this wrapper; for evaluation, `assign_average_vars`
    copies the averages into the variables (one way), `swap_weights` exchanges them (call it
    twice to swap back) and `averaged(var_list)` is a context manager doing both.

    Like `Lookahead`, this overrides `apply_gradients` (a step around the inner optimizer's
    whole step) and exposes the engine's API: its own hyperparameter then the inner's,
    `slot_names_for_rule()` = `average` then the inner slots; `get_slot_names()` stays its own
    (checkpoints, see `Lookahead`). No pure rule: hyper-gradients refuse it.

    Hyperparameter (`_set_hyper`): average_decay, library: float in [0, 1], callable or scalar
    tensor; UI: float in [0, 1]. Default 0.99.

    Args:
        inner: the wrapped optimizer object (default `Adam()`), not a wrapper.
        average_decay: as above.
        start_step: int >= 0, default 0 (option).
        dynamic_decay: bool, default False (option).
        num_updates: None (default), an int >= 0 or an integer/float `tf.Variable` (library only,
            not an option of the registry).
        name, **kwargs: OptimizerV2's own (`clipnorm`, `clipvalue`, `global_clipnorm`).

    Raises:
        InvalidHyperparameter: average_decay refused by `library_check`; start_step not an
            int >= 0; dynamic_decay not a bool; num_updates not None, an int >= 0 or a Variable.
        TypeError, ValueError: `inner` as in `Wrapper.checked_inner`.
    """

    REGISTRY_NAME = "moving_average"
    DEFAULT_INNER = Adam
    HYPERPARAMETERS = catalog.own_specs("moving_average")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("moving_average")
    SLOTS = MovingAverageSlots

    def __init__(self, inner: Any = None, average_decay=0.99, start_step=0, dynamic_decay=False,
                 num_updates=None, name="MovingAverage", **kwargs):
        inner = self.checked_inner(inner)
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise InvalidHyperparameter("start_step", start_step, "an int >= 0")
        if not isinstance(dynamic_decay, bool):
            raise InvalidHyperparameter("dynamic_decay", dynamic_decay, "a bool")
        if not (num_updates is None or isinstance(num_updates, tf.Variable) or (
                isinstance(num_updates, int) and not isinstance(num_updates, bool)
                and num_updates >= 0)):
            raise InvalidHyperparameter("num_updates", num_updates,
                                        "None, an int >= 0 or a tf.Variable")
        super().__init__(name, **kwargs)
        self.inner = inner
        self._track_trackable(inner, name="inner_optimizer")
        self.start_step = start_step
        self.dynamic_decay = dynamic_decay
        self.num_updates = num_updates
        self._set_hyper("average_decay", average_decay)

    # ----- the engine's API (as Lookahead) --------------------------------------------------
    def _inner_specs(self) -> tuple[HyperSpec, ...]:
        specs = getattr(self.inner, "hyperparameter_specs", None)
        return tuple(specs()) if specs is not None else ()

    def hyperparameter_specs(self) -> tuple[HyperSpec, ...]:
        """`average_decay` then the inner optimizer's specs."""
        return tuple(self.HYPERPARAMETERS) + self._inner_specs()

    def spec(self, name: str) -> HyperSpec:
        """The `HyperSpec` named `name` (own or inner). Raises KeyError listing the names."""
        return find_spec(self.hyperparameter_specs(), name, type(self).__name__)

    def hyper_values(self) -> dict[str, Any]:
        """`average_decay` then the inner hyperparameters (see `RuleOptimizer.hyper_values`)."""
        out = {"average_decay": shortest_float(self._serialize_hyperparameter("average_decay"))}
        if hasattr(self.inner, "hyper_values"):
            out.update(self.inner.hyper_values())
        return out

    def _set_hyper(self, name, value):
        """`average_decay` here (library check), any other name on the inner optimizer."""
        if name == "average_decay":
            super()._set_hyper(name, AVERAGE_DECAY.library_check(value))
        elif name in {s.name for s in self._inner_specs()}:
            self.inner._set_hyper(name, value)
        else:
            self.spec(name)  # raises KeyError listing the known names

    def slot_names_for_rule(self) -> tuple[str, ...]:
        """`average` then the inner optimizer's slots."""
        inner = getattr(self.inner, "slot_names_for_rule", None)
        inner_names = tuple(inner()) if inner is not None else tuple(self.inner.get_slot_names())
        return self.declared_slot_names() + inner_names

    def slot_initializer(self, name, var):
        """`average` starts equal to its variable."""
        return var if name == "average" else super().slot_initializer(name, var)

    # ----- the step -------------------------------------------------------------------------
    def current_decay(self, dtype: tf.DType = tf.float32) -> tf.Tensor:
        """The decay the next step uses (see the class docstring), a scalar of `dtype`."""
        n = tf.cast(self.iterations, dtype)
        decay = self._get_hyper("average_decay", dtype)
        if self.dynamic_decay:
            s = n - self.start_step
            decay = tf.minimum(decay, (1.0 + s) / (10.0 + s))
        if self.num_updates is not None:
            u = tf.cast(self.num_updates, dtype)
            decay = tf.minimum(decay, (1.0 + u) / (10.0 + u))
        return tf.where(n < self.start_step, tf.zeros_like(decay), decay)

    def apply_gradients(self, grads_and_vars, name=None, **kwargs):
        """Inner step, then the moving-average update of every variable; returns `iterations`."""
        grads_and_vars = list(grads_and_vars)
        var_list = [v for _, v in grads_and_vars]
        with tf.init_scope():
            self._create_all_weights(var_list)
        inner_op = self.inner.apply_gradients(grads_and_vars, name=name, **kwargs)
        with tf.control_dependencies([inner_op]):
            ops = []
            for var in var_list:
                decay = self.current_decay(var.dtype.base_dtype)
                average = self.get_slot(var, "average")
                ops.append(average.assign(decay * average + (1 - decay) * var.read_value(),
                                          read_value=False))
        with tf.control_dependencies(ops):
            return self.iterations.assign_add(1)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        raise NotImplementedError("MovingAverage applies updates in apply_gradients")

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        raise NotImplementedError("MovingAverage applies updates in apply_gradients")

    # ----- evaluation with the averages -----------------------------------------------------
    def assign_average_vars(self, var_list) -> tf.Operation:
        """Copy each variable's `average` slot into it (one way: the training value is lost)."""
        return tf.group(*[var.assign(self.get_slot(var, "average")) for var in var_list])

    def swap_weights(self, var_list) -> tf.Operation:
        """Exchange every variable with its `average` slot (call again to swap back)."""
        ops = []
        for var in var_list:
            average = self.get_slot(var, "average")
            current = tf.identity(var.read_value())
            with tf.control_dependencies([current]):
                ops.append(var.assign(average.read_value()))
            with tf.control_dependencies(ops[-1:]):
                ops.append(average.assign(current))
        return tf.group(*ops)

    @contextlib.contextmanager
    def averaged(self, var_list) -> Iterator[None]:
        """`with opt.averaged(model.trainable_variables): model.evaluate(...)`: the averages are
        in the variables inside the block, the training weights again after it."""
        self.swap_weights(var_list)
        try:
            yield
        finally:
            self.swap_weights(var_list)

    # ----- serialization --------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Base config, `inner` (Keras-serialized, as Lookahead), options and `average_decay`.
        A `tf.Variable` num_updates is written as its current value."""
        config = super().get_config()
        num_updates = self.num_updates
        if isinstance(num_updates, tf.Variable):
            num_updates = int(num_updates.numpy())
        config.update({
            "inner": tf_keras.saving.serialize_keras_object(self.inner),
            "average_decay": shortest_float(self._serialize_hyperparameter("average_decay")),
            "start_step": self.start_step, "dynamic_decay": self.dynamic_decay,
            "num_updates": num_updates,
        })
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuild from `get_config`; the inner entry's class is found as in
        `Lookahead.from_config`. Raises KeyError, ValueError, InvalidHyperparameter."""
        config = dict(config)
        inner = cls.inner_from_entry(config.pop("inner", "adam"), custom_objects)
        if isinstance(config.get("average_decay"), dict) or callable(config.get("average_decay")):
            raise InvalidHyperparameter("average_decay", config["average_decay"], "a float")
        return cls(inner=inner, **config)


__all__ = ["MovingAverage", "MovingAverageSlots"]
