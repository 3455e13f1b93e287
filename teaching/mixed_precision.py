"""Mixed precision lens: a lab optimizer inside a Keras 2 `LossScaleOptimizer` (LSO).

Under the "mixed_float16" / "mixed_bfloat16" policies a layer keeps float32 variables but
computes in float16 / bfloat16 (TF guide "Mixed precision", sections "Setting the dtype policy"
and "Loss scaling"). The optimizer is wrapped in `tf_keras.mixed_precision.LossScaleOptimizer`,
whose dynamic loss scale (tf_keras `loss_scale_optimizer.py`) starts at 2**15, halves (never
below 1) and SKIPS the update when any gradient is non-finite, and doubles after
`dynamic_growth_steps` (default 2000) consecutive finite steps. A skipped step leaves the weights
and slots untouched but still increments the inner optimizer's `iterations` (`do_not_apply_fn`).

What the wrapper forwards (tf_keras `LossScaleOptimizer`, shown live by `forwarding()`):
`learning_rate` / `lr` are explicit properties forwarding to the inner optimizer;
`__getattribute__` / `__setattr__` forward any other name in the inner `_hyper` (so
`lso.beta_1 = 0.8` calls the inner `_set_hyper`, with the lab's validation); methods are not
forwarded (`lso.hyper_values()` raises AttributeError) and `lso._set_hyper(...)` is the
wrapper's OWN `OptimizerV2._set_hyper`, which raises AttributeError (the wrapper has no `_hyper`;
its `__getattribute__` refuses to forward that name): use `lso.inner_optimizer._set_hyper`.

`teaching.live_mixed_precision.LiveMixedRun` takes such changes between chunks of a run.

The global policy is process-wide, so `policy()` sets it under a lock and restores the previous
policy in `finally`. Imports tf_keras; never Streamlit.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator

import numpy as np
import pandas as pd
import tensorflow as tf
import tf_keras

from optimizers import registry

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
FEATURES, HIDDEN, BATCH = 4, 16, 32
SEED = 0
OVERFLOW_MULTIPLIER = 1e4  # loss x 1e4 x 2**15: finite in float32, overflows float16 (65504)
FINAL_LOSS_TOLERANCE = {"mixed_float16": 1e-2, "mixed_bfloat16": 5e-2}  # relative to float32
_POLICY_LOCK = threading.Lock()
mp = tf_keras.mixed_precision


@contextlib.contextmanager
def policy(name: str) -> Iterator[None]:
    """Set the global Keras 2 dtype policy to `name` for the block; restore the previous one.

    Raises:
        ValueError: `name` is not a Keras dtype policy name.
    """
    from tf_keras.src.mixed_precision import policy as policy_module

    with _POLICY_LOCK:
        # The module's own global (None until set): `global_policy()` reports an unset policy
        # as "float32", and setting "float32" explicitly is NOT the same as unset (layers then
        # cast float64 inputs to float32), so None is restored as None.
        previous = policy_module._global_policy
        mp.set_global_policy(name)
        try:
            yield
        finally:
            mp.set_global_policy(previous)


def data(steps: int, seed: int = SEED) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:
    """Initial weights [kernel1 [4,16], bias1 [16], kernel2 [16,1], bias2 [1]] and `steps`
    batches (x [32, 4], y [32, 1]), float32, y = sin(x @ a)."""
    rng = np.random.default_rng(seed)
    weights = [rng.normal(scale=0.5, size=(FEATURES, HIDDEN)), np.zeros(HIDDEN),
               rng.normal(scale=0.25, size=(HIDDEN, 1)), np.zeros(1)]
    a = rng.normal(size=(FEATURES, 1))
    batches = []
    for _ in range(steps):
        x = rng.normal(size=(BATCH, FEATURES))
        batches.append((x.astype(np.float32), np.sin(x @ a).astype(np.float32)))
    return [w.astype(np.float32) for w in weights], batches


def build_model(weights: list[np.ndarray]) -> tf_keras.Model:
    """Dense(16, tanh) -> Dense(1) -> float32 linear output (the guide's advice: the last
    activation in float32), under the CURRENT global policy, with the given weights."""
    model = tf_keras.Sequential([
        tf_keras.Input(shape=(FEATURES,)),
        tf_keras.layers.Dense(HIDDEN, activation="tanh", name="hidden"),
        tf_keras.layers.Dense(1, name="out"),
        tf_keras.layers.Activation("linear", dtype="float32", name="to_float32"),
    ])
    model.set_weights(weights)
    return model


@dataclass
class Run:
    """One training run. `steps`: one row per step (step, loss [float32, unscaled],
    loss_scale_before/after, finite, skipped, iterations, learning_rate, max_weight_change);
    `variables`: dtype table; `final`: name -> array (weights and inner slots)."""

    policy: str
    steps: pd.DataFrame
    variables: pd.DataFrame
    final: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def final_loss(self) -> float:
        return float(self.steps["loss"].iloc[-1])


def _state(model, inner) -> dict[str, np.ndarray]:
    out = {}
    for var in model.trainable_variables:
        label = var.name.split(":")[0]
        out[label] = np.array(var.numpy())
        for slot in inner.get_slot_names():
            out[f"{label}/{slot}"] = np.array(inner.get_slot(var, slot).numpy())
    return out


def _variables_table(model, inner, x) -> pd.DataFrame:
    hidden_out = model.get_layer("hidden")(tf.constant(x[:1]))
    rows = []
    for layer in model.layers:
        for var in layer.weights:
            rows.append({"variable": var.name.split(":")[0], "kind": "layer weight",
                         "class": type(var).__name__, "dtype": var.dtype.name,
                         "layer compute dtype": layer.compute_dtype})
            for slot in inner.get_slot_names():
                s = inner.get_slot(var, slot)
                rows.append({"variable": f"{var.name.split(':')[0]} / {slot}", "kind": "slot",
                             "class": type(s).__name__, "dtype": s.dtype.name,
                             "layer compute dtype": ""})
    rows.append({"variable": "hidden layer output", "kind": "activation", "class": "Tensor",
                 "dtype": hidden_out.dtype.name, "layer compute dtype": "hidden"})
    return pd.DataFrame(rows)


def train(policy_name: str = "mixed_float16", optimizer: str = "adam",
          hypers: dict[str, float] | None = None, steps: int = 40,
          overflow_at: tuple[int, ...] = (), growth_steps: int | None = None,
          lr_change: tuple[int, float] | None = None, seed: int = SEED) -> Run:
    """Train the small model `steps` steps under `policy_name`.

    Args:
        policy_name: one of `POLICIES`; the mixed ones wrap the optimizer in a dynamic LSO.
        optimizer, hypers: `registry.create(optimizer, hypers)`.
        overflow_at: 1-based steps whose loss is multiplied by `OVERFLOW_MULTIPLIER` (in
            float16 the scaled gradient overflows -> the LSO skips the step).
        growth_steps: LSO `dynamic_growth_steps` (None: the default 2000).
        lr_change: (step, value): before that step `lso.learning_rate = value` (forwarded).
    Raises:
        ValueError: unknown policy; KeyError/InvalidHyperparameter from the registry.
    """
    if policy_name not in POLICIES:
        raise ValueError(f"policy={policy_name!r} refused: one of {', '.join(POLICIES)}")
    weights, batches = data(steps, seed)
    with policy(policy_name):
        model = build_model(weights)
        inner = registry.create(optimizer, hypers or {})
        scaled = policy_name != "float32"
        opt = mp.LossScaleOptimizer(inner, dynamic_growth_steps=growth_steps) if scaled else inner
        variables = model.trainable_variables

        @tf.function
        def step_fn(x, y, multiplier):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                objective = loss * multiplier
                if scaled:
                    objective = opt.get_scaled_loss(objective)
            grads = tape.gradient(objective, variables)
            if scaled:
                grads = opt.get_unscaled_gradients(grads)
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            opt.apply_gradients(zip(grads, variables))
            return loss, finite

        rows = []
        for step, (x, y) in enumerate(batches, 1):
            if lr_change is not None and step == lr_change[0]:
                opt.learning_rate = lr_change[1]  # LSO property -> inner._set_hyper
            before = [v.numpy().copy() for v in variables]
            scale_before = float(opt.loss_scale) if scaled else 1.0
            multiplier = OVERFLOW_MULTIPLIER if step in overflow_at else 1.0
            loss, finite = step_fn(tf.constant(x), tf.constant(y), tf.constant(multiplier))
            scale_after = float(opt.loss_scale) if scaled else 1.0
            change = max(float(np.max(np.abs(v.numpy() - b))) for v, b in zip(variables, before))
            rows.append({"step": step, "loss": float(loss), "loss_scale_before": scale_before,
                         "loss_scale_after": scale_after, "finite": bool(finite),
                         "skipped": scaled and not bool(finite), "iterations": int(inner.iterations.numpy()),
                         "learning_rate": float(inner._get_hyper("learning_rate").numpy()),
                         "max_weight_change": change, "multiplier": multiplier})
        return Run(policy_name, pd.DataFrame(rows), _variables_table(model, inner, batches[0][0]),
                   _state(model, inner))


def compare(optimizer: str = "adam", steps: int = 40) -> pd.DataFrame:
    """Each policy of `POLICIES` on the same seed and batches, no forced overflow: final loss,
    its difference from float32 (absolute and relative), max |w - w_float32| over the weights and
    every slot, and the tolerance the tests use."""
    runs = {p: train(p, optimizer, steps=steps) for p in POLICIES}
    base = runs["float32"]
    rows = []
    for name, run in runs.items():
        diff = max(float(np.max(np.abs(run.final[k] - base.final[k]))) for k in base.final)
        rows.append({"policy": name, "final_loss": run.final_loss,
                     "loss_difference": run.final_loss - base.final_loss,
                     "relative_difference": abs(run.final_loss - base.final_loss)
                     / abs(base.final_loss),
                     "max_state_difference": diff,
                     "tolerance": FINAL_LOSS_TOLERANCE.get(name, 0.0),
                     "skipped_steps": int(run.steps["skipped"].sum())})
    return pd.DataFrame(rows)


def _attempt(expression: str, action, read) -> dict[str, Any]:
    try:
        result = action()
        outcome = repr(result) if result is not None else "ok"
    except Exception as error:  # noqa: BLE001 - the page shows what each expression raises
        outcome = f"{type(error).__name__}: {error}"
    return {"expression": expression, "outcome": outcome[:160], "inner after": read()}


def forwarding(optimizer: str = "adam") -> pd.DataFrame:
    """What a Keras 2 LossScaleOptimizer forwards, tried live on `registry.create(optimizer)`
    after one step (hyperparameters are variables by then). Columns: expression, how the
    wrapper handles it, outcome (value returned or exception), inner hyperparameter values
    after it. Expects an optimizer with `learning_rate` and `beta_1`, `beta_2` (Adam family).

    Source: tf_keras/src/mixed_precision/loss_scale_optimizer.py (`__getattribute__`,
    `__setattr__`, `learning_rate` property).
    """
    inner = registry.create(optimizer)
    lso = mp.LossScaleOptimizer(inner)
    var = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        scaled = lso.get_scaled_loss(tf.reduce_sum(var * var))
    lso.apply_gradients(zip(lso.get_unscaled_gradients(tape.gradient(scaled, [var])), [var]))

    def read() -> str:
        return ", ".join(f"{k}={v:.4g}" for k, v in inner.hyper_values().items()
                         if k in ("learning_rate", "beta_1", "beta_2"))

    items = [
        ("lso.learning_rate is inner._hyper['learning_rate']", "explicit property",
         lambda: lso.learning_rate is inner._hyper["learning_rate"]),
        ("float(lso.beta_1)", "__getattribute__ fallback -> inner._get_hyper",
         lambda: round(float(lso.beta_1), 6)),
        ("lso.learning_rate = 0.005", "property setter -> inner.learning_rate (= _set_hyper)",
         lambda: setattr(lso, "learning_rate", 0.005)),
        ("lso.beta_1 = 0.8", "__setattr__: name in inner._hyper -> inner._set_hyper",
         lambda: setattr(lso, "beta_1", 0.8)),
        ("lso.beta_1 = float('nan')", "forwarded, so the lab's validation refuses it",
         lambda: setattr(lso, "beta_1", float("nan"))),
        ("lso._set_hyper('beta_2', 0.5)", "NOT forwarded: OptimizerV2._set_hyper on the wrapper",
         lambda: lso._set_hyper("beta_2", 0.5)),
        ("hasattr(lso, '_hyper')", "the wrapper has no hyperparameters of its own",
         lambda: hasattr(lso, "_hyper")),
        ("lso.inner_optimizer._set_hyper('beta_2', 0.5)", "direct: the inner optimizer",
         lambda: lso.inner_optimizer._set_hyper("beta_2", 0.5)),
        ("lso.hyper_values()", "methods of the lab are not forwarded",
         lambda: lso.hyper_values()),
        ("lso.get_config()['inner_optimizer']['config']['beta_1']", "config nests the inner one",
         lambda: round(lso.get_config()["inner_optimizer"]["config"]["beta_1"], 6)),
        ("lso.initial_scale, lso.dynamic_growth_steps", "the documented defaults",
         lambda: (lso.initial_scale, lso.dynamic_growth_steps)),
    ]
    rows = []
    for expression, how, action in items:
        row = _attempt(expression, action, read)
        rows.append({"expression": row["expression"], "handled by": how,
                     "outcome": row["outcome"], "inner after": row["inner after"]})
    return pd.DataFrame(rows)


__all__ = ["FINAL_LOSS_TOLERANCE", "OVERFLOW_MULTIPLIER", "POLICIES", "Run",
           "compare", "data", "forwarding", "policy", "train"]
