"""Forward-mode hyper-gradients carried along with training (Franceschi et al. 2017, sec. 3.2).

`ForwardModeTrainer` replaces `optimizer.apply_gradients` in a run that follows hyper-gradients:
its compiled step computes the new state *and* its tangents in one pass through the optimizer's
pure rule, assigns the new state to the model's variables and the optimizer's slots (and
increments `iterations`), so the run trains exactly as it would otherwise (dense updates) while
Z_t = d(w_t, slots_t)/d(lambda) is kept in `tf.Variable`s of shape [k, *variable.shape].

Each followed hyperparameter gets its own `ForwardAccumulator` pass inside the one compiled step;
the primal ops are the same in every pass and are shared after graph optimisation (TF's batched
accumulator, `ForwardAccumulator._batch_accumulator`, fails on a MatMul whose other input has no
tangent in TF 2.21, so it is not used). The one-step tangents of Baydin et al. 2018 are the JVP of
the update rule alone (state and gradient fixed): element-wise and cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tf_keras

from engine.compiled import compiled
from optimizers.base import RuleOptimizer
from hypergrad.parameters import ParameterPlan
from hypergrad.reverse import apply_rule, flat_dot, pure_step_with_grads, validation_gradient


class ForwardModeTrainer:
    """Train with forward-mode hyper-gradient tracking of `followed` hyperparameters.

    Args:
        model: built tf_keras model of layers supported by `hypergrad.functional`.
        opt: a `RuleOptimizer` (its slots are created here if missing).
        followed: k >= 1 parameter names: hyperparameters of `opt.hyperparameter_specs()` and,
            when the learning rate is a schedule, `lr_schedule.<param>` names
            (`hypergrad.parameters`; the schedule is evaluated at every step from parameters
            whose tangent is e_j, so d lr_t / d param flows into the tangents).
        x_train, y_train: the training set as tensors (batches are gathered by index).
        x_val, y_val: the validation set (E is its mean cross-entropy, nats).
        jit_compile: compile the step with XLA. Measured here (MLP 64-256-256-10, Adam, k = 1):
            4.7x a plain step without XLA, 2.0x with it (`bench/bench_hypergradients.py`).

    Memory: the tangents take k x (weights + slots) elements, the one-step tangents k x weights
    (`tangent_bytes`).

    Raises:
        KeyError: a followed name that is not a parameter (`ParameterPlan.check`).
    """

    def __init__(
        self,
        model: tf_keras.Model,
        opt: RuleOptimizer,
        followed: Sequence[str],
        x_train: tf.Tensor,
        y_train: tf.Tensor,
        x_val: tf.Tensor,
        y_val: tf.Tensor,
        jit_compile: bool = True,
    ):
        self.plan = ParameterPlan(opt, model.trainable_variables[0].dtype)
        for name in followed:
            self.plan.check(name)
        if not followed:
            raise ValueError("followed refused: follow at least one hyperparameter")
        self.model, self.opt, self.followed = model, opt, list(followed)
        self.x_train, self.y_train, self.x_val, self.y_val = x_train, y_train, x_val, y_val
        self.variables = list(model.trainable_variables)
        opt._create_all_weights(self.variables)
        self.slot_names = opt.slot_names_for_rule()
        self.slot_vars = [{n: opt.get_slot(v, n) for n in self.slot_names} for v in self.variables]
        k = len(self.followed)

        def zeros_like_batched(v: tf.Variable) -> tf.Variable:
            return tf.Variable(tf.zeros((k, *v.shape), v.dtype), trainable=False)

        self.z_weights = [zeros_like_batched(v) for v in self.variables]
        self.z_slots = [{n: zeros_like_batched(s) for n, s in d.items()} for d in self.slot_vars]
        self.one_step_weights = [zeros_like_batched(v) for v in self.variables]
        self.traces = 0
        self._step = compiled(self._step_impl, jit_compile=jit_compile)
        self._hypergradients = compiled(self._hypergradients_impl)

    @property
    def tangent_bytes(self) -> int:
        """Bytes held by the exact and one-step tangents."""
        tensors = self.z_weights + self.one_step_weights + [z for d in self.z_slots for z in d.values()]
        return int(sum(z.shape.num_elements() * z.dtype.size for z in tensors))

    def _step_impl(self, batch_index: tf.Tensor) -> tf.Tensor:
        self.traces += 1  # Python side effect: runs only while tracing
        dtype = self.variables[0].dtype
        x = tf.gather(self.x_train, batch_index)
        y = tf.gather(self.y_train, batch_index)
        t = tf.cast(self.opt.iterations + 1, dtype)
        # Parameter values read at every call (a `_set_hyper` or auto-tune assignment is seen
        # without retracing); the learning rate of step t is made from them (schedule, decay).
        base_values = self.plan.live_values()
        weights = [tf.identity(v) for v in self.variables]
        slots = [{n: tf.identity(s) for n, s in d.items()} for d in self.slot_vars]
        zero = tf.UnconnectedGradients.ZERO
        assigns = []
        for j, name in enumerate(self.followed):
            # One accumulator per hyperparameter: tangents (Z_{t-1}[j], e_j). The primal ops
            # are identical in every pass, so Grappler's common-subexpression elimination
            # computes them once per compiled step.
            values = dict(base_values)
            values[name] = tf.identity(base_values[name])
            primals = (weights, slots, values[name])
            tangents = (
                [z[j] for z in self.z_weights],
                [{n: z[j] for n, z in d.items()} for d in self.z_slots],
                tf.ones((), dtype),
            )
            with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
                loss, grads, new_weights, new_slots = pure_step_with_grads(
                    self.model, self.opt, weights, slots, self.plan.hypers_at(values, t), t, x, y
                )
            for i, new_w in enumerate(new_weights):
                assigns.append(self.z_weights[i][j].assign(acc.jvp(new_w, unconnected_gradients=zero)))
                for n, new_s in new_slots[i].items():
                    assigns.append(self.z_slots[i][n][j].assign(acc.jvp(new_s, unconnected_gradients=zero)))
            # One-step tangent B_t (Baydin et al. 2018): the state and the gradient held fixed,
            # only the rule's dependence on lambda_j; element-wise, no Hessian-vector product.
            hyper = tf.identity(base_values[name])
            with tf.autodiff.ForwardAccumulator(hyper, tf.ones((), dtype)) as one_step_acc:
                one_step_values = dict(base_values)
                one_step_values[name] = hyper
                stepped, _ = apply_rule(self.opt, grads, weights, slots,
                                        self.plan.hypers_at(one_step_values, t), t)
            for i, new_w in enumerate(stepped):
                tangent = one_step_acc.jvp(new_w, unconnected_gradients=zero)
                assigns.append(self.one_step_weights[i][j].assign(tangent))
        with tf.control_dependencies(assigns):
            # The state is written only after every tangent pass has read it.
            updates = [v.assign(w) for v, w in zip(self.variables, new_weights)]
            for i, d in enumerate(self.slot_vars):
                updates += [d[n].assign(new_slots[i][n]) for n in d]
            updates.append(self.opt.iterations.assign_add(1))
        with tf.control_dependencies(updates):
            return tf.identity(loss)

    def step(self, batch_index: tf.Tensor) -> tf.Tensor:
        """Apply one training update on the batch `batch_index` (int32 [batch]) and advance the
        tangents. Returns the training loss before the update (nats, a scalar tensor of the
        model dtype)."""
        return self._step(tf.convert_to_tensor(batch_index, tf.int32))

    def _hypergradients_impl(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        weights = [tf.convert_to_tensor(v) for v in self.variables]
        loss, grads = validation_gradient(self.model, weights, self.x_val, self.y_val)
        return loss, flat_dot(self.z_weights, grads), flat_dot(self.one_step_weights, grads)

    def hypergradients(self) -> tuple[float, dict[str, float], dict[str, float]]:
        """(E(w_t), exact dE/dlambda, one-step dE/dlambda) at the current weights, per name."""
        loss, exact, one_step = self._hypergradients()
        exact, one_step = exact.numpy(), one_step.numpy()
        return (
            float(loss.numpy()),
            {n: float(exact[j]) for j, n in enumerate(self.followed)},
            {n: float(one_step[j]) for j, n in enumerate(self.followed)},
        )
