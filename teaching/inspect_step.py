"""Inside one optimizer step: run `apply_gradients` eagerly on a tiny model and record everything.

`StepInspector` builds a registry optimizer (or a `Lookahead` around one) and a tiny model with
fixed weights and a fixed batch, instruments the optimizer *instance* (each method listed in
`INSTRUMENTED` is wrapped by a recorder that logs its entry, in order, with its nesting depth),
and runs one `apply_gradients` per `step()`. The step runs eagerly, so the log is the real call
order of this call; under `tf.function` the same Python methods run only while tracing.

Models (float32, fixed by `seed`):
    "dense":     Dense 4 -> 3 (kernel [4, 3], bias [3]), mean squared error on a batch x [5, 4],
                 y [5, 3]; gradients are dense tensors -> `_resource_apply_dense`.
    "embedding": Embedding of 6 rows x 3, loss = mean((sum of the rows of ids - target)^2) with
                 ids [[0, 2], [2, 4]] (row 2 twice); the gradient is a `tf.IndexedSlices` ->
                 `_resource_apply_sparse_duplicate_indices` (sums the duplicate row 2) ->
                 `_resource_apply_sparse` on rows 0, 2, 4 only.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np
import pandas as pd
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers.lookahead import Lookahead

LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer

INSTRUMENTED = (
    "apply_gradients", "_create_all_weights", "_create_hypers", "_create_slots", "add_slot",
    "_prepare", "_prepare_local", "_distributed_apply", "_resource_apply_dense",
    "_resource_apply_sparse_duplicate_indices", "_resource_apply_sparse", "get_config",
    "_serialize_hyperparameter",
)
# Methods whose source the page shows (where the optimizer's class or RuleOptimizer defines them).
SOURCE_METHODS = (
    "__init__", "_create_slots", "_prepare_local", "_resource_apply_dense",
    "_resource_apply_sparse", "coefficients", "update", "apply_gradients", "get_config",
)
MODELS = ("dense", "embedding")
EMBEDDING_IDS = np.array([[0, 2], [2, 4]], dtype=np.int32)
LOOKAHEAD_PREFIX = "lookahead:"


# ----- instrumentation ------------------------------------------------------------------------
@dataclass
class Call:
    """One recorded method entry: `order` (0-based), `owner` ("optimizer" or "inner"), `method`,
    `depth` (nesting among recorded calls, 0 = outermost) and `detail` (argument summary)."""

    order: int
    owner: str
    method: str
    depth: int
    detail: str


def _describe(value: Any) -> str:
    if isinstance(value, tf.Variable):
        return f"Variable {value.name} {value.shape.as_list()} {value.dtype.name}"
    if isinstance(value, tf.IndexedSlices):
        return f"IndexedSlices values {value.values.shape.as_list()} indices {value.indices.numpy().tolist()}"
    if isinstance(value, tf.Tensor):
        return f"Tensor {value.shape.as_list()} {value.dtype.name}"
    if type(value).__name__ in ("zip", "generator", "map"):
        return f"grads_and_vars ({type(value).__name__} iterator)"
    if isinstance(value, dict):
        return "dict keys " + ", ".join(str(k) for k in value)
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return repr(value)[:60]


class CallRecorder:
    """Wraps methods of optimizer instances and logs every entry in order (eager calls only).

    `on_exit[method]` callbacks receive (owner, args, kwargs, result) after the call returns;
    the inspector uses them to capture `apply_state` and the arguments of the apply methods.
    """

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._depth = 0
        self.on_exit: dict[str, Callable[..., None]] = {}

    def instrument(self, optimizer: LegacyOptimizer, owner: str = "optimizer") -> None:
        for name in INSTRUMENTED:
            original = getattr(optimizer, name, None)
            if original is None:
                continue
            # object.__setattr__: OptimizerV2.__setattr__ would send names in _hyper to _set_hyper
            object.__setattr__(optimizer, name, self._wrap(owner, name, original))

    def _wrap(self, owner: str, name: str, original: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            call = Call(len(self.calls), owner, name, self._depth,
                        ", ".join(_describe(a) for a in args[:3]))
            self.calls.append(call)
            self._depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if name in self.on_exit:
                self.on_exit[name](owner, args, kwargs, result, call)
            return result

        # A TFDecorator, not functools.wraps: OptimizerV2 reads the argument names of
        # `_resource_apply_dense` with tf_inspect (`_dense_apply_args`) to decide whether to pass
        # `apply_state`; tf_inspect sees through TFDecorators, so the instrumented optimizer
        # receives exactly the arguments the plain one does.
        return tf.__internal__.decorator.make_decorator(original, wrapper)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([c.__dict__ for c in self.calls],
                            columns=["order", "owner", "method", "depth", "detail"])

    def clear(self) -> None:
        self.calls.clear()


# ----- the optimizer and the model ---------------------------------------------------------
def build_optimizer(name: str, hypers: dict[str, float] | None = None,
                    options: dict[str, Any] | None = None) -> LegacyOptimizer:
    """A registry optimizer, or `Lookahead` around one for names `"lookahead:<inner>"`."""
    if name.startswith(LOOKAHEAD_PREFIX):
        return Lookahead(registry.create(name[len(LOOKAHEAD_PREFIX):], hypers, options))
    return registry.create(name, hypers, options)


def build_model(kind: str, seed: int = 0) -> tuple[list[tf.Variable], Callable[[], tf.Tensor]]:
    """(trainable variables, loss function) of the tiny model `kind` (see module docstring)."""
    rng = np.random.default_rng(seed)
    if kind == "dense":
        layer = tf_keras.layers.Dense(3, name="dense")
        layer.build((None, 4))
        layer.set_weights([rng.normal(0, 0.5, (4, 3)).astype(np.float32),
                           rng.normal(0, 0.1, 3).astype(np.float32)])
        x = tf.constant(rng.normal(size=(5, 4)), tf.float32)
        y = tf.constant(rng.normal(size=(5, 3)), tf.float32)
        return layer.trainable_variables, lambda: tf.reduce_mean(tf.square(layer(x) - y))
    if kind == "embedding":
        layer = tf_keras.layers.Embedding(6, 3, name="embedding")
        layer.build((None, 2))
        layer.set_weights([rng.normal(0, 0.5, (6, 3)).astype(np.float32)])
        ids = tf.constant(EMBEDDING_IDS)
        target = tf.constant(rng.normal(size=(2, 3)), tf.float32)
        return layer.trainable_variables, lambda: tf.reduce_mean(
            tf.square(tf.reduce_sum(layer(ids), axis=1) - target))
    raise ValueError(f"model={kind!r} refused: one of {', '.join(MODELS)}")


# ----- the record of one step ---------------------------------------------------------------
@dataclass
class StepRecord:
    """Everything one `apply_gradients` call did. Arrays are NumPy copies (float32).

    Attributes:
        step: 1-based step t of this update.
        calls: the recorded call order (`CallRecorder.table()`).
        slot_names_before, slot_names_after: `get_slot_names()` around the call (Lookahead:
            its own then its inner optimizer's).
        hypers_before, hypers_after: `hyper_table` around the call.
        apply_state: coefficient name -> value, per "(device, dtype)" key, from `_prepare_local`.
        apply_args: per variable, what `_resource_apply_*` received (argument summaries).
        grads: variable name -> the gradient (dense array; for IndexedSlices the summed rows
            scattered into a zero array) ; grad_rows: variable name -> sorted unique indices or None.
        var_before, var_after: variable name -> array.
        slots_before, slots_after: variable name -> slot name -> array.
        loss_before, loss_after: the model's loss around the call.
    """

    step: int
    calls: pd.DataFrame
    slot_names_before: list[str]
    slot_names_after: list[str]
    hypers_before: pd.DataFrame
    hypers_after: pd.DataFrame
    apply_state: dict[str, dict[str, float]]
    apply_args: dict[str, dict[str, str]]
    grads: dict[str, np.ndarray]
    grad_rows: dict[str, list[int] | None]
    var_before: dict[str, np.ndarray]
    var_after: dict[str, np.ndarray]
    slots_before: dict[str, dict[str, np.ndarray]]
    slots_after: dict[str, dict[str, np.ndarray]]
    loss_before: float
    loss_after: float
    notes: list[str] = field(default_factory=list)

    def touched_rows(self, var_name: str) -> pd.DataFrame:
        """Per row of the variable: whether the variable and each slot changed in this step."""
        before, after = self.var_before[var_name], self.var_after[var_name]
        rows = {"row": np.arange(before.shape[0]),
                "in gradient": [r in (self.grad_rows[var_name] or range(before.shape[0]))
                                for r in range(before.shape[0])],
                "variable changed": _changed_rows(before, after)}
        for slot, value in self.slots_after[var_name].items():
            old = self.slots_before[var_name].get(slot, np.zeros_like(value))
            rows[f"{slot} changed"] = _changed_rows(old, value)
        return pd.DataFrame(rows)


def _changed_rows(before: np.ndarray, after: np.ndarray) -> list[bool]:
    diff = np.abs(np.asarray(after) - np.asarray(before)).reshape(before.shape[0], -1)
    return (diff.max(axis=1) > 0).tolist()


def hyper_table(optimizer: LegacyOptimizer, dtype: tf.DType = tf.float32) -> pd.DataFrame:
    """One row per `_hyper` entry: what is stored, `_get_hyper(name, dtype)`, serialized value.

    Columns: name, stored_type (`float` before `_create_hypers`, `ResourceVariable` after),
    variable_name, variable_dtype, aggregation (the variable's `tf.VariableAggregation` name:
    `ONLY_FIRST_REPLICA` for the ones `_create_hypers` makes), stored_value, get_hyper (value of
    the cast tensor),
    get_hyper_dtype, serialized (`_serialize_hyperparameter(name)`), serialized_type.
    """
    rows = []
    for name, stored in optimizer._hyper.items():
        is_var = isinstance(stored, tf.Variable)
        tensor = optimizer._get_hyper(name, dtype) if is_var else None
        serialized = optimizer._serialize_hyperparameter(name)
        rows.append({
            "name": name,
            "stored_type": type(stored).__name__,
            "variable_name": stored.name if is_var else "",
            "variable_dtype": stored.dtype.name if is_var else "",
            "aggregation": stored.aggregation.name if is_var else "",
            "stored_value": float(stored.numpy()) if is_var else float(stored),
            "get_hyper": float(tensor.numpy()) if tensor is not None else float("nan"),
            "get_hyper_dtype": tensor.dtype.name if tensor is not None else "(no variable yet)",
            "serialized": float(serialized),
            "serialized_type": type(serialized).__name__,
        })
    return pd.DataFrame(rows)


def method_sources(optimizer: LegacyOptimizer) -> pd.DataFrame:
    """For each of `SOURCE_METHODS`: the class that defines it (first in the MRO) and its source;
    first a row "SLOTS": the optimizer's slot record (the `NamedTuple` whose fields are the
    `add_slot` names, each with its shape and dtype), when it declares one.

    Columns: method, defined_in (class name), module, overridden (not OptimizerV2's own), source.
    """
    rows = []
    record = getattr(type(optimizer), "SLOTS", None)
    owner = next((c for c in type(optimizer).__mro__ if "SLOTS" in c.__dict__), None)
    if owner is not None and inspect.isclass(record) and hasattr(record, "_fields"):
        try:
            source = inspect.getsource(record)
        except (OSError, TypeError):
            source = "(source not available)"
        rows.append({"method": "SLOTS", "defined_in": owner.__name__, "module": owner.__module__,
                     "overridden": True, "source": source})
    for name in SOURCE_METHODS:
        owner = next((c for c in type(optimizer).__mro__ if name in c.__dict__), None)
        if owner is None:
            continue
        function = owner.__dict__[name]
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            source = "(source not available)"
        rows.append({"method": name, "defined_in": owner.__name__, "module": owner.__module__,
                     "overridden": owner not in LegacyOptimizer.__mro__,
                     "source": source})
    return pd.DataFrame(rows)


# ----- the inspector ------------------------------------------------------------------------
class StepInspector:
    """Steps an instrumented optimizer on a tiny model one eager `apply_gradients` at a time.

    Args:
        optimizer: registry name, or `"lookahead:<name>"` for Lookahead around it.
        model: "dense" or "embedding" (see module docstring).
        hypers, options: passed to `registry.create` (validated there).
        seed: fixes the weights and the batch.

    Raises:
        KeyError, ValueError, InvalidHyperparameter: as `registry.create` / `build_model`.
    """

    def __init__(self, optimizer: str = "adam", model: str = "dense",
                 hypers: dict[str, float] | None = None, options: dict[str, Any] | None = None,
                 seed: int = 0):
        self.name, self.model = optimizer, model
        self.optimizer = build_optimizer(optimizer, hypers, options)
        self.variables, self.loss_fn = build_model(model, seed)
        self.recorder = CallRecorder()
        self.recorder.instrument(self.optimizer, "optimizer")
        if isinstance(self.optimizer, Lookahead):
            self.recorder.instrument(self.optimizer.inner, "inner")
        self._apply_state: dict[str, dict[str, float]] = {}
        self._apply_args: dict[str, dict[str, str]] = {}
        self._seen_slots: set[int] = set()
        self.recorder.on_exit["_prepare_local"] = self._capture_prepare_local
        self.recorder.on_exit["add_slot"] = self._capture_add_slot
        for method in ("_resource_apply_dense", "_resource_apply_sparse"):
            self.recorder.on_exit[method] = functools.partial(self._capture_apply, method)
        self.records: list[StepRecord] = []

    def _capture_add_slot(self, owner, args, kwargs, result, call) -> None:
        created = id(result) not in self._seen_slots
        self._seen_slots.add(id(result))
        call.detail += " -> new slot variable" if created else " -> existing slot returned"

    def _capture_prepare_local(self, owner, args, kwargs, result, call) -> None:
        device, dtype, apply_state = args[:3]
        coeffs = apply_state[(device, dtype)]
        key = f"{owner}: ({device or 'default device'}, {dtype.name})"
        self._apply_state[key] = {k: _scalar(v) for k, v in coeffs.items()}

    def _capture_apply(self, method, owner, args, kwargs, result, call) -> None:
        grad, var = args[0], args[1]
        entry = {"method": method, "grad": _describe(grad), "var": _describe(var)}
        if method == "_resource_apply_sparse":
            entry["indices"] = str(np.asarray(args[2]).tolist())
        positional = 3 if method == "_resource_apply_sparse" else 2
        state = kwargs.get("apply_state", args[positional] if len(args) > positional else None)
        entry["apply_state"] = _describe(state) if state is not None else "None"
        self._apply_args[var.name] = entry

    def slots(self, var: tf.Variable) -> dict[str, np.ndarray]:
        # Lookahead's `get_slot` answers for its inner optimizer's slots too
        return {n: self.optimizer.get_slot(var, n).numpy().copy() for n in slot_names(self.optimizer)}

    def step(self) -> StepRecord:
        """Run one instrumented `apply_gradients` and return (and keep) its record."""
        opt = self.optimizer
        names_before = slot_names(opt)
        hypers_before = hyper_table(opt)  # calls _serialize_hyperparameter: not part of the step
        self.recorder.clear()
        self._apply_state, self._apply_args = {}, {}
        has_slots = bool(names_before)
        var_before = {v.name: v.numpy().copy() for v in self.variables}
        slots_before = {v.name: self.slots(v) for v in self.variables} if has_slots else {
            v.name: {} for v in self.variables}
        with tf.GradientTape() as tape:
            loss = self.loss_fn()
        grads = tape.gradient(loss, self.variables)
        opt.apply_gradients(zip(grads, self.variables))
        calls = self.recorder.table()
        hypers_after = hyper_table(opt)
        grads_np, rows = {}, {}
        for var, grad in zip(self.variables, grads):
            if isinstance(grad, tf.IndexedSlices):
                dense = tf.math.unsorted_segment_sum(grad.values, grad.indices, var.shape[0])
                grads_np[var.name] = dense.numpy()
                rows[var.name] = sorted(set(grad.indices.numpy().tolist()))
            else:
                grads_np[var.name], rows[var.name] = grad.numpy(), None
        record = StepRecord(
            step=int(opt.iterations.numpy()), calls=calls,
            slot_names_before=names_before, slot_names_after=slot_names(opt),
            hypers_before=hypers_before, hypers_after=hypers_after,
            apply_state=self._apply_state, apply_args=self._apply_args,
            grads=grads_np, grad_rows=rows, var_before=var_before,
            var_after={v.name: v.numpy().copy() for v in self.variables},
            slots_before=slots_before, slots_after={v.name: self.slots(v) for v in self.variables},
            loss_before=float(loss.numpy()), loss_after=float(self.loss_fn().numpy()),
        )
        self.records.append(record)
        return record

    def sources(self) -> pd.DataFrame:
        return method_sources(self.optimizer)


def slot_names(optimizer: LegacyOptimizer) -> list[str]:
    """The slots created so far: `get_slot_names()`; for `Lookahead` its own then its inner
    optimizer's (it does not list those in `get_slot_names`, see its docstring)."""
    names = list(optimizer.get_slot_names())
    if isinstance(optimizer, Lookahead):
        names += [n for n in optimizer.inner.get_slot_names() if n not in names]
    return names


def _scalar(value: Any) -> float | str:
    try:
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception:  # noqa: BLE001 - a coefficient we cannot show as a number
        return repr(value)
    return float(array) if array.size == 1 and array.dtype != bool else str(array.tolist())


__all__ = ["CallRecorder", "StepInspector", "StepRecord", "build_model", "build_optimizer",
           "hyper_table", "method_sources", "INSTRUMENTED", "MODELS"]
