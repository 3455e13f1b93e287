"""`RuleOptimizer`: the adapter between a pure update rule and the Keras 2 `OptimizerV2` contract.

How the base class `tf_keras.optimizers.legacy.Optimizer` drives a subclass, in call order
(`apply_gradients` -> `_create_all_weights` -> `_create_hypers` + `_create_slots` -> `_prepare`
-> `_prepare_local` once per (device, dtype) -> `_resource_apply_dense` or
`_resource_apply_sparse` once per variable -> `iterations += 1`):

* `__init__` (subclass) registers every numeric hyperparameter with `_set_hyper`. Until the first
  `apply_gradients` they are Python floats in `self._hyper`; `_create_hypers` then turns each into
  a `tf.Variable`, so later `_set_hyper` calls *assign* to that variable and a traced
  `tf.function` sees the new value without retracing.
* `_create_slots` (here, `DeclaredSlots`) calls `add_slot(var, name)` for every field of the
  subclass's slot record `SLOTS` (a `NamedTuple`: the one place a rule's slot names, shapes and
  dtypes are declared). It runs inside the first `apply_gradients`, which is why
  `get_slot_names()` is empty before the first step.
* `_prepare_local` (here) computes the rule's scalar coefficients once per (device, dtype) and
  stores them in `apply_state[(var_device, var_dtype)]`.
* `_resource_apply_dense` / `_resource_apply_sparse` (here) read the slots, call the pure
  `update` rule (or its variable-free form `update_decrement`, subtracted in place) and assign
  the results. This path is never differentiated (assignments carry no gradient), so it traces
  the rule under `rules.derivative_free()`: one `Sqrt` kernel instead of the four-op
  finite-derivative square root the hyper-gradient engine needs.
* The fused dense fast path (`fused=True`, the default): where the configuration is one Keras
  itself runs as a single in-place kernel (`tf.raw_ops.ResourceApplyAdam`,
  `ResourceApplyKerasMomentum`, `ResourceApplyRMSProp`, `ResourceApplyAdagradV2`, ...), the dense
  update calls that kernel with the same hyperparameter tensors (`fused_kernel` names it,
  `fused_apply` calls it; `optimizers.fused_kernels` decides whether it runs), so a drop-in
  replacement costs what the Keras built-in costs. The
  kernel computes the same update as the rule up to float rounding (e.g. `m + (g - m)(1 - b1)`
  for `b1 m + (1 - b1) g`); `tests/test_fused_kernels.py` holds them together. The pure rule
  stays the reference: the hyper-gradient engine differentiates `coefficients`/`update`
  (fused kernels have no gradient, tensorflow#55181), sparse updates and every dtype or device
  without the kernel run the rule.

Subclasses implement `coefficients` and `update` as pure functions of tensors (see
`optimizers/rules.py`); the hyper-gradient engine calls the same two methods.

The Keras 2 contract kept here (what makes the lab's SGD/Adam/RMSprop/Adagrad drop-in
replacements for `tf_keras.optimizers.legacy.*`): every `_set_hyper` value may be a Python
number, a zero-argument callable, a scalar tensor / `tf.Variable`, and for `learning_rate` a
`LearningRateSchedule` (`HyperSpec.library_check`, Keras's limits); the legacy `decay` keyword
scales the learning rate by 1 / (1 + decay * iterations) in `_decayed_lr`; `clipnorm`,
`clipvalue`, `global_clipnorm` and `lr` are handled by the base class. The UI ranges
(`HyperSpec.validate`) are checked by the registry, not here.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from optimizers.hyperparams import (HyperSpec, InvalidHyperparameter, check_decay, fill_docstring,
                                    find_spec)
from optimizers.fused_kernels import defining_class, dense_kernel
from optimizers.rules import as_step, derivative_free
from optimizers.keras_schedules import schedule_from_config

from tf_keras.optimizers.legacy import Optimizer as LegacyOptimizer


def shortest_float(value: Any) -> Any:
    """`value` as a Python float; a float32 becomes the shortest decimal that round-trips.

    A dict (a serialized schedule) is returned unchanged; a complex number keeps its type.
    """
    if isinstance(value, dict):
        return value
    value = np.asarray(value).item() if isinstance(value, np.ndarray) else value
    if isinstance(value, np.float32):
        return float(str(value))
    if isinstance(value, (complex, np.complexfloating)):
        return complex(value)
    return float(value)


def trace_signature(optimizer: Any) -> tuple:
    """The Python state a traced step of `optimizer` bakes in (its `trace_signature()` and its
    inner optimizer's, for wrappers): when it changes, a compiled step must be retraced."""
    own = getattr(optimizer, "trace_signature", None)
    inner = getattr(optimizer, "inner", None)
    return ((own() if callable(own) else ()),
            (trace_signature(inner) if inner is not None else ()))


class SlotReads(Mapping):
    """Slot name -> the slot variable's value, read on first use (`value()`, no copy).

    A slot the rule does not use is never read: under XLA an unused read still passes the
    variable into the compiled cluster (RMSprop's plain regime, which ignores its momentum
    buffer, measured 1.08x Keras's apply step with it and 1.00x without).
    """

    _values: dict[str, tf.Tensor]

    def __init__(self, slot_vars: Mapping[str, tf.Variable]):
        self._vars, self._values = slot_vars, {}

    def __getitem__(self, name: str) -> tf.Tensor:
        if name not in self._values:
            self._values[name] = self._vars[name].value()
        return self._values[name]

    def __iter__(self):
        return iter(self._vars)

    def __len__(self) -> int:
        return len(self._vars)


class NoSlots(NamedTuple):
    """The slot record of a stateless rule: no `add_slot` at all."""


class DeclaredSlots:
    """Mixin: an optimizer's slots derived from its slot record, declared once per rule.

    Class attributes a subclass sets:
        SLOTS: a `NamedTuple` class whose fields are the `add_slot` names, in creation order,
            each with a comment giving its shape and dtype, e.g.
            `class AdamSlots(NamedTuple): m: tf.Tensor  # [*var.shape], var.dtype: first moment`.
        OPTIONAL_SLOTS: slot name -> name of the boolean option (plain attribute) without which
            that slot does not exist, e.g. `{"vhat": "amsgrad"}`.

    `declared_slot_names()` and `_create_slots` are derived from them; `slot_initializer` says
    how a slot starts (zeros unless overridden, e.g. Adagrad's constant accumulator).
    """

    SLOTS: ClassVar[type[NamedTuple]] = NoSlots
    OPTIONAL_SLOTS: ClassVar[Mapping[str, str]] = {}

    def declared_slot_names(self) -> tuple[str, ...]:
        """The fields of `SLOTS` this instance creates with `add_slot`, in `SLOTS` order."""
        return tuple(name for name in self.SLOTS._fields
                     if name not in self.OPTIONAL_SLOTS or getattr(self, self.OPTIONAL_SLOTS[name]))

    def slot_initializer(self, name: str, var: tf.Variable) -> Any:
        """The `add_slot` initializer of slot `name` for `var` ("zeros" unless overridden)."""
        del name, var
        return "zeros"

    def slot_shape(self, name: str, var: tf.Variable | tf.Tensor) -> tf.TensorShape:
        """The shape of slot `name` for `var`: the variable's own shape, unless the rule's slot
        record says otherwise (e.g. Adafactor's factored row and column statistics)."""
        del name
        return var.shape

    def _create_slots(self, var_list):
        # Slot by slot, then variable by variable, as Keras's own optimizers create them: the
        # order fixes `optimizer.weights` (and so a checkpoint's layout).
        for name in self.declared_slot_names():
            for var in var_list:
                shape = self.slot_shape(name, var)
                # The OptimizerV2 after this mixin in the bases defines `add_slot`.
                self.add_slot(var, name,  # type: ignore[attr-defined]
                              initializer=self.slot_initializer(name, var),
                              shape=None if shape == var.shape else shape)



class DensifiedSparse:
    """Mixin for a rule whose sparse update is its dense one: `tf.IndexedSlices` gradient rows
    are summed into a dense gradient of the variable's shape and the dense update runs (every
    row moves, every slot decays), as Keras 3 does for optimizers it does not update lazily.
    Put it before `RuleOptimizer` in the bases."""

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        """Densify the gradient and run `_resource_apply_dense`.

        Args:
            grad: [n_indices, *var.shape[1:]] gradient rows (unique `indices`).
            var: the variable, [n_rows, ...].
            indices: int tensor [n_indices].
            apply_state: as in `_resource_apply_dense`.
        """
        dense = tf.math.unsorted_segment_sum(grad, indices, num_segments=tf.shape(var)[0])
        return self._resource_apply_dense(dense, var, apply_state)  # type: ignore[attr-defined]


class RuleOptimizer(DeclaredSlots, LegacyOptimizer):
    """Base class of every optimizer of the lab (an OptimizerV2 whose maths is a pure rule).

    Class attributes a subclass sets:
        HYPERPARAMETERS: the `HyperSpec` of every numeric hyperparameter it registers with
            `_set_hyper` (name = constructor kwarg = `_hyper` key = `get_config` key).
        SLOTS, OPTIONAL_SLOTS: the slot record (see `DeclaredSlots`).
        OPTIONS: names of plain (non-tensor) constructor settings kept as attributes and in
            `get_config`, e.g. `amsgrad`: they change which slots exist or which branch of the
            maths runs, so they are fixed for the optimizer's life and never traced.

    Keyword argument (every subclass): `fused` (bool, default True): dense updates call the
    kernel Keras runs for the same configuration (`fused_kernel`) where one exists for the
    variable's dtype and device; False always runs the pure rule (what the hyper-gradient
    engine differentiates). `get_config` writes it only when False.

    Raises (from `_set_hyper`, hence from the constructor and from live changes):
        TypeError: `fused` that is not a bool.
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses (outside Keras's limits,
            NaN/inf, not a number/callable/scalar tensor/allowed schedule); a negative or
            non-numeric `decay`.
        KeyError: `_set_hyper` called on a name that is not a declared hyperparameter.
    """

    HYPERPARAMETERS: ClassVar[tuple[HyperSpec, ...]] = ()
    OPTIONS: ClassVar[tuple[str, ...]] = ()
    _HAS_AGGREGATE_GRAD = True

    def __init_subclass__(cls, **kwargs: Any):
        # `{{allowed_values}}` and `{{hyperparameter_args}}` in a subclass's docstring: the text
        # every optimizer shares and the ranges its `HYPERPARAMETERS` hold, written once
        super().__init_subclass__(**kwargs)
        cls.__doc__ = fill_docstring(cls.__doc__, cls.HYPERPARAMETERS)

    def __init__(self, name: str, fused: bool = True, **kwargs: Any):
        # `decay` (legacy time-based decay) and `clipnorm`/`clipvalue`/`global_clipnorm`/`lr`
        # are the base class's; decay is checked first so the refusal names the field.
        if not isinstance(fused, bool):
            raise TypeError(f"fused={fused!r} refused: must be True or False")
        if "decay" in kwargs:
            kwargs["decay"] = check_decay(kwargs["decay"])
        super().__init__(name, **kwargs)
        self.fused = fused

    # ----- hyperparameters ------------------------------------------------------------------
    def hyperparameter_specs(self) -> tuple[HyperSpec, ...]:
        """The specs of this instance's `_set_hyper` hyperparameters, in registration order."""
        return self.HYPERPARAMETERS

    def spec(self, name: str) -> HyperSpec:
        """The `HyperSpec` named `name`.

        Raises:
            KeyError: no such hyperparameter (message lists the known names).
        """
        return find_spec(self.hyperparameter_specs(), name, type(self).__name__)

    def _set_hyper(self, name: str, value: Any) -> None:
        """Check with `HyperSpec.library_check`, then register or assign hyperparameter `name`.

        Accepted: a finite Python number in the spec's library range (Keras's limits), a
        zero-argument callable, a scalar tensor / `tf.Variable`, a `LearningRateSchedule` for
        `learning_rate`. A Python number assigned to an existing hyperparameter variable is an
        assignment (no retrace); any other kind replaces the stored value, as in Keras.
        The UI range (`HyperSpec.validate`) is NOT checked here: the registry does it.
        Refused values raise before anything is assigned, so the old value stays in effect.
        """
        super()._set_hyper(name, self.spec(name).library_check(value))

    def hyper_tensors(self, dtype: tf.DType) -> dict[str, tf.Tensor]:
        """Every hyperparameter as a scalar tensor of `dtype`, as the update sees it.

        `_get_hyper(name, dtype)` (a callable called, a tensor cast) for each, except
        `learning_rate`, which is `_decayed_lr(dtype)`: a schedule evaluated at `iterations`
        and divided by (1 + decay * iterations). The dense, sparse and hyper-gradient paths all
        read hyperparameters through this method.
        """
        # `learning_rate` is not read through `_get_hyper` first: that read would be discarded.
        return {s.name: self._decayed_lr(dtype) if s.name == "learning_rate"
                else self._get_hyper(s.name, dtype) for s in self.hyperparameter_specs()}

    def hyper_values(self) -> dict[str, Any]:
        """Every hyperparameter's current value as a Python float (`_serialize_hyperparameter`).

        Values are stored in float32 variables; they are returned as the shortest decimal that
        rounds to the same float32 (0.01, not 0.009999999776482582) so configs stay readable.
        A callable gives its value now, a tensor its value; a `LearningRateSchedule` gives its
        Keras serialized dict (`{"class_name": ..., "config": ...}`), not a float.
        """
        return {
            s.name: shortest_float(self._serialize_hyperparameter(s.name))
            for s in self.hyperparameter_specs()
        }

    # ----- the pure rule (subclasses) ----------------------------------------------------------
    def slot_names_for_rule(self) -> tuple[str, ...]:
        """Names of the slots `update` reads and returns, in `add_slot` order (from `SLOTS`)."""
        return self.declared_slot_names()

    def coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
        """Scalar coefficients of the update at 1-based step `step` (pure, differentiable).

        Args:
            hypers: hyperparameter name -> scalar tensor (all of `hyperparameter_specs()`).
            step: scalar tensor, same float dtype, the step t >= 1 of the update.
        """
        raise NotImplementedError

    def update(
        self,
        grad: tf.Tensor,
        var: tf.Tensor,
        slots: Mapping[str, tf.Tensor],
        coeffs: Mapping[str, tf.Tensor],
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The new variable and slots (pure, differentiable; same shapes and dtype as `var`)."""
        raise NotImplementedError

    def _decrement(self, grad: tf.Tensor, slots: Mapping[str, tf.Tensor],
                   coeffs: Mapping[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]] | None:
        # `update_decrement` only where it was written with this class's `update` (defined by
        # the same class or below it): a subclass that overrides `update` alone must not have
        # its rule replaced by its parent's decrement.
        if not issubclass(defining_class(type(self), "update_decrement"),
                          defining_class(type(self), "update")):
            return None
        return self.update_decrement(grad, slots, coeffs)

    def update_decrement(
        self, grad: tf.Tensor, slots: Mapping[str, tf.Tensor], coeffs: Mapping[str, tf.Tensor]
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]] | None:
        """Optional form of `update` for rules whose new variable is `var - delta`, with `delta`
        computed without reading `var`: (delta, new_slots), both shaped like `grad`.

        The dense apply path then subtracts `delta` in place (`var.assign_sub`): no read of
        the variable and no separate subtraction kernel, with the same float subtraction as
        `update`, so the result is bit-identical. None (the default, e.g. AdamW, whose decay
        reads `var`) means: use `update` and assign its result.
        """
        del grad, slots, coeffs
        return None

    # ----- the fused fast path (subclasses) -------------------------------------------------
    def fused_kernel(self, var: tf.Variable) -> str | None:
        """Name of the `tf.raw_ops` kernel that performs this optimizer's dense update of `var`
        in its current configuration, or None (the rule runs). Availability for the dtype and
        device is checked by the caller (`fused_kernels.dense_kernel`)."""
        del var
        return None

    def fused_coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor
                           ) -> dict[str, tf.Tensor]:
        """Extra scalars the kernel takes (e.g. Adam's `beta_1**t`), computed once per
        (device, dtype) in `_prepare_local` when `fused`; same arguments as `coefficients`."""
        del hypers, step
        return {}

    def fused_apply(self, kernel: str, grad: tf.Tensor, var: tf.Variable,
                    slots: Mapping[str, tf.Variable], coeffs: Mapping[str, tf.Tensor]):
        """Call `kernel` (a name `fused_kernel` returned) to update `var` and its slot
        variables `slots` in place; returns what the raw op returns (an op in a graph, None
        eagerly)."""
        raise NotImplementedError(f"{type(self).__name__} names {kernel} but does not call it")

    def trace_signature(self) -> tuple:
        """The Python state (not `tf.Variable`s) a traced update bakes in beyond the
        constructor's options: a traced step computes with the value it had when traced, so a
        change of it needs a retrace (`engine.train_step.Engine.retrace`). Empty here."""
        return ()

    # ----- OptimizerV2 adapter ------------------------------------------------------------
    def _prepare_local(self, var_device, var_dtype, apply_state):
        # Every coefficient of the rule, computed once per (device, dtype), not per variable.
        # `hyper_tensors` evaluates `_decayed_lr` (the base class's `lr_t`) once, so the base
        # `_prepare_local` (which would evaluate it a second time) is not called. `_get_hyper`
        # returns the `tf.Variable` itself when its dtype is already `var_dtype`: reading each
        # one here, once, spares a ReadVariableOp per use per variable (3 for Adam's betas).
        hypers = {name: tf.convert_to_tensor(value)
                  for name, value in self.hyper_tensors(var_dtype).items()}
        step = as_step(self.iterations, var_dtype)
        with derivative_free():
            coeffs = self.coefficients(hypers, step)
            if self.fused:
                coeffs.update(self.fused_coefficients(hypers, step))
        apply_state[(var_device, var_dtype)].update(coeffs)

    def _coefficients_for(self, var, apply_state) -> Mapping[str, tf.Tensor]:
        key = (var.device, var.dtype.base_dtype)
        return (apply_state or {}).get(key) or self._fallback_apply_state(*key)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        """Dense update: every element of `var` and of each of its slots is rewritten.

        The rule runs under `rules.derivative_free()` (one-op square root: this path ends in
        assignments, which nothing differentiates) on `value()` reads (no `Identity` copies),
        with one assignment per variable and per slot; the variable itself is updated in
        place (`assign_sub`, no read) when the rule has an `update_decrement`.

        Args:
            grad: tensor shaped like `var` (same dtype).
            var: the trainable `tf.Variable` to update.
            apply_state: dict (device, dtype) -> coefficients from `_prepare_local`.
        """
        coeffs = self._coefficients_for(var, apply_state)
        slot_vars = {n: self.get_slot(var, n) for n in self.slot_names_for_rule()}
        kernel = dense_kernel(self, var)
        if kernel is not None:  # decided before the call: an eager kernel call returns None
            return self.fused_apply(kernel, grad, var, slot_vars, coeffs)
        slots = SlotReads(slot_vars)
        with derivative_free():
            decrement = self._decrement(grad, slots, coeffs)
            if decrement is None:
                new_var, new_slots = self.update(grad, var.value(), slots, coeffs)
                assigns = [var.assign(new_var, read_value=False)]
            else:
                delta, new_slots = decrement
                assigns = [var.assign_sub(delta, read_value=False)]
        # every slot the rule returned (a rule may leave one untouched, e.g. RMSprop's momentum
        # buffer in its plain regime)
        assigns += [slot_vars[n].assign(value, read_value=False) for n, value in new_slots.items()]
        return tf.group(*assigns)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        """Sparse ("lazy") update for `tf.IndexedSlices` gradients, e.g. of an `Embedding`.

        Only the rows named in `indices` change, in the variable and in every slot: the rule is
        applied to the gathered rows and the results are scattered back. Rows absent from the
        batch keep their slots untouched (their momentum does not decay), unlike a dense update
        with a zero gradient and unlike stock Keras Adam, which decays `m` and `v` everywhere.
        With every row in `indices` the result equals the dense update. Duplicate indices were
        already summed by the base class (`_resource_apply_sparse_duplicate_indices`).

        Args:
            grad: tensor [n_indices, *var.shape[1:]], the gradient rows.
            var: the `tf.Variable` to update, shape [n_rows, ...].
            indices: int tensor [n_indices], unique row indices.
            apply_state: as in `_resource_apply_dense`.
        """
        coeffs = self._coefficients_for(var, apply_state)
        slot_vars = {n: self.get_slot(var, n) for n in self.slot_names_for_rule()}
        slot_rows = {n: tf.gather(s, indices) for n, s in slot_vars.items()}
        with derivative_free():
            decrement = self._decrement(grad, slot_rows, coeffs)
            if decrement is None:
                new_rows, new_slot_rows = self.update(
                    grad, tf.gather(var, indices), slot_rows, coeffs)
                updates = [var.scatter_update(tf.IndexedSlices(new_rows, indices))]
            else:  # rows - delta in place: no gather of the variable's rows
                delta, new_slot_rows = decrement
                updates = [var.scatter_sub(tf.IndexedSlices(delta, indices))]
        updates += [
            slot_vars[n].scatter_update(tf.IndexedSlices(rows, indices))
            for n, rows in new_slot_rows.items()
        ]
        return tf.group(*updates)

    # ----- serialization --------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Base config, every hyperparameter, `decay` and every option, as Keras writes them.

        A schedule is written as `{"class_name": ..., "config": ...}`, a callable as its value
        now, a tensor / variable as its value (`_serialize_hyperparameter`).
        """
        config = super().get_config()
        config.update(self.hyper_values())
        config["decay"] = float(self._initial_decay)
        for option in self.OPTIONS:
            config[option] = getattr(self, option)
        if not self.fused:  # only when not the default: a default config has Keras's keys
            config["fused"] = False
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuild from `get_config` (or a Keras config of the same optimizer) without executing
        anything from it: a hyperparameter given as a dict must be an allow-listed schedule
        (`optimizers.keras_schedules.schedule_from_config`); `lr` is renamed `learning_rate`.

        Raises:
            InvalidHyperparameter: a schedule dict that is not allow-listed or invalid, a
                callable or any other object where a hyperparameter value is expected.
            TypeError: an unknown key (the constructor's own error).
        """
        del custom_objects  # nothing is looked up by name
        config = dict(config)
        config.pop("is_legacy_optimizer", None)  # added by tf_keras.optimizers.serialize
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        for key, value in config.items():
            if isinstance(value, dict):
                config[key] = schedule_from_config(key, value)
            elif callable(value) or tf.is_tensor(value):
                raise InvalidHyperparameter(key, value, "a number or a schedule dict in a config")
        return cls(**config)


__all__ = ["RuleOptimizer", "InvalidHyperparameter"]
