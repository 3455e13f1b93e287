"""Live changes through the LossScaleOptimizer: a mixed-precision run advanced in chunks.

`LiveMixedRun` trains in chunks and takes hyperparameter changes between chunks, both ways a
user may reach the inner optimizer through a Keras 2 `LossScaleOptimizer` (`WAYS`: the
wrapper's attribute forwarding, or `lso.inner_optimizer._set_hyper`), recording the value the
inner optimizer READ inside the traced step and the step function's tracing count (1: an
assignment to a hyperparameter variable does not retrace). See `teaching.mixed_precision` for
what the wrapper forwards and how the loss scale moves. Imports tf_keras; never Streamlit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf
import tf_keras

from optimizers import registry
from teaching.mixed_precision import POLICIES, SEED, _state, build_model, data, policy


WAYS = {  # how a live change reaches the inner optimizer (the page offers both)
    "lso.<name> = value": "wrapper attribute: the `learning_rate` property, or `__setattr__` "
                          "forwarding a name of `inner._hyper`; both call `inner._set_hyper`",
    "lso.inner_optimizer._set_hyper(name, value)": "direct call on the inner optimizer "
                                                   "(`lso._set_hyper` is NOT forwarded)",
}


class LiveMixedRun:
    """A mixed-precision run advanced in chunks, whose hyperparameters are changed between
    chunks THROUGH the LossScaleOptimizer, with one traced step function for its whole life.

    The inner optimizer's hyperparameter variables are created before the first trace
    (`_create_all_weights`), so the traced step reads them as variables: a `_set_hyper` between
    steps is an assignment, the next step uses the new value, and nothing retraces
    (`tracing_count` stays 1). Each step records the values the inner optimizer READ inside the
    traced step (`_decayed_lr(float32)` and `_get_hyper`), not what the caller believes it set.

    Args:
        policy_name: one of `POLICIES`; mixed policies wrap the optimizer in a dynamic LSO.
        optimizer, hypers: `registry.create(optimizer, hypers)`.
        max_steps: batches prepared (x [32, 4], y [32, 1] float32); `advance` stops there.
        seed: data and initial weights (`data`).

    Raises:
        ValueError: unknown policy or `max_steps` < 1; KeyError/InvalidHyperparameter from the
            registry.
    """

    def __init__(self, policy_name: str = "mixed_float16", optimizer: str = "adam",
                 hypers: dict[str, float] | None = None, max_steps: int = 200, seed: int = SEED):
        if policy_name not in POLICIES:
            raise ValueError(f"policy={policy_name!r} refused: one of {', '.join(POLICIES)}")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} refused: at least 1")
        self.policy_name, self.optimizer_name = policy_name, optimizer
        weights, self._batches = data(max_steps, seed)
        with policy(policy_name):  # layers fix their compute dtype when built
            self.model = build_model(weights)
        self.inner = registry.create(optimizer, hypers or {})
        self.scaled = policy_name != "float32"
        self.opt = tf_keras.mixed_precision.LossScaleOptimizer(self.inner) if self.scaled else self.inner
        self.variables = self.model.trainable_variables
        # hyperparameters become tf.Variables NOW, so the first trace captures variables, not
        # the Python floats `_hyper` holds until the first apply_gradients
        self.inner._create_all_weights(self.variables)
        self.watched = [n for n in ("learning_rate", "beta_1", "momentum") if n in self.inner._hyper]
        self.rows: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self.last_gradients: list[np.ndarray] = []
        self._step_fn = tf.function(self._step)

    def _step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
            objective = self.opt.get_scaled_loss(loss) if self.scaled else loss
        grads = tape.gradient(objective, self.variables)
        if self.scaled:
            grads = self.opt.get_unscaled_gradients(grads)
        used = {n: (self.inner._decayed_lr(tf.float32) if n == "learning_rate"
                    else self.inner._get_hyper(n, tf.float32)) for n in self.watched}
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        self.opt.apply_gradients(zip(grads, self.variables))
        return loss, finite, used, grads

    @property
    def tracing_count(self) -> int:
        """How many times the step function was traced (1 after the first step, if no
        change retraced it)."""
        return self._step_fn.experimental_get_tracing_count()

    @property
    def step(self) -> int:
        """Steps taken so far (skipped ones included)."""
        return len(self.rows)

    def set_hyper(self, name: str, value: float, way: str = "lso.<name> = value") -> None:
        """Change hyperparameter `name` of the inner optimizer through the wrapper, by `way`
        (a key of `WAYS`); it takes effect at the next step.

        Raises:
            ValueError: unknown `way`.
            AttributeError: `lso.<name> = value` with a name that is not in the inner
                `_hyper` (the wrapper would silently set an attribute on itself instead).
            InvalidHyperparameter: `value` outside the hyperparameter's UI range
                (`HyperSpec.validate`, e.g. beta_1 in [0, 1)) or refused by `_set_hyper`.
            KeyError: from the inner `_set_hyper` (unknown name, direct way).
        """
        if way not in WAYS:
            raise ValueError(f"way={way!r} refused: one of {', '.join(WAYS)}")
        if name in self.inner._hyper:  # the UI range (the registry's check), not just Keras's
            value = self.inner.spec(name).validate(value)
        if way.startswith("lso."):
            if name not in self.inner._hyper:  # else setattr would just add a wrapper attribute
                raise AttributeError(f"name={name!r} refused: {type(self.inner).__name__} has "
                                     f"{', '.join(self.inner._hyper)}")
            setattr(self.opt, name, value)
        else:
            inner = self.opt.inner_optimizer if self.scaled else self.inner
            inner._set_hyper(name, value)
        self.changes.append({"before step": self.step + 1, "name": name, "value": value,
                             "way": way})

    def advance(self, steps: int = 1) -> pd.DataFrame:
        """Run up to `steps` steps (fewer at `max_steps`); returns the new rows: step, loss,
        loss_scale (after), skipped, iterations, and `<name> used` for each watched
        hyperparameter (float32, the value read inside the traced step)."""
        start = self.step
        for x, y in self._batches[start:start + max(int(steps), 0)]:
            loss, finite, used, grads = self._step_fn(tf.constant(x), tf.constant(y))
            self.last_gradients = [g.numpy() for g in grads]
            row = {"step": self.step + 1, "loss": float(loss),
                   "loss_scale": float(self.opt.loss_scale) if self.scaled else 1.0,
                   "skipped": self.scaled and not bool(finite),
                   "iterations": int(self.inner.iterations.numpy())}
            row.update({f"{n} used": float(v) for n, v in used.items()})
            row["tracing_count"] = self.tracing_count
            self.rows.append(row)
        return pd.DataFrame(self.rows[start:])

    def trace(self) -> pd.DataFrame:
        """Every step so far (columns as `advance`)."""
        return pd.DataFrame(self.rows)

    def state(self) -> dict[str, np.ndarray]:
        """The float32 master weights and the inner optimizer's slots, by `<layer var>[/slot]`."""
        return _state(self.model, self.inner)


__all__ = ["LiveMixedRun", "WAYS"]
