"""Shared primitives of the pure update rules.

Every optimizer in this package writes its maths as two pure functions of tensors:

* `coefficients(hypers, step) -> dict[str, Tensor]`: scalars that depend only on the
  hyperparameters and the 1-based step (what `_prepare_local` stores in `apply_state`);
* `update(grad, var, slots, coeffs) -> (new_var, new_slots)`: the new value of one variable and
  of each of its slots.

No fused `tf.raw_ops.ResourceApply*` kernel is used, so both functions can be differentiated with
`tf.GradientTape` and `tf.autodiff.ForwardAccumulator` with respect to the state and every
hyperparameter (the hyper-gradient engine calls the very same functions).

Rules whose new variable is `var - delta` also expose `*_decrement(grad, slots, coeffs)` ->
(delta, new_slots), which the OptimizerV2 adapter subtracts in place; the adapter traces them under
`derivative_free()` (below), since its assignments are never differentiated.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

import tensorflow as tf

Tensor = tf.Tensor
Slots = Mapping[str, tf.Tensor]


_TRACING = threading.local()  # per thread: Keras traces `apply_gradients` in the caller's thread


@contextlib.contextmanager
def derivative_free() -> Iterator[None]:
    """Trace the rules for a path that is never differentiated: `safe_sqrt` becomes one `Sqrt`.

    `RuleOptimizer._resource_apply_dense/_sparse` run the rule between a variable read and an
    assignment, and assignments carry no gradient or tangent, so nothing can differentiate that
    path; the hyper-gradient engine calls `coefficients`/`update` directly, outside this context.
    Within it, `safe_sqrt(x)` is `tf.sqrt(x)`: the same value for every x >= 0 (and NaN for
    x < 0, as the fused Keras kernels give, unless `clamp_negative`), one kernel instead of
    four.

    The flag is read while a graph is being traced (or an eager op runs), so it only affects
    code called inside the `with` block, in this thread; it nests.
    """
    previous = getattr(_TRACING, "derivative_free", False)
    _TRACING.derivative_free = True
    try:
        yield
    finally:
        _TRACING.derivative_free = previous


def safe_sqrt(x: tf.Tensor, clamp_negative: bool = False) -> tf.Tensor:
    """Element-wise square root whose derivative at 0 is 0 instead of infinity.

    `tf.sqrt` has derivative 1 / (2 sqrt(x)), infinite at x = 0: a parameter whose gradient is
    always 0 (digits has always-blank pixels) then gets `0 * inf = NaN` tangents in forward mode
    within a few steps. For real dtypes the double-`tf.where` trick keeps the forward value
    bit-identical to `tf.sqrt` (sqrt(0) = 0) while routing the derivative of the x <= 0 branch
    through a constant; it is differentiable again (forward-over-reverse) and finite there too.
    For x < 0 it returns 0.

    Inside `derivative_free()` (the OptimizerV2 apply path, which nothing differentiates) it is
    plain `tf.sqrt`: one kernel instead of four (Greater, Select, Sqrt, Select), the same value
    for x >= 0; NaN for x < 0 (as Keras's kernels) unless `clamp_negative`. Measured cost of
    the four-op form: 3 of Adam's 15 element-wise kernels per variable
    (tests/test_op_counts.py; timings in bench/bench_optimizers.py).

    Why not a one-op `tf.custom_gradient` square root (faster to run): inside a
    `tf.function`, `tf.autodiff.ForwardAccumulator` does not use a custom gradient (TF 2.21):
    the tangent goes through the inner `Sqrt` (infinite at 0) or, behind a `stop_gradient`, is
    0. The hyper-gradient engine's forward mode runs traced, so its tangents would be wrong
    (tests/test_hypergradients.py catches it: forward != reverse). Hence two forms, chosen by
    who will differentiate the result: this four-op one for the pure rules, one `Sqrt` on the
    apply path.

    Complex dtypes (complex64/complex128: SGD, RMSprop, Adagrad, as Keras) get plain `tf.sqrt`
    (principal root; holomorphic derivative, infinite at 0 as in Keras): `x > 0` has no meaning
    for complex numbers, and the hyper-gradient engine works in real dtypes only.

    Args:
        x: tensor of any shape, float (expected >= 0) or complex dtype.
        clamp_negative: inside `derivative_free()`, take the root of max(x, 0) (one more
            kernel) so that a slightly negative x gives 0, as the four-op form does, not NaN.
            For radicands that rounding can push below 0: centered RMSprop's rms - mg**2 (for
            a constant gradient it is (1 - rho**t) rho**t g**2, below float32 resolution
            after ~150 steps). Ignored outside `derivative_free()` and for complex dtypes.

    Returns:
        Tensor of the same shape and dtype.
    """
    if x.dtype.is_complex:
        return tf.sqrt(x)
    if getattr(_TRACING, "derivative_free", False):
        return tf.sqrt(tf.maximum(x, tf.zeros((), x.dtype))) if clamp_negative else tf.sqrt(x)
    positive = x > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))), tf.zeros_like(x))


def keras_epsilon(epsilon):
    """Keras's `epsilon or backend.epsilon()` for a Python number or None: 0 and None mean 1e-7
    (Adam, RMSprop); callables and tensors pass through unchanged."""
    if epsilon is None or (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
                           and epsilon == 0):
        return 1e-7
    return epsilon


def as_step(iterations: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """The 1-based step t of the update about to be applied, as `dtype` (Keras: iterations + 1)."""
    return tf.cast(iterations + 1, dtype)
