"""What `_set_hyper` stored, what `_get_hyper` returns, what `_serialize_hyperparameter` wrote:
one JSON-able row per hyperparameter, from live calls on a real Keras 2 `OptimizerV2`.

How the base class (`tf_keras/src/optimizers/legacy/optimizer_v2.py`, TF 2.21) treats a value:

* `_set_hyper(name, value)` puts `value` in `self._hyper[name]` as it is (a Python number, a
  zero-argument callable, a `tf.Tensor`, a `tf.Variable`, a `LearningRateSchedule`). Once the
  name exists, a new value *replaces* the stored object, except when the stored object is a
  variable: then the new value is *assigned* to it (`backend.set_value`), even if it is a
  variable you passed in yourself.
* `_create_hypers` (run by `_create_all_weights` inside the first `apply_gradients`, or by the
  first `_get_hyper` call) turns every stored Python number into a scalar float32
  `tf.Variable` made by `add_weight(..., aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)`:
  under a distribution strategy every replica applies the same update, so the value of the
  first replica is kept instead of summing or averaging replicas' writes. Tensors, variables,
  callables and schedules are left as they are.
* `_get_hyper(name, dtype)` calls a callable, then casts to `dtype` (a float32 variable read as
  float64 is the float32 number widened, e.g. 0.001 -> 0.0010000000474974513; a callable's
  Python float goes the same way, because `tf.cast` first converts it to a float32 tensor).
  Asked for the dtype a variable already has, `tf.cast` returns the variable itself. A schedule is
  returned as the schedule object: only `_decayed_lr(dtype)` evaluates it at `iterations`.
* `_serialize_hyperparameter(name)` (what `get_config` writes): a schedule -> its Keras dict
  `{"class_name", "config", ...}`; a callable -> its value now; a tensor or variable -> its
  NumPy value; a number -> itself.

A plain attribute (`self.t_cur = 5`) is none of these: it is not in `_hyper`, `_get_hyper`
raises `KeyError`, `get_config` does not write it, and a `tf.function` bakes its value in as a
constant at trace time (`teaching.demos.attribute_vs_set_hyper` measures that).

It lives in `optimizers/` (imports only TensorFlow, tf_keras and its siblings; no Streamlit) so a
run worker can call `hyper_kinds_table` as is, and the Inside one step page shows the same rows.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf
import tf_keras

from tf_keras.optimizers.legacy import Optimizer as LegacyOptimizer
from tf_keras.optimizers.schedules import LearningRateSchedule

# The kinds a hyperparameter value can have, as `kind_of` names them.
KINDS = ("float", "tf.Variable", "callable", "LearningRateSchedule", "tensor")
PLAIN_ATTRIBUTE = "plain attribute"
ASSIGNS = "assigns (same variable: no retrace)"
REPLACES = "replaces the object"
NOT_CREATED = "not called yet: it would run _create_hypers"
DTYPES = {"float32": tf.float32, "float64": tf.float64}


def kind_of(stored: Any) -> str:
    """The kind of a `_hyper` entry, in the order `_get_hyper` tests them.

    Returns one of `KINDS` ("float" covers every Python / NumPy real number).

    Raises:
        TypeError: `stored` is none of the kinds `_set_hyper` accepts.
    """
    if isinstance(stored, LearningRateSchedule):
        return "LearningRateSchedule"
    if isinstance(stored, tf.Variable):
        return "tf.Variable"
    if tf.is_tensor(stored):
        return "tensor"
    if callable(stored):
        return "callable"
    if isinstance(stored, (int, float, np.number)) and not isinstance(stored, bool):
        return "float"
    raise TypeError(f"_hyper value {stored!r} is not a number, callable, tensor, variable or "
                    "LearningRateSchedule")


def make_value(kind: str, number: float, name: str = "hyper") -> Any:
    """A hyperparameter value of `kind` worth `number` now (what a user would pass).

    "tf.Variable": a non-trainable float32 variable `user_<name>`; "tensor": a float32 scalar
    constant; "callable": `lambda: number`; "LearningRateSchedule": `ExponentialDecay(number,
    decay_steps=1, decay_rate=0.5)` (halves every step, so the evaluation at `iterations` is
    visible: `number * 0.5 ** iterations`).

    Raises:
        ValueError: `kind` is not one of `KINDS`.
    """
    if kind == "float":
        return float(number)
    if kind == "tf.Variable":
        return tf.Variable(number, dtype=tf.float32, trainable=False, name=f"user_{name}")
    if kind == "tensor":
        return tf.constant(number, tf.float32)
    if kind == "callable":
        return lambda: number
    if kind == "LearningRateSchedule":
        return tf_keras.optimizers.schedules.ExponentialDecay(number, decay_steps=1, decay_rate=0.5)
    raise ValueError(f"kind={kind!r} refused: one of {', '.join(KINDS)}")


def as_dtype(dtype: Any) -> tf.DType:
    """`tf.float32`/`tf.float64` from a `tf.DType` or its name.

    Raises:
        ValueError: any other dtype (the lab's models are float32 or float64).
    """
    name = dtype.name if isinstance(dtype, tf.DType) else str(dtype)
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r} refused: one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _number(value: Any) -> float:
    return float(np.asarray(value.numpy() if hasattr(value, "numpy") else value))


def jsonable(value: Any) -> Any:
    """`value` with NumPy scalars and arrays turned into Python numbers / lists (dicts and lists
    walked); anything else that JSON cannot hold becomes its `repr`."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return jsonable(np.asarray(value).tolist())
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return repr(value)


def describe_stored(stored: Any) -> str:
    """One line saying what a `_hyper` entry is, e.g. `ResourceVariable 'learning_rate:0'
    float32 = 0.001` (numbers to 6 significant digits; `hyper_row` has the exact values)."""
    kind = kind_of(stored)
    if kind == "tf.Variable":
        return f"{type(stored).__name__} '{stored.name}' {stored.dtype.name} = {_number(stored):.6g}"
    if kind == "tensor":
        return f"{type(stored).__name__} {stored.dtype.name} = {_number(stored):.6g}"
    if kind == "LearningRateSchedule":
        return f"{type(stored).__name__} object"
    if kind == "callable":
        return f"callable {getattr(stored, '__name__', type(stored).__name__)}"
    return f"{type(stored).__name__} {stored!r}"


def hyper_row(optimizer: LegacyOptimizer, name: str, dtype: Any = tf.float32,
              owner: str = "optimizer") -> dict[str, Any]:
    """One hyperparameter of `optimizer` seen through the base class's own methods.

    Args:
        optimizer: a Keras 2 `OptimizerV2` (stock or the lab's); not modified: `_get_hyper` and
            `_decayed_lr` are only called once the hyperparameters exist (`_hypers_created`),
            because a first call would create them.
        name: a key of `optimizer._hyper`.
        dtype: `tf.float32` / `tf.float64` (or its name): the dtype asked of `_get_hyper`.
        owner: label of the optimizer in the table ("optimizer", or "inner" for a wrapper's).

    Returns:
        A JSON-able dict: owner, name, kind (one of `KINDS`), stored (`describe_stored`),
        stored_type (class name), stored_dtype (variable / tensor dtype or None), aggregation
        (a variable's `VariableAggregation` name or None), hypers_created (bool), get_hyper_type,
        get_hyper_dtype, get_hyper_value (float, or None for a schedule / before creation),
        decayed_lr (learning_rate only: `_decayed_lr(dtype)` as a float, else None), iterations
        (int, the step `_decayed_lr` used), serialized (`_serialize_hyperparameter(name)`: a
        float or a schedule's dict), serialized_type (class of what it returned), set_hyper_now
        (what `_set_hyper(name, number)` would do now: `ASSIGNS` or `REPLACES`), note.

    Raises:
        KeyError: `name` not in `optimizer._hyper`.
        ValueError: a dtype other than float32 / float64.
    """
    dtype = as_dtype(dtype)
    stored = optimizer._hyper[name]
    kind = kind_of(stored)
    is_tensor = kind in ("tf.Variable", "tensor")
    created = bool(optimizer._hypers_created)
    serialized = optimizer._serialize_hyperparameter(name)  # never creates anything
    row: dict[str, Any] = {
        "owner": owner, "name": name, "kind": kind, "stored": describe_stored(stored),
        "stored_type": type(stored).__name__,
        "stored_dtype": stored.dtype.name if is_tensor else None,
        "aggregation": stored.aggregation.name if kind == "tf.Variable" else None,
        "hypers_created": created,
        "get_hyper_type": None, "get_hyper_dtype": None, "get_hyper_value": None,
        "decayed_lr": None, "iterations": None,
        "serialized": jsonable(serialized),
        "serialized_type": type(serialized).__name__,
        "set_hyper_now": ASSIGNS if kind == "tf.Variable" else REPLACES,
        "note": "",
    }
    if not created:
        row["get_hyper_type"] = NOT_CREATED
        return row
    got = optimizer._get_hyper(name, dtype)
    if isinstance(got, LearningRateSchedule):
        row["get_hyper_type"] = f"the {type(got).__name__} itself"
    else:
        row.update(get_hyper_type=type(got).__name__, get_hyper_dtype=got.dtype.name,
                   get_hyper_value=_number(got))
    if name == "learning_rate":
        row["decayed_lr"] = _number(optimizer._decayed_lr(dtype))
        row["iterations"] = int(optimizer.iterations.numpy())
    if kind == "LearningRateSchedule":
        row["note"] = "_decayed_lr evaluates the schedule at iterations"
    elif kind == "callable":
        row["note"] = "called again at every _get_hyper (inside a traced step: at trace time)"
    elif kind == "float":
        row["note"] = "still a Python number after _create_hypers: not expected"
    elif isinstance(got, tf.Variable):
        row["note"] = "tf.cast to the variable's own dtype returns the variable itself"
    return row


def _owners(optimizer: LegacyOptimizer) -> list[tuple[str, LegacyOptimizer, list[str]]]:
    """(label, optimizer, the `_hyper` names read from it): the optimizer's own, then a
    wrapper's inner optimizer's names the wrapper does not register itself (Lookahead reads the
    inner `learning_rate`; GradientAccumulation copies every inner one into its own `_hyper` and
    never reads the inner's again, so those are not listed twice)."""
    owners = [("optimizer", optimizer, list(optimizer._hyper))]
    inner = getattr(optimizer, "inner", None)  # a wrapper's inner optimizer (Lookahead, ...)
    if isinstance(inner, LegacyOptimizer):
        owners.append(("inner", inner, [n for n in inner._hyper if n not in optimizer._hyper]))
    return owners


def hyper_kinds_table(optimizer: LegacyOptimizer, dtype: Any = tf.float32) -> list[dict]:
    """`hyper_row` for every `_hyper` entry of `optimizer` (then of its `inner` optimizer, for a
    wrapper), in `_hyper` order. JSON-able: a run worker stores it as is.

    Creates nothing: before `_create_hypers` the `_get_hyper` columns say so (`NOT_CREATED`).

    Raises:
        ValueError: a dtype other than float32 / float64.
    """
    return [hyper_row(opt, name, dtype, owner)
            for owner, opt, names in _owners(optimizer) for name in names]


def plain_attribute_row(optimizer: LegacyOptimizer, attribute: str = "t_cur",
                        value: float = 5.0) -> dict[str, Any]:
    """`setattr(optimizer, attribute, value)` for a name not in `_hyper` (the `self.t_cur = 5`
    mistake), then the same live calls as `hyper_row`, with the errors they raise.

    Returns:
        A dict with the keys of `hyper_row`; `kind` is `PLAIN_ATTRIBUTE`, `get_hyper_type` the
        error `_get_hyper` raised, `serialized` the error of `_serialize_hyperparameter`.
        `in_get_config` says whether `get_config()` wrote the name.

    Raises:
        ValueError: `attribute` is already a hyperparameter (then it would be `_set_hyper`).
    """
    if attribute in optimizer._hyper:
        raise ValueError(f"attribute={attribute!r} refused: it is in _hyper, so setting it calls "
                         "_set_hyper")
    setattr(optimizer, attribute, value)
    row: dict[str, Any] = {}
    row.update(owner="optimizer", name=attribute, kind=PLAIN_ATTRIBUTE,
               stored=f"{type(value).__name__} {value!r} (not in _hyper)",
               stored_type=type(value).__name__, stored_dtype=None, aggregation=None,
               hypers_created=bool(optimizer._hypers_created), get_hyper_dtype=None,
               get_hyper_value=None, decayed_lr=None, iterations=None,
               set_hyper_now="Keras: registers a new entry; the lab: KeyError (undeclared)",
               note="a tf.function bakes the value in at trace time")
    for key, call in (("get_hyper_type", lambda: optimizer._get_hyper(attribute, tf.float32)),
                      ("serialized", lambda: optimizer._serialize_hyperparameter(attribute))):
        try:
            call()
            row[key] = "returned a value"
        except KeyError as error:
            row[key] = f"KeyError {error}"
    row["serialized_type"] = None
    row["in_get_config"] = attribute in optimizer.get_config()
    return row


def set_kinds(optimizer: LegacyOptimizer, kinds: Mapping[str, str]) -> None:
    """Replace hyperparameters by a value of the chosen kind worth their current number.

    Args:
        optimizer: a fresh optimizer (before its first step: its `_hyper` entries are numbers);
            names of its wrapped `inner` optimizer are set there.
        kinds: hyperparameter name -> one of `KINDS` ("float" keeps the number).

    Raises:
        KeyError: a name that neither the optimizer nor its inner optimizer has.
        ValueError: an unknown kind, or the hyperparameters already exist (after a step a
            number would be assigned to the variable, not replaced).
        InvalidHyperparameter: the lab's optimizers refuse a schedule for anything but
            `learning_rate` (`HyperSpec.library_check`).
    """
    owners = {name: opt for _, opt, names in _owners(optimizer) for name in names}
    for name, kind in kinds.items():
        if name not in owners:
            raise KeyError(f"hyperparameter {name!r} refused: known {', '.join(owners)}")
        owner = owners[name]
        if owner._hypers_created:
            raise ValueError("set_kinds needs an optimizer before its first step")
        number = _number(owner._hyper[name])
        owner._set_hyper(name, make_value(kind, number, name))


def allowed_kinds(make: Callable[[], LegacyOptimizer]) -> dict[str, list[str]]:
    """For every hyperparameter of a fresh `make()`: the `KINDS` its `_set_hyper` accepts,
    found by trying each kind on a new optimizer (so nothing is left half-set).

    Stock Keras accepts every kind for every name; the lab's optimizers refuse a schedule except
    for `learning_rate`, and wrappers' own settings (Lookahead's `sync_period`) take numbers only.

    Returns:
        name -> accepted kinds, in `KINDS` order ("float" always first); owner order as
        `hyper_kinds_table`.
    """
    names = [n for _, _, names in _owners(make()) for n in names]
    out: dict[str, list[str]] = {}
    for name in names:
        out[name] = []
        for kind in KINDS:
            try:
                set_kinds(make(), {name: kind})
            except (ValueError, TypeError):  # InvalidHyperparameter is a ValueError
                continue
            out[name].append(kind)
    return out


def walkthrough(optimizer: LegacyOptimizer, dtype: Any = "float32") -> list[dict]:
    """The table before and after the hyperparameters are created, from live calls.

    Rows of `hyper_kinds_table` with a `phase` column: "1 after __init__" (what `_set_hyper`
    stored; nothing created), "2 after apply_gradients #1" (`_create_hypers` ran; iterations 1),
    then one row "2 after apply_gradients #1" for `self.t_cur = 5` (`plain_attribute_row`).
    The step updates a throwaway variable [2] of `dtype` with gradient [0.1, -0.2].

    Raises:
        ValueError: a dtype other than float32 / float64.
    """
    dtype = as_dtype(dtype)
    rows = [{"phase": "1 after __init__", **r} for r in hyper_kinds_table(optimizer, dtype)]
    var = tf.Variable([1.0, -2.0], dtype=dtype, name="w")
    optimizer.apply_gradients([(tf.constant([0.1, -0.2], dtype), var)])
    after = "2 after apply_gradients #1"
    rows += [{"phase": after, **r} for r in hyper_kinds_table(optimizer, dtype)]
    rows.append({"phase": after, **plain_attribute_row(optimizer)})
    return rows


__all__ = ["KINDS", "ASSIGNS", "REPLACES", "NOT_CREATED", "PLAIN_ATTRIBUTE", "describe_stored",
           "hyper_kinds_table", "hyper_row", "jsonable", "kind_of", "make_value",
           "plain_attribute_row", "set_kinds", "allowed_kinds", "walkthrough"]
