"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018,
arXiv:1812.06162, eq. 2.9-2.10).

G is the true gradient of the training loss and Sigma the covariance of one example's
gradient. The noise scale predicts the useful batch size: with batch B the steps needed go as
S = S_min (1 + B_noise / B) and the examples as E = E_min (1 + B / B_noise) (eq. 2.11), so
batches well below B_noise buy nearly proportionally fewer steps and batches well above it
mostly waste examples.

Estimated from m per-example gradients g_1..g_m of a fresh random subset (unbiased, the
paper's appendix A.1 two-batch estimator with B_small = 1 and B_big = m):

    tr(Sigma) ~ S = m/(m-1) (mean_i |g_i|^2 - |g_bar|^2)          (the sample variance)
    |G|^2    ~ |g_bar|^2 - S/m                                   (E|g_bar|^2 = |G|^2 + tr/m)

One estimate is noisy; as the paper advises (appendix A.1), numerator and denominator are
averaged separately over the records (exponential moving averages, `NoiseScaleMeter`) before
dividing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from engine.compiled import compiled


EXAMPLES = 64  # m, per-example gradients per estimate
EMA = 0.9  # weight of the past in the running means of tr(Sigma) and |G|^2


def estimates(sum_sq_norms: float, mean_grad_sq_norm: float, m: int) -> tuple[float, float]:
    """(tr(Sigma) estimate, |G|^2 estimate) from sum_i |g_i|^2 and |g_bar|^2 of m >= 2
    per-example gradients (see the module docstring).

    Raises:
        ValueError: m < 2.
    """
    if m < 2:
        raise ValueError(f"m={m} refused: the noise scale needs at least 2 examples")
    trace = m / (m - 1) * (sum_sq_norms / m - mean_grad_sq_norm)
    return trace, mean_grad_sq_norm - trace / m


class PerExampleGradients:
    """Compiled per-example gradient statistics of the cross-entropy (nats) of example i,
    -log softmax(model(x_i))[y_i]: the terms whose mean is the training loss
    (`engine.train_step.cross_entropy`). The m gradients come from one `tape.jacobian`
    (vectorised with pfor): float64 [m, n_params] in memory at once.

    Args:
        model, variables: as `engine.diagnostics.hessian.LossHessian`.
        x_train, y_train: the training set on the device; examples are gathered by index.
        examples: m, the subset size.
    """

    def __init__(self, model: Any, variables: Sequence[tf.Variable], x_train: tf.Tensor,
                 y_train: tf.Tensor, examples: int = EXAMPLES):
        self.model, self.variables = model, list(variables)
        self.x_train, self.y_train, self.examples = x_train, y_train, examples
        self._stats = compiled(self._stats_body,
                               input_signature=[tf.TensorSpec([examples], tf.int32)])

    def _stats_body(self, indices: tf.Tensor) -> tf.Tensor:
        x, y = tf.gather(self.x_train, indices), tf.gather(self.y_train, indices)
        with tf.GradientTape() as tape:
            logits = self.model(x, training=False)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        jacobians = tape.jacobian(losses, self.variables, experimental_use_pfor=True,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
        flat = tf.concat([tf.reshape(tf.cast(j, tf.float64), [self.examples, -1])
                          for j in jacobians], axis=1)  # [m, n_params]
        sum_sq = tf.reduce_sum(tf.square(flat))
        mean_sq = tf.reduce_sum(tf.square(tf.reduce_mean(flat, axis=0)))
        return tf.stack([sum_sq, mean_sq])

    def norms(self, indices: np.ndarray) -> tuple[float, float]:
        """(sum_i |g_i|^2, |g_bar|^2) over the examples `indices` (int [examples])."""
        out = self._stats(tf.constant(np.asarray(indices, dtype=np.int32))).numpy()
        return float(out[0]), float(out[1])


class NoiseScaleMeter:
    """Running means of tr(Sigma) and |G|^2 (bias-corrected EMAs, weight `EMA` for the past)
    and B_simple from them."""

    def __init__(self, ema: float = EMA):
        self.ema, self.count = ema, 0
        self.trace = self.norm_sq = 0.0

    def add(self, trace: float, norm_sq: float) -> float | None:
        """Add one estimate; returns B_simple from the running means (None while |G|^2 <= 0)."""
        self.count += 1
        self.trace = self.ema * self.trace + (1 - self.ema) * trace
        self.norm_sq = self.ema * self.norm_sq + (1 - self.ema) * norm_sq
        correction = 1 - self.ema ** self.count
        trace_mean, norm_mean = self.trace / correction, self.norm_sq / correction
        if not (norm_mean > 0 and math.isfinite(trace_mean)):
            return None
        return trace_mean / norm_mean
