"""Keras 2 -> Keras 3: where each OptimizerV2 piece went, shown on one rule in both front ends.

For the "Keras 3" page: the mapping table, the two adapters' sources side by side, the recorded
call order of one `apply_gradients` in each, and the numeric parity of the Keras 2 class and its
Keras 3 twin (`optimizers.keras3_twin.RuleTwin`) trained on the same batches.

Imports Keras 3 (`keras`) beside `tf_keras`: only the page and the tests import this module.
"""

from __future__ import annotations

import inspect
from typing import Any
from collections.abc import Callable

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

from optimizers import registry
from optimizers.base import RuleOptimizer
from optimizers.keras3_twin import RuleTwin
from teaching.inspect_step import CallRecorder

# (Keras 2 piece, Keras 3 piece, what changed) — the rows of the page's table.
MAPPING = (
    ("_set_hyper(name, value)", "plain attribute (self.beta_1); learning_rate is a variable",
     "only learning_rate changes live in a compiled step; the others are Python constants"),
    ("_get_hyper(name, dtype)", "ops.cast(self.beta_1, variable.dtype)",
     "no `_hyper` dict; callables and schedules only for learning_rate"),
    ("_create_slots + add_slot(var, name)", "build(variables) + add_variable_from_reference",
     "slots are lists indexed by _get_variable_index(variable), not a dict per variable"),
    ("_prepare_local -> apply_state", "(none) computed inside update_step",
     "no per-(device, dtype) cache: coefficients are recomputed for every variable"),
    ("_resource_apply_dense(grad, var, apply_state)", "update_step(gradient, variable, lr)",
     "one method for every variable; learning_rate arrives as an argument"),
    ("_resource_apply_sparse(grad, var, indices)", "update_step with a tf.IndexedSlices",
     "no separate sparse method: update_step checks the gradient type itself"),
    ("_serialize_hyperparameter + get_config", "get_config of plain attributes",
     "a schedule is serialized only for learning_rate"),
    ("decay=, lr= aliases", "(removed)", "use a LearningRateSchedule; weight_decay is a "
                                         "base-class argument"),
)
KERAS2_METHODS = ("_create_slots", "_prepare_local", "_resource_apply_dense",
                  "_resource_apply_sparse", "get_config")
KERAS3_METHODS = ("build", "update_step", "_sparse_step", "get_config")
KERAS3_RECORDED = ("apply_gradients", "apply", "build", "add_variable_from_reference",
                   "_backend_apply_gradients", "_apply_weight_decay", "update_step",
                   "_sparse_step", "assign")


def mapping_table() -> pd.DataFrame:
    """The mapping as a table: columns `Keras 2`, `Keras 3`, `what changed`."""
    return pd.DataFrame(MAPPING, columns=["Keras 2", "Keras 3", "what changed"])


def sources(cls: type, methods: tuple[str, ...]) -> dict[str, str]:
    """Method name -> source, from the first class of `cls`'s MRO that defines it."""
    out = {}
    for name in methods:
        for klass in cls.__mro__:
            if name in vars(klass):
                try:
                    out[f"{klass.__name__}.{name}"] = inspect.getsource(vars(klass)[name])
                except (OSError, TypeError):
                    pass
                break
    return out


def parity_problem(dtype: tf.DType, steps: int, seed: int = 0):
    """The parity problem: (start values [kernel [6, 4], bias [4], embedding [10, 3]] as
    float64 arrays, `steps` batches, loss(kernel, bias, embedding, batch) -> scalar of `dtype`).
    The embedding is read with `tf.gather`, so its gradient is a `tf.IndexedSlices`."""
    rng = np.random.default_rng(seed)
    start = (rng.normal(size=(6, 4)), rng.normal(size=4), rng.normal(size=(10, 3)))
    batches = [(rng.normal(size=(5, 6)), rng.normal(size=(5, 4)),
                rng.integers(0, 10, size=(5, 2)), rng.normal(size=(5, 3))) for _ in range(steps)]

    def loss(w, b, e, batch):
        x, y, ids, target = batch
        dense = tf.reduce_mean(tf.square(tf.tanh(tf.cast(x, dtype) @ w + b) - tf.cast(y, dtype)))
        rows = tf.reduce_sum(tf.gather(e, ids), axis=1)  # an IndexedSlices gradient
        return dense + tf.reduce_mean(tf.square(rows - tf.cast(target, dtype)))

    return start, batches, loss


def train_steps(opt, variables, tensors, batches, loss) -> None:
    """One `opt.apply_gradients` per batch; `tensors` are what the tape watches (the
    `tf.Variable`s behind Keras 3 variables), `variables` what the optimizer updates."""
    for batch in batches:
        with tf.GradientTape() as tape:
            value = loss(*tensors, batch)
        opt.apply_gradients(zip(tape.gradient(value, tensors), variables))


def parity(name: str, hypers: dict[str, Any] | None = None,
           options: dict[str, Any] | None = None, dtype: tf.DType = tf.float32,
           steps: int = 20) -> pd.DataFrame:
    """Train a dense layer and an embedding table `steps` steps with the Keras 2 class and with
    its Keras 3 twin on the same batches; one row per weight and per slot.

    Returns:
        DataFrame as `parity_of`.

    Raises:
        KeyError, ValueError: as `registry.create`; TypeError: a non-rule optimizer.
    """
    return parity_of(lambda: registry.create(name, hypers, options), dtype, steps)


LABELS = ("kernel", "bias", "embedding")
GRADIENT_KIND = {"kernel": "dense", "bias": "dense", "embedding": "sparse (IndexedSlices)"}


def parity_of(make: Callable[[], RuleOptimizer], dtype: tf.DType = tf.float32,
              steps: int = 20) -> pd.DataFrame:
    """`parity` for any `RuleOptimizer` factory: `make()` is called twice, once for the Keras 2
    run (on its pure rule: `fused = False`) and once for the rule behind the Keras 3 twin
    (`RuleTwin(make())`).

    The problem: a tanh dense layer (kernel [6, 4], bias [4]: dense gradients) plus an
    embedding table [10, 3] read with `tf.gather` (an `IndexedSlices` gradient: Keras 2's
    `_resource_apply_sparse`, the twin's sparse branch of `update_step`), `steps` batches of 5.

    Returns:
        DataFrame with columns `quantity` (e.g. `kernel`, `m of embedding`), `gradient`
        (`dense` or `sparse (IndexedSlices)`), `shape`, `max_abs_difference` (float),
        `max_abs_value` (float).

    Raises:
        TypeError: `make()` is not a `RuleOptimizer` (from `RuleTwin`).
    """
    start, batches, loss = parity_problem(dtype, steps)
    keras2 = make()
    # The twin runs the pure rule; so does the Keras 2 class here (not its fused kernels,
    # which differ from the rule by float rounding, and for SGD/RMSprop without momentum by
    # leaving the momentum buffer alone): what is compared is the same rule in both adapters.
    keras2.fused = False
    twin = RuleTwin(make())
    vars2 = [tf.Variable(v, dtype=dtype) for v in start]
    vars3 = [keras.Variable(v, dtype=dtype.name) for v in start]
    train_steps(keras2, vars2, vars2, batches, loss)
    train_steps(twin, vars3, [v.value for v in vars3], batches, loss)
    rows = []

    def row(quantity, label, a, b):
        a, b = np.asarray(a), np.asarray(tf.convert_to_tensor(b))
        rows.append({"quantity": quantity, "gradient": GRADIENT_KIND[label],
                     "shape": str(list(a.shape)),
                     "max_abs_difference": float(np.abs(a - b).max()),
                     "max_abs_value": float(np.abs(a).max())})

    for label, v2, v3 in zip(LABELS, vars2, vars3):
        row(label, label, v2.numpy(), v3)
    for slot in keras2.slot_names_for_rule():
        for i, label in enumerate(LABELS):
            row(f"{slot} of {label}", label, keras2.get_slot(vars2[i], slot).numpy(),
                twin.slots[slot][i])
    return pd.DataFrame(rows)


def call_orders(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The recorded calls of one eager `apply_gradients` (a dense kernel and an embedding
    table) in Keras 2 and in Keras 3: (keras2 table, keras3 table), columns as
    `CallRecorder.table()`."""
    start, batches, loss = parity_problem(tf.float32, 1)
    keras2 = registry.create(name)
    twin = RuleTwin(registry.create(name))
    recorder2, recorder3 = CallRecorder(), CallRecorder()
    recorder2.instrument(keras2)
    for method in KERAS3_RECORDED:
        original = getattr(twin, method, None)
        if original is not None:  # object.__setattr__: Keras 3 tracks attribute assignments
            object.__setattr__(twin, method, recorder3._wrap("optimizer", method, original))
    vars2 = [tf.Variable(v, dtype=tf.float32) for v in start]
    vars3 = [keras.Variable(v, dtype="float32") for v in start]
    train_steps(keras2, vars2, vars2, batches, loss)
    train_steps(twin, vars3, [v.value for v in vars3], batches, loss)
    return recorder2.table(), recorder3.table()


def rule_names() -> list[str]:
    """Registry optimizers that have a Keras 3 twin (pure rules; wrappers with a pure rule
    included, Lookahead not)."""
    return [n for n in registry.names() if issubclass(registry.get(n), RuleOptimizer)]


__all__ = ["GRADIENT_KIND", "KERAS2_METHODS", "KERAS3_METHODS", "MAPPING", "call_orders",
           "mapping_table", "parity", "parity_of", "parity_problem", "rule_names", "sources",
           "train_steps"]
