"""`compiled(fn)`: the lab's own step bodies as `tf.function`s traced as written, without
AutoGraph.

AutoGraph rewrites the source of every Python function a traced function calls, the first time
a process traces it (parse, transform, compile: tens of ms per function). Measured here, that
was 1.4 s of the 2.2 s it took a fresh process to build the default Setup's engine, which a
fresh server's first Start waits for. The bodies compiled with this helper hold no Python
control flow on tensors (their branches are explicit `tf.cond`s, their loops run over Python
lists), so AutoGraph had nothing to rewrite in them.

An optimizer's own methods (`_resource_apply_dense` and the rest) are reached through
`OptimizerV2.apply_gradients`, which AutoGraph does not convert in any case: a Python `if` on a
tensor there raises `OperatorNotAllowedInGraphError` with or without it, as in Keras's own
`model.fit`.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import tensorflow as tf


def compiled(python_function: Callable[..., Any], **options: Any) -> Any:
    """`tf.function(python_function, autograph=False, **options)`.

    Raises:
        OperatorNotAllowedInGraphError: at trace time, when the body uses a tensor as a Python
            bool or iterates over one (write `tf.cond` / `tf.while_loop` instead).
    """
    return tf.function(python_function, autograph=False, **options)


__all__ = ["compiled"]
