"""Keras 3 twins: the lab's pure rules as `keras.optimizers.Optimizer` subclasses.

Keras 3 (the `keras` package, TensorFlow >= 2.16's `tf.keras` unless `TF_USE_LEGACY_KERAS=1`)
has none of OptimizerV2's `_set_hyper`, `_create_slots`, `_prepare_local` or
`_resource_apply_dense/_sparse`. Where each piece went, as this adapter does it:

| Keras 2 (`RuleOptimizer`)                 | Keras 3 (`RuleTwin`)                                  |
| ----------------------------------------- | ----------------------------------------------------- |
| `_set_hyper(name, v)` -> `tf.Variable`    | `learning_rate` is a variable; the other              |
|                                           | hyperparameters are plain attributes (`self.beta_1`)  |
| `_create_slots` + `add_slot`              | `build(variables)` + `add_variable_from_reference`    |
| `_prepare_local` (once per device, dtype) | computed inside `update_step`, per variable           |
| `_resource_apply_dense` / `_sparse`       | `update_step(gradient, variable, learning_rate)`;     |
|                                           | an `IndexedSlices` gradient takes the lazy row path   |
| `get_config` (via `_serialize_hyperparameter`) | `get_config` of plain attributes                 |

Both call the SAME pure functions (`coefficients`, `update`) of one rule instance, so a
Keras 2 run and a Keras 3 run on the same batches agree to round-off
(`tests/test_keras3_twin.py`: 20 steps, float32 1e-6, float64 1e-12, dense and sparse).

A consequence worth teaching: since Keras 3 keeps `beta_1` & co. as Python floats, a compiled
train step captures them as constants; assigning `opt.beta_1 = 0.5` afterwards is the
`self.t_cur = 5` trap of Keras 2. Only `learning_rate` (a variable) changes live.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from optimizers.base import RuleOptimizer
from optimizers.rules import as_step


# Keras 3's base class owns `weight_decay`: set, it decays EVERY row of every variable before
# `update_step` (dense, even for an embedding's sparse gradient), where the lab's AdamW rule
# decays only the rows a sparse step touches (its lazy Keras 2 path). The twin keeps the decay
# in the rule, under another attribute name, so both front ends compute the same thing.
RENAMED = {"weight_decay": "rule_weight_decay"}


def attribute_name(hyper: str) -> str:
    """The Keras 3 attribute holding hyperparameter `hyper` (`RENAMED`, else the same name)."""
    return RENAMED.get(hyper, hyper)


def _tf_variable(variable) -> tf.Variable:
    """The `tf.Variable` behind a Keras 3 variable (the TensorFlow backend hands `update_step`
    either one)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


class RuleTwin(keras.optimizers.Optimizer):
    """A Keras 3 optimizer running the pure rule of a lab `RuleOptimizer`.

    Args:
        rule: a `RuleOptimizer` instance: its class, options and current hyperparameter
            values define the twin (its own variables are never created or touched).
        name: optimizer name (default `<RuleClass>Keras3`).
        **kwargs: Keras 3 optimizer arguments (`clipnorm`, `global_clipnorm`, ...).

    Raises:
        TypeError: `rule` is not a `RuleOptimizer` (a wrapper such as Lookahead overrides
            `apply_gradients` and has no pure rule to share).
    """

    def __init__(self, rule: RuleOptimizer, name: str | None = None, **kwargs: Any):
        if not isinstance(rule, RuleOptimizer):
            raise TypeError(f"rule={rule!r} refused: a Keras 3 twin needs a RuleOptimizer "
                            "(pure coefficients/update)")
        values = rule.hyper_values()
        super().__init__(learning_rate=values["learning_rate"],
                         name=name or f"{type(rule).__name__}Keras3", **kwargs)
        self._rule = rule
        self._hyper_names = tuple(n for n in values if n != "learning_rate")
        # a rule that overrides the lazy sparse path (e.g. accumulation densifies) keeps its policy
        self._lazy_sparse = (type(rule)._resource_apply_sparse
                             is RuleOptimizer._resource_apply_sparse)
        for hyper in self._hyper_names:  # Keras 3 style: plain attributes
            setattr(self, attribute_name(hyper), values[hyper])
        self.slot_names = tuple(rule.slot_names_for_rule())

    def build(self, variables):
        """Create every slot of the rule for every variable (Keras 2's `_create_slots`)."""
        if self.built:
            return
        super().build(variables)
        self.slots: dict[str, list] = {}
        for slot in self.slot_names:  # slot by slot, like DeclaredSlots._create_slots
            made = []
            for var in variables:
                initializer = self._rule.slot_initializer(slot, var)
                shape = self._rule.slot_shape(slot, var)
                if shape == var.shape:
                    made.append(self.add_variable_from_reference(
                        var, name=slot, initializer=initializer))
                else:  # a slot of its own shape (Adafactor's factored statistics)
                    made.append(self.add_variable(shape=tuple(shape), initializer=initializer,
                                                  dtype=var.dtype, name=f"{slot}_{len(made)}"))
            self.slots[slot] = made

    def _coefficients(self, dtype, learning_rate) -> dict[str, tf.Tensor]:
        # through float32, as Keras 2 keeps every `_set_hyper` value in a float32 variable
        hypers = {name: tf.cast(tf.constant(getattr(self, attribute_name(name)), tf.float32),
                                dtype) for name in self._hyper_names}
        hypers["learning_rate"] = tf.cast(learning_rate, dtype)
        return self._rule.coefficients(hypers, as_step(self.iterations, dtype))

    def update_step(self, gradient, variable, learning_rate):
        """One update of `variable` (Keras 2's `_prepare_local` + `_resource_apply_*`)."""
        dtype = variable.dtype
        coeffs = self._coefficients(dtype, learning_rate)
        index = self._get_variable_index(variable)
        slot_vars = {name: self.slots[name][index] for name in self.slot_names}
        if isinstance(gradient, tf.IndexedSlices):
            if self._lazy_sparse:
                self._sparse_step(gradient, variable, slot_vars, coeffs)
                return
            gradient = tf.convert_to_tensor(gradient)
        slots = {name: tf.convert_to_tensor(v) for name, v in slot_vars.items()}
        new_var, new_slots = self._rule.update(
            tf.cast(gradient, dtype), tf.convert_to_tensor(variable), slots, coeffs)
        self.assign(variable, new_var)
        for name, slot in slot_vars.items():
            self.assign(slot, new_slots[name])

    def _sparse_step(self, gradient, variable, slot_vars, coeffs) -> None:
        """The lazy row update of `RuleOptimizer._resource_apply_sparse` (duplicate rows summed
        first, as OptimizerV2 does before calling it)."""
        indices, positions = tf.unique(gradient.indices)
        rows = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(indices)[0])
        slot_rows = {name: tf.gather(tf.convert_to_tensor(v), indices)
                     for name, v in slot_vars.items()}
        new_rows, new_slot_rows = self._rule.update(
            tf.cast(rows, variable.dtype), tf.gather(tf.convert_to_tensor(variable), indices),
            slot_rows, coeffs)
        _tf_variable(variable).scatter_update(tf.IndexedSlices(new_rows, indices))
        for name, slot in slot_vars.items():
            _tf_variable(slot).scatter_update(tf.IndexedSlices(new_slot_rows[name], indices))

    def get_config(self) -> dict[str, Any]:
        """Keras 3 config: base fields, the rule's class and options, its hyperparameters."""
        config = super().get_config()
        config["rule"] = type(self._rule).__name__
        config.update({name: getattr(self, attribute_name(name)) for name in self._hyper_names})
        rule_config = self._rule.get_config()  # options as Keras 2 serializes them (`inner`)
        config.update({option: rule_config[option] for option in self._rule.OPTIONS})
        return config


def twin_of(rule: RuleOptimizer, **kwargs: Any) -> RuleTwin:
    """`RuleTwin(rule, **kwargs)`: the Keras 3 optimizer running `rule`'s maths."""
    return RuleTwin(rule, **kwargs)


__all__ = ["RuleTwin", "twin_of"]
