"""Live demonstrations behind the "classic questions" of the Inside-one-step page.

Each function runs real TensorFlow code and returns a small table of what happened, so the page
shows measured behaviour (trace counts, values returned by compiled functions) instead of prose.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import tensorflow as tf
import tf_keras

from optimizers import registry

LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer


class ToyOptimizer(LegacyOptimizer):
    """A toy OptimizerV2: `t_cur` is a plain attribute, `t_hyper` is registered with `_set_hyper`.

    The update is `var -= learning_rate * grad` (the attributes are only read by the demo).
    """

    def __init__(self, name="Toy", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", 0.1)
        self._set_hyper("t_hyper", 0.0)
        self.t_cur = 0.0

    def _resource_apply_dense(self, grad, var, apply_state=None):
        return var.assign_sub(self._get_hyper("learning_rate", var.dtype) * grad)

    def get_config(self):
        config = super().get_config()
        config.update({"learning_rate": self._serialize_hyperparameter("learning_rate"),
                       "t_hyper": self._serialize_hyperparameter("t_hyper")})
        return config


def attribute_vs_set_hyper() -> pd.DataFrame:
    """`self.t_cur = 5` versus `_set_hyper("t_hyper", 5)` seen from compiled functions.

    Three compiled readers are traced once with the value 0, then the value is changed to 5:
      1. a tf.function that reads the plain float `opt.t_cur`: the float was baked into the graph
         as a constant at trace time, so the new value is silently ignored (no retrace);
      2. a tf.function that receives `opt.t_cur` as a Python argument: every new float is a new
         signature, so it retraces (a new graph per value);
      3. a tf.function that reads `opt._get_hyper("t_hyper")`: the hyperparameter is a tf.Variable
         (created by the first `apply_gradients`), `_set_hyper` *assigns* to it: the compiled
         graph reads the new value with no retrace. `opt.t_hyper = 5` does the same, because
         `OptimizerV2.__setattr__` routes a name already in `_hyper` to `_set_hyper`.

    Returns:
        DataFrame: how, value_returned_before, value_returned_after, traces_before, traces_after,
        same_variable (the `_hyper` entry is the same object after the change), verdict.
    """
    opt = ToyOptimizer()
    var = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([0.0]), var)])  # creates the _hyper variables
    traces = {"closure": 0, "argument": 0, "hyper": 0}

    @tf.function
    def read_closure():
        traces["closure"] += 1
        return tf.constant(opt.t_cur, tf.float32) + 0.0

    @tf.function
    def read_argument(value):
        traces["argument"] += 1
        return tf.constant(value, tf.float32) + 0.0

    @tf.function
    def read_hyper():
        traces["hyper"] += 1
        return opt._get_hyper("t_hyper", tf.float32) + 0.0

    rows = []
    before = {"closure": read_closure(), "argument": read_argument(opt.t_cur), "hyper": read_hyper()}
    counts = dict(traces)
    variable = opt._hyper["t_hyper"]
    opt.t_cur = 5.0
    rows.append(("self.t_cur = 5.0, read as a closure", "closure", read_closure()))
    rows.append(("self.t_cur = 5.0, passed as a Python argument", "argument", read_argument(opt.t_cur)))
    opt._set_hyper("t_hyper", 5.0)
    rows.append(('_set_hyper("t_hyper", 5.0)', "hyper", read_hyper()))
    opt.t_hyper = 7.0  # __setattr__ -> _set_hyper
    rows.append(("self.t_hyper = 7.0 (routed to _set_hyper)", "hyper", read_hyper()))
    table = []
    for how, kind, after in rows:
        value_after = float(after.numpy())
        table.append({
            "how": how,
            "value_returned_before": float(before[kind].numpy()),
            "value_returned_after": value_after,
            "traces_before": counts[kind],
            "traces_after": traces[kind],
            "same_variable": opt._hyper["t_hyper"] is variable if kind == "hyper" else None,
        })
        counts[kind] = traces[kind]
    out = pd.DataFrame(table)
    out["verdict"] = [_verdict(r) for r in out.to_dict("records")]
    return out


def _verdict(row: dict) -> str:
    retraced = row["traces_after"] > row["traces_before"]
    seen = row["value_returned_after"] != row["value_returned_before"]
    if not seen:
        return "new value silently ignored (the old constant is still in the graph)"
    if retraced:
        return "new value seen, but only by tracing a new graph"
    return "new value seen with no retrace (variable assigned)"


def epsilon_plain_vs_set_hyper(new_epsilon: float = 1.0) -> pd.DataFrame:
    """Keras' Adam keeps `epsilon` as a plain attribute; the lab's Adam registers it.

    For each optimizer: trace one compiled step with epsilon = 1e-7, change epsilon to
    `new_epsilon` (1.0 makes the step visibly smaller), run the compiled step again, and compare
    the variable's change with an eager step of a fresh optimizer built with `new_epsilon`.

    Returns:
        DataFrame: optimizer, epsilon_in_hyper, how_changed, step_after_change (|delta var|),
        expected_step (fresh optimizer with the new epsilon), retraces_after_change,
        took_effect.
    """
    rows = []
    makers = {
        "tf_keras.optimizers.legacy.Adam": lambda eps: tf_keras.optimizers.legacy.Adam(1e-3, epsilon=eps),
        "optimizers.adam.Adam (lab)": lambda eps: registry.create("adam", {"epsilon": eps}),
    }
    grad = tf.constant([0.01, -0.02])
    for label, make in makers.items():
        opt = make(1e-7)
        var = tf.Variable([1.0, 1.0])
        traces = [0]

        @tf.function
        def step():
            traces[0] += 1
            opt.apply_gradients([(grad, var)])

        step()  # first call: traces (twice: variables are created on the first trace)
        traced = traces[0]
        how = 'opt._set_hyper("epsilon", ...)' if "epsilon" in opt._hyper else "opt.epsilon = ..."
        if "epsilon" in opt._hyper:
            opt._set_hyper("epsilon", new_epsilon)
        else:
            opt.epsilon = new_epsilon
        before = var.numpy().copy()
        step()
        observed = float(np.abs(var.numpy() - before).max())
        reference = _reference_second_step(make, new_epsilon, grad)
        rows.append({
            "optimizer": label, "epsilon_in_hyper": "epsilon" in opt._hyper, "how_changed": how,
            "step_after_change": observed, "expected_step": reference,
            "retraces_after_change": traces[0] - traced,
            "took_effect": bool(np.isclose(observed, reference, rtol=1e-3)),
        })
    return pd.DataFrame(rows)


def _reference_second_step(make, epsilon: float, grad: tf.Tensor) -> float:
    """|delta var| of the second step of the same optimizer run eagerly with `epsilon` throughout
    (the first step used 1e-7 in the demo; its effect on the moments does not depend on epsilon)."""
    opt, var = make(epsilon), tf.Variable([1.0, 1.0])
    opt.apply_gradients([(grad, var)])
    before = var.numpy().copy()
    opt.apply_gradients([(grad, var)])
    return float(np.abs(var.numpy() - before).max())


def public_vs_underscore_names() -> pd.DataFrame:
    """Which method names the base class defines and calls: the underscore ones.

    Returns:
        DataFrame: name, defined_by_OptimizerV2, called_by_apply_gradients.
    """
    called = {"_create_slots", "_prepare_local", "_resource_apply_dense", "_resource_apply_sparse"}
    names = ["create_slots", "_create_slots", "prepare_local", "_prepare_local",
             "resource_apply_dense", "_resource_apply_dense", "resource_apply_sparse",
             "_resource_apply_sparse"]
    return pd.DataFrame({
        "name": names,
        "defined_by_OptimizerV2": [hasattr(LegacyOptimizer, n) for n in names],
        "called_by_apply_gradients": [n in called for n in names],
    })


__all__ = ["ToyOptimizer", "attribute_vs_set_hyper", "epsilon_plain_vs_set_hyper",
           "public_vs_underscore_names"]


def hyper_kinds(make=None) -> pd.DataFrame:
    """What `_set_hyper` stores and `_get_hyper` / `_serialize_hyperparameter` /
    `_decayed_lr` return for each kind of learning rate an OptimizerV2 accepts, from live calls.

    Args:
        make: `learning_rate -> optimizer` (default: `tf_keras.optimizers.legacy.Adam`); the lab's
            own classes accept the same kinds where their constructors do.

    Returns:
        One row per kind (float, tf.Variable, scalar tensor, LearningRateSchedule, callable):
        `stored_before` / `stored_after` (type held in `_hyper` before and after the first
        `apply_gradients`: only a Python number becomes a variable), `get_hyper` (value of
        `_get_hyper("learning_rate", float32)` after one step; a schedule is returned as
        itself), `decayed_lr` (what `_prepare_local` uses at step 2: the schedule evaluated at
        `iterations`), `serialized` (what `get_config` writes: a schedule as its Keras config,
        a callable or tensor as its current value), `aggregation` (a stored variable's
        `tf.VariableAggregation` name, else "").

    `optimizers.hyper_kinds` gives the same facts for every hyperparameter of any optimizer, before
    and after `_create_hypers`, in either dtype (the Inside-one-step section and the run worker).
    """
    make = make or (lambda lr: tf_keras.optimizers.legacy.Adam(learning_rate=lr))
    schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=1, decay_rate=0.5)
    kinds = {
        "float": 0.01,
        "tf.Variable": tf.Variable(0.01),
        "scalar tensor": tf.constant(0.01),
        "LearningRateSchedule": schedule,
        "callable": lambda: 0.01,
    }
    rows = []
    for kind, value in kinds.items():
        opt = make(value)
        before = type(opt._hyper["learning_rate"]).__name__
        var = tf.Variable([1.0, 2.0])
        opt.apply_gradients([(tf.constant([0.1, 0.1]), var)])
        stored = opt._hyper["learning_rate"]
        got = opt._get_hyper("learning_rate", tf.float32)
        # a schedule comes back as itself: only `_decayed_lr` calls it with the step
        got = float(got) if isinstance(got, (tf.Tensor, tf.Variable, float)) else \
            f"the {type(got).__name__} itself"
        serialized = opt._serialize_hyperparameter("learning_rate")
        rows.append({
            "kind": kind, "stored_before": before, "stored_after": type(stored).__name__,
            # how the variable is combined across replicas: ONLY_FIRST_REPLICA when
            # `_create_hypers` made it, the variable's own (NONE by default) when passed in
            "aggregation": stored.aggregation.name if isinstance(stored, tf.Variable) else "",
            "get_hyper": got, "decayed_lr": float(opt._decayed_lr(tf.float32)),
            "serialized": serialized if isinstance(serialized, (int, float)) else
            str(serialized)[:80],
        })
    return pd.DataFrame(rows)
