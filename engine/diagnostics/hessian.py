"""Hessian-vector products of a model's loss on a fixed batch, forward-over-reverse.

H v = d/de grad L(w + e v) at e = 0: the gradient is taken by a `tf.GradientTape` (reverse
mode) inside a `tf.autodiff.ForwardAccumulator` whose tangent is v (forward mode), the way the
hyper-gradient engine differentiates the update rule (`hypergrad.forward`). One product costs
about one gradient evaluation and a half of extra work (Pearlmutter 1994, "Fast exact
multiplication by the Hessian"), and never forms H.

Vectors are flat float64 NumPy arrays [n_params] (the concatenation of the variables in their
order, each flattened row-major); the product runs in the model's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from engine.compiled import compiled

# loss(labels [b], logits [b, classes]) -> scalar
LossFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


class LossHessian:
    """Products with the Hessian of `loss_fn(y, model(x))` with respect to `variables`.

    Args:
        model: a Keras model mapping x [b, ...] to logits [b, classes] (called with
            `training=False`: no dropout in these models, and the Hessian of the loss the
            optimizer sees).
        variables: the trainable variables (the parameters w), n_params elements in all.
        x, y: the fixed batch (tensors on the run's device).
        loss_fn: mean loss in nats (`engine.train_step.cross_entropy`).

    Attributes:
        size: n_params. dtype: the variables' dtype (float32 or float64).
    """

    def __init__(self, model: Any, variables: Sequence[tf.Variable], x: tf.Tensor, y: tf.Tensor,
                 loss_fn: LossFn):
        self.model, self.variables = model, list(variables)
        self.x, self.y, self.loss_fn = x, y, loss_fn
        self.shapes = [tuple(v.shape) for v in self.variables]
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.size = int(sum(self.sizes))
        self.dtype = self.variables[0].dtype
        self._product = compiled(self._product_body,
                                 input_signature=[tf.TensorSpec([self.size], self.dtype)])

    def _split(self, flat: tf.Tensor) -> list[tf.Tensor]:
        parts = tf.split(flat, self.sizes)
        return [tf.reshape(p, s) for p, s in zip(parts, self.shapes)]

    def _product_body(self, flat: tf.Tensor) -> tf.Tensor:
        tangents = self._split(flat)
        with tf.autodiff.ForwardAccumulator(self.variables, tangents) as accumulator:
            with tf.GradientTape() as tape:  # the variables are read inside both recorders
                loss = self.loss_fn(self.y, self.model(self.x, training=False))
            grads = tape.gradient(loss, self.variables)
        products = accumulator.jvp(grads, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return tf.concat([tf.reshape(p, [-1]) for p in products], axis=0)

    def product(self, vector: np.ndarray) -> np.ndarray:
        """H v: float64 [n_params] for a float [n_params] `vector`."""
        out = self._product(tf.constant(np.asarray(vector), dtype=self.dtype))
        return out.numpy().astype(np.float64)

    def flat_values(self, tensors: Sequence[tf.Tensor]) -> np.ndarray:
        """float64 [n_params]: `tensors` (shaped like the variables, in order) concatenated."""
        return np.concatenate([np.asarray(t, dtype=np.float64).reshape(-1) for t in tensors])
