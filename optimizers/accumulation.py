"""Gradient accumulation: any registered rule applied to the mean of k micro-batch gradients."""

from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer

_BASE_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "decay")


# A run has at most 1,000,000 steps (RunConfig.steps): beyond 10,000 micro-batches per update
# it would make fewer than 100 updates, and the accumulator slot would hold a huge sum.
MAX_ACCUMULATION_STEPS = 10_000


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class GradientAccumulation(RuleOptimizer):
    """Average the gradients of `accumulation_steps` micro-batches, then apply the inner rule.

    Update for each variable `var` with micro-batch gradient `grad` at micro step
    t = iterations + 1, with k = accumulation_steps:

        acc   = grad_accum + grad
        apply = (t mod k == 0)
        if apply:  var, inner_slots = inner.update(acc / k, var, inner_slots)   # at inner step t // k
                   grad_accum = 0
        else:      grad_accum = acc                                            # var, slots unchanged

    With a mean loss, k micro-batches of size B/k accumulated this way give exactly the update of
    one batch of size B. The branch is a `tf.where` on `apply`, so the rule stays pure and
    differentiable (the inner update is computed every micro step and discarded when not applied).

    `iterations` counts micro-batches (`apply_gradients` calls), not applied updates; the inner
    rule's step, used e.g. by Adam's bias correction, is `max(t // k, 1)`, so after j applied
    updates Adam sees t = j exactly as if it ran unwrapped with the big batch.

    Options (plain attributes, listed in OPTIONS, fixed for the optimizer's life):
        inner: registry name of the wrapped rule (default "adam"); decides which slots exist.
        accumulation_steps: int k >= 1 (default 2); decides *when* the update happens, and
            changing it in the middle of a window would divide a partial sum by the wrong k and
            corrupt the average, so it is not a live hyperparameter.

    Hyperparameters: exactly the inner rule's (`hyperparameter_specs()` returns its specs), passed
    as keyword arguments and registered here with `_set_hyper`, so they change live as usual.

    Slots: the inner rule's slots plus `grad_accum` (the running sum of micro-batch gradients).

    Sparse gradients (`tf.IndexedSlices`, e.g. from an `Embedding`) are densified: the averaged
    gradient must reach every row touched in *any* micro-batch of the window, including rows
    absent from the micro-batch that happens to close it, so the lazy row-wise update of
    `RuleOptimizer` would miss them.

    Raises:
        InvalidHyperparameter: an inner hyperparameter outside its range.
        KeyError: `inner` is not a registered name.
        ValueError: `inner="accumulation"` or a non-rule optimizer ("lookahead"), or `accumulation_steps` not an int in
            [1, MAX_ACCUMULATION_STEPS].
        TypeError: an unknown keyword argument.
    """

    OPTIONS = ("inner", "accumulation_steps")

    def __init__(self, inner="adam", accumulation_steps=2, name="GradientAccumulation", **hypers):
        from optimizers import registry  # registry imports this module: no top-level import

        if inner == "accumulation":
            raise ValueError("option inner='accumulation' refused: cannot wrap itself")
        if inner in registry.OPTIMIZERS and not registry.is_rule(inner):
            raise ValueError(f"option inner={inner!r} refused: accumulation wraps a plain rule")
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) or (
            not 1 <= accumulation_steps <= MAX_ACCUMULATION_STEPS
        ):
            raise ValueError(
                f"accumulation_steps={accumulation_steps!r} refused: must be an int in "
                f"[1, {MAX_ACCUMULATION_STEPS}]"
            )
        self._inner = registry.get(inner)()
        base_kwargs = {k: hypers.pop(k) for k in list(hypers) if k in _BASE_KWARGS}
        if "lr" in hypers:
            hypers.setdefault("learning_rate", hypers.pop("lr"))
        super().__init__(name, **base_kwargs)
        self.inner = inner
        self.accumulation_steps = accumulation_steps
        known = {spec.name for spec in self.hyperparameter_specs()}
        unknown = sorted(set(hypers) - known)
        if unknown:
            raise TypeError(
                f"{type(self).__name__}(inner={inner!r}) got unknown arguments {unknown}; "
                f"hyperparameters: {', '.join(sorted(known))}"
            )
        for spec in self.hyperparameter_specs():
            self._set_hyper(spec.name, hypers.get(spec.name, spec.default))

    def hyperparameter_specs(self):
        return self._inner.hyperparameter_specs()

    def _inner_slot_names(self) -> tuple[str, ...]:
        return tuple(self._inner.slot_names_for_rule())

    def _create_slots(self, var_list):
        initializers = getattr(self._inner, "slot_initializers", dict)()
        for name in self._inner_slot_names():
            for var in var_list:
                self.add_slot(var, name, initializer=initializers.get(name, "zeros"))
        for var in var_list:
            self.add_slot(var, "grad_accum")

    def slot_names_for_rule(self):
        return self._inner_slot_names() + ("grad_accum",)

    def coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, Any]:
        """Inner coefficients at inner step max(step // k, 1), plus `apply` (bool) and `k`."""
        k = tf.cast(self.accumulation_steps, step.dtype)
        inner_step = tf.maximum(tf.math.floordiv(step, k), tf.ones_like(step))
        coeffs = dict(self._inner.coefficients(hypers, inner_step))
        coeffs["apply"] = tf.equal(tf.math.floormod(step, k), tf.zeros_like(step))
        coeffs["k"] = k
        return coeffs

    def update(self, grad, var, slots, coeffs):
        apply = coeffs["apply"]
        acc = slots["grad_accum"] + grad
        inner_slots = {name: slots[name] for name in self._inner_slot_names()}
        new_var, new_inner = self._inner.update(acc / coeffs["k"], var, inner_slots, coeffs)
        new_slots = {n: tf.where(apply, new_inner[n], inner_slots[n]) for n in inner_slots}
        new_slots["grad_accum"] = tf.where(apply, tf.zeros_like(acc), acc)
        return tf.where(apply, new_var, var), new_slots

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        """Densify the `IndexedSlices` gradient and run the dense update (see class docstring)."""
        dense = tf.math.unsorted_segment_sum(grad, indices, num_segments=tf.shape(var)[0])
        return self._resource_apply_dense(dense, var, apply_state)
