"""The momentum regime of SGD and RMSprop's fused path: Python state, chosen as Keras does.

`tf_keras.optimizers.legacy.SGD` and `RMSprop` decide ONCE, in `__init__`, whether momentum is
on (`momentum` a tensor, a callable or a number > 0): with it they run a momentum kernel
(`ResourceApplyKerasMomentum`, `ResourceApplyRMSProp`); without it, plain gradient descent /
plain RMSprop ops and no momentum slot. The lab's classes keep the momentum slot (so momentum
can be raised live from 0) and make the same choice at every `_set_hyper("momentum", ...)`
(`MomentumRegime`). Without momentum, the fused path neither reads nor writes the slot: it holds
the buffer as it was (zeros if momentum was never on), as if Keras created it when momentum is
turned on. The pure rules (`update`, what the hyper-gradient engine differentiates, and the
apply path with `fused=False`) pick by momentum's VALUE instead and need no regime.

A traced step keeps the regime it was traced with: the choice is a Python value baked into the
trace, exactly like `self.t_cur = 5` in an optimizer written without `_set_hyper`. The change
shows in `trace_signature()`; the lab's run loop then retraces its step (one counted retrace,
`engine.train_step.Engine.retrace`); eager calls follow at once.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def momentum_regime(momentum: Any) -> bool:
    """Keras's test: True (momentum on) for a callable, a tensor / `tf.Variable`, or a number
    whose real part is > 0; False for a number <= 0."""
    if callable(momentum) or tf.is_tensor(momentum) or isinstance(momentum, tf.Variable):
        return True
    return complex(momentum).real > 0


class MomentumRegime:
    """Mixin (before `RuleOptimizer`) of an optimizer with a `momentum` hyperparameter whose
    fused path has a momentum and a plain regime (see the module docstring).

    Attribute: `momentum_on` (bool), the regime of the last `_set_hyper("momentum", ...)`.
    """

    momentum_on = False
    fused: bool  # set by `RuleOptimizer.__init__` (after this mixin in the bases)

    def _set_hyper(self, name, value):
        # `_set_hyper` is the OptimizerV2's (after this mixin in the bases).
        super()._set_hyper(name, value)  # type: ignore[misc]  # a refused value raises first
        if name == "momentum":
            self.momentum_on = momentum_regime(value)

    def fused_regime(self) -> bool | None:
        """The regime the apply path traces: `momentum_on` when `fused`, else None (the rule
        picks by value)."""
        return self.momentum_on if self.fused else None

    def trace_signature(self) -> tuple:
        """`(("momentum_on", bool),)` when `fused` (the regime is Python state a trace bakes
        in), else `()`."""
        return (("momentum_on", self.momentum_on),) if self.fused else ()
