"""Evaluate at the optimizer's evaluation point when it has one.

Schedule-free optimizers (Defazio et al. 2024, arXiv:2405.15682, sec. 2) take gradients at y,
which the model's variables hold, but their answer is the average x: the paper evaluates, and
returns, x. An optimizer that says so has `eval_weights(variables) -> [x per variable]`
(`optimizers.schedule_free.ScheduleFreeAdamW`); the engine's validation then runs on x.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tensorflow as tf

T = TypeVar("T")


def at_eval_point(variables: Sequence[tf.Variable], optimizer: Any,
                  evaluate: Callable[[], T]) -> T:
    """`evaluate()` with every variable set to the optimizer's evaluation point, then restored.

    Without `optimizer.eval_weights` this is `evaluate()`. Otherwise each variable is copied,
    assigned its x, `evaluate()` runs, and the copies are assigned back (bit for bit): inside a
    `tf.function` the reads and assignments of one variable run in program order.

    Args:
        variables: the model's trainable variables.
        optimizer: any optimizer; only its `eval_weights` (if any) is used.
        evaluate: reads the variables (e.g. the validation loss and accuracy).
    """
    eval_weights = getattr(optimizer, "eval_weights", None)
    if eval_weights is None:
        return evaluate()
    saved = [tf.identity(v.read_value()) for v in variables]
    for var, x in zip(variables, eval_weights(list(variables))):
        var.assign(x)
    out = evaluate()
    # a tf.function runs every assignment of the function (automatic control dependencies),
    # after the reads that `evaluate` made, since they touch the same variables
    with tf.control_dependencies(tf.nest.flatten(out)):
        for var, value in zip(variables, saved):
            var.assign(value)
    return out
