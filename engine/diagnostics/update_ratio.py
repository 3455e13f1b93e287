"""Update/weight ratio per variable: ||delta w|| / ||w||.

How big a step is relative to the weights it moves: about 1e-3 is the usual rule of thumb
(Karpathy, CS231n notes, "Neural Networks Part 3", ratio of weights:updates); much larger and
the step overshoots, much smaller and the variable barely learns. Warm-up and schedules move
it; Adam's ratio is nearly independent of the gradient's scale, SGD's is not.

For variable w at 1-based step t: r_t = ||w_{t-1} - w_t|| / ||w_t|| (L2 norms over all
elements). The numerator is the `update` series' norm the recording already computes
(`engine.recording.packed_stats`, slot "update" = var_before - var_after), so the ratio costs
one norm per variable on recorded steps: `WeightNorms`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from engine.compiled import compiled
from engine.models import variable_label


class WeightNorms:
    """A compiled function returning ||w|| of every variable (float64 NumPy [n_variables]).

    Args:
        variables: the trainable variables (their order is the result's).
    """

    def __init__(self, variables: Sequence[tf.Variable]):
        self.variables = list(variables)
        self.labels = [variable_label(v) for v in self.variables]
        self._norms = compiled(lambda: tf.stack(
            [tf.cast(tf.norm(tf.reshape(v, [-1])), tf.float64) for v in self.variables]))

    def __call__(self) -> np.ndarray:
        return self._norms().numpy()


def update_ratios(series: Sequence[tuple[str, str]], stats: np.ndarray, labels: Sequence[str],
                  weight_norms: np.ndarray) -> dict[str, float]:
    """variable label -> ||delta w|| / ||w|| (NaN where ||w|| = 0).

    Args:
        series: `(variable_label, slot)` of the rows of `stats` (`Engine.series`).
        stats: float [n_series, 3] (norm, mean, std) of a recorded step; the `update` rows'
            norm is ||w_before - w_after||.
        labels, weight_norms: variable labels and ||w_after|| (`WeightNorms`), same order.
    """
    norms = dict(zip(labels, np.asarray(weight_norms, dtype=np.float64).tolist()))
    out = {}
    for (variable, slot), row in zip(series, np.asarray(stats).tolist()):
        if slot == "update" and variable in norms:
            weight = norms[variable]
            out[variable] = row[0] / weight if weight > 0 else float("nan")
    return out
