"""TEMPLATE: write your own optimizer by copying this file (it is a working plugin).

This is SGD with gradient accumulation written from scratch: it answers "how do I split
computing gradients from applying them?". Every `apply_gradients` call adds the gradient to a
slot; every `accumulation_steps`-th call applies SGD to the mean of the collected gradients
and empties the slot. Copy the file next to it in the plugins folder, rename the class and
`REGISTRY_NAME`, change `coefficients` and `update`, and restart the app: the Plugins page runs
the contract check on it; when every item passes, it appears in every optimizer list (and in
`optimizer-lab train --optimizer <REGISTRY_NAME>`).

The lab's optimizers are PURE RULES behind an adapter (`optimizers.base.RuleOptimizer`):
you write the maths as two pure functions of tensors, and the adapter does the Keras 2
OptimizerV2 contract (`_create_slots`, `_prepare_local`, `_resource_apply_dense/_sparse`).
The hyper-gradient engine differentiates the very same two functions.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from optimizers.hyperparams import LEARNING_RATE

MAX_STEPS = 1000


# 1. The slots: one field per `add_slot` name, with its shape and dtype. `RuleOptimizer`
#    creates them in `_create_slots` (inside the FIRST apply_gradients: that is why
#    `get_slot_names()` is empty before the first step).
class AccumulatedSGDSlots(NamedTuple):
    """The slot of one variable."""

    grad_sum: tf.Tensor  # [*var.shape], var.dtype: the sum of the gradients since the last apply


# 2. Register the class so that Keras can save and load models that use it.
@tf_keras.saving.register_keras_serializable(package="OptimizerLabPlugins")
class AccumulatedSGD(RuleOptimizer):
    """SGD on the mean of `accumulation_steps` micro-batch gradients.

    Update for each variable `var` with gradient `grad` at step t = iterations + 1, with
    k = accumulation_steps:

        grad_sum = grad_sum + grad
        if t mod k == 0:  var = var - learning_rate * grad_sum / k;  grad_sum = 0

    With a mean loss, k micro-batches of size B/k give the update of one batch of size B.

    Args:
        learning_rate: float in (0, 10], default 0.01 (a `_set_hyper` hyperparameter: it can
            change during training without a retrace, and it has a hyper-gradient).
        accumulation_steps: int k in [1, 1000], default 2 (an OPTION: a plain attribute fixed
            for the optimizer's life, because it decides *when* an update happens).

    Raises:
        InvalidHyperparameter: learning_rate outside its range.
        ValueError: accumulation_steps not an int in [1, 1000].
    """

    REGISTRY_NAME = "accumulated_sgd"  # the name in the lab's optimizer lists
    HYPERPARAMETERS = (LEARNING_RATE,)  # each `HyperSpec` is the range the UI and checks use
    OPTIONS = ("accumulation_steps",)  # plain settings, written by get_config
    SLOTS = AccumulatedSGDSlots

    # 3. __init__: every numeric hyperparameter goes through `_set_hyper` (NOT `self.x = ...`:
    #    a plain attribute is baked into the compiled step as a constant and changing it later
    #    has no effect; `_set_hyper` makes it a tf.Variable that the step reads).
    def __init__(self, learning_rate=0.01, accumulation_steps=2, name="AccumulatedSGD",
                 **kwargs):
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) \
                or not 1 <= accumulation_steps <= MAX_STEPS:
            raise ValueError(f"accumulation_steps={accumulation_steps!r} refused: must be an "
                             f"int in [1, {MAX_STEPS}]")
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self.accumulation_steps = accumulation_steps

    # 4. coefficients: the scalars of the step, computed ONCE per (device, dtype) by
    #    `_prepare_local` and kept in `apply_state`. `hypers` holds every `_set_hyper` value as
    #    a tensor; `step` is t = iterations + 1 (same float dtype).
    def coefficients(self, hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, Any]:
        k = tf.cast(self.accumulation_steps, step.dtype)
        return {"lr_t": hypers["learning_rate"], "k": k,
                "apply": tf.equal(tf.math.floormod(step, k), tf.zeros_like(step))}

    # 5. update: the rule for ONE variable, pure (tensors in, tensors out; no assignments):
    #    returns the new variable and the new value of every slot.
    def update(self, grad, var, slots, coeffs):
        total = slots["grad_sum"] + grad
        apply = coeffs["apply"]
        new_var = tf.where(apply, var - coeffs["lr_t"] * total / coeffs["k"], var)
        return new_var, {"grad_sum": tf.where(apply, tf.zeros_like(total), total)}

    # 6. Sparse gradients (an Embedding's `tf.IndexedSlices`): RuleOptimizer's default is the
    #    lazy row update. Accumulation must update EVERY row touched during the window, so this
    #    optimizer densifies instead.
    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        dense = tf.math.unsorted_segment_sum(grad, indices, num_segments=tf.shape(var)[0])
        return self._resource_apply_dense(dense, var, apply_state)

    # 7. get_config: RuleOptimizer writes every hyperparameter (through
    #    `_serialize_hyperparameter`) and every name in OPTIONS, so `from_config(get_config())`
    #    rebuilds the same optimizer. Override only to add something else.
