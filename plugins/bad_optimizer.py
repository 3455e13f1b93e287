"""Example plugin (deliberately wrong): momentum SGD with the classic OptimizerV2 mistakes.

The contract check page shows each mistake as a failed item; the app keeps working and this
class is NOT added to the optimizer lists. The mistakes, each marked MISTAKE below:

1. `create_slots` and `resource_apply_sparse` (public look-alikes of the hook names): the base
   class never calls them; it calls `_create_slots` and `_resource_apply_sparse`.
2. `momentum` is a plain attribute, not `_set_hyper`'d: a compiled step bakes 0.9 in as a
   constant, a live change is silently ignored, and there is no hyper-gradient for it.
3. The slot is created lazily inside `_resource_apply_dense` (because `create_slots` never ran).
4. `get_config` uses keys the constructor does not take (`mom`), so `from_config` fails.
The dense update itself is right (Polyak momentum), so the loss does decrease.
"""

import tf_keras


class BadMomentum(tf_keras.optimizers.legacy.Optimizer):
    """Heavy-ball momentum SGD: v = momentum * v - lr * grad; var += v (with the mistakes above)."""

    def __init__(self, learning_rate=0.01, momentum=0.9, name="BadMomentum", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", learning_rate)
        self.momentum = momentum  # MISTAKE 2: plain attribute

    def create_slots(self, var_list):  # MISTAKE 1: never called by OptimizerV2
        for var in var_list:
            self.add_slot(var, "velocity")

    def _resource_apply_dense(self, grad, var, apply_state=None):
        try:
            velocity = self.get_slot(var, "velocity")
        except KeyError:
            velocity = self.add_slot(var, "velocity")  # MISTAKE 3: lazy slot
        lr = self._get_hyper("learning_rate", var.dtype)
        new_velocity = self.momentum * velocity - lr * grad
        velocity.assign(new_velocity)
        return var.assign_add(new_velocity)

    def resource_apply_sparse(self, grad, var, indices, apply_state=None):  # MISTAKE 1 again
        raise AssertionError("never reached: OptimizerV2 calls _resource_apply_sparse")

    def get_config(self):  # MISTAKE 4: keys the constructor does not accept
        return {"name": self._name, "lr": self._serialize_hyperparameter("learning_rate"),
                "mom": self.momentum}
