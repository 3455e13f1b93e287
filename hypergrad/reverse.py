"""Hyper-gradients d(validation loss)/d(hyperparameter) through the optimizer's pure rule.

Notation (Franceschi et al. 2017, "Forward and Reverse Gradient-Based Hyperparameter
Optimization", ICML, arXiv:1703.01785, sec. 3): the training state s_t = (w_t, slots_t) evolves
by s_t = Phi_t(s_{t-1}, lambda), where Phi_t computes the mini-batch gradient at w_{t-1} and
applies the optimizer's update rule (`RuleOptimizer.coefficients` + `RuleOptimizer.update`);
the hyper-gradient of the validation loss E(w_T) is dE/dlambda = grad_w E(w_T) . Z_T(w part).

* Forward mode (sec. 3.2): carry the tangents Z_t = ds_t/dlambda, Z_t = A_t Z_{t-1} + B_t with
  A_t = dPhi_t/ds and B_t = dPhi_t/dlambda. One compiled step runs `ForwardAccumulator` around
  `GradientTape` (forward-over-reverse), so the Hessian-vector product inside A_t Z_{t-1} is exact.
  All followed hyperparameters share one primal pass: the tangents are batched.
* Reverse mode (sec. 3.1), truncated: keep the state at t - T and the T batches, replay them
  under a tape and back-propagate E(w_t) to lambda. The state at t - T is held constant, so for
  T < t this is the truncated (biased) reverse-mode hyper-gradient.
* One-step (Baydin et al. 2018, "Online Learning Rate Adaptation with Hypergradient Descent",
  ICLR, arXiv:1703.04782, eq. 5): the derivative of w_t through the last update only,
  Z_t ~ B_t (Z_{t-1} = 0). We dot it with grad_w E(w_t) (the paper uses the next training
  gradient), so it is directly comparable with the exact value; after the first update it
  equals the exact value because Z_0 = 0.
* RTHO (real-time hyperparameter optimisation, sec. 4): every K steps lambda <- lambda - eta *
  dE/dlambda, projected onto the hyperparameter's allowed range (see `hypergrad/rtho.py`).

The parameters lambda are the optimizer's hyperparameters and, when the learning rate is a
schedule, the schedule's float parameters `lr_schedule.<param>` (`hypergrad.parameters`): the
hyperparameters of step t are `ParameterPlan.hypers_at(values, t)`, so every mode here sees the
learning rate of each step (schedule and legacy decay) as training does.

The hyper-gradient step uses dense updates (an `IndexedSlices` gradient is densified), i.e. the
dense semantics of `RuleOptimizer._resource_apply_dense`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from optimizers.base import RuleOptimizer
from hypergrad.functional import cross_entropy
from hypergrad.parameters import ParameterPlan


@dataclass
class State:
    """A training state as tensors: weights [model order], slots (one dict per weight), step.

    `step` is the number of updates already applied (the next update uses t = step + 1).
    """

    weights: list[tf.Tensor]
    slots: list[dict[str, tf.Tensor]]
    step: int

    def nbytes(self) -> int:
        """Bytes held by the weights and slots."""
        tensors = self.weights + [s for d in self.slots for s in d.values()]
        return int(sum(t.shape.num_elements() * t.dtype.size for t in tensors))


def read_state(model: tf_keras.Model, opt: RuleOptimizer) -> State:
    """The current state of a model and its optimizer (slots are created if missing)."""
    variables = model.trainable_variables
    opt._create_all_weights(variables)  # creates hyperparameter variables and slots once
    names = opt.slot_names_for_rule()
    return State(
        weights=[tf.convert_to_tensor(v) for v in variables],
        slots=[{n: tf.convert_to_tensor(opt.get_slot(v, n)) for n in names} for v in variables],
        step=int(opt.iterations.numpy()),
    )


def hyper_constants(opt: RuleOptimizer, dtype: tf.DType) -> dict[str, tf.Tensor]:
    """Every hyperparameter as the update at the current step sees it (`hyper_tensors`: the
    learning rate decayed / scheduled at `iterations`) as a constant. The hyper-gradient modes
    use `ParameterPlan.constant_values` instead (the learning rate made anew at every step)."""
    return {n: tf.constant(v.numpy(), dtype) for n, v in opt.hyper_tensors(dtype).items()}


def pure_step(*args: Any, **kwargs: Any
              ) -> tuple[tf.Tensor, list[tf.Tensor], list[dict[str, tf.Tensor]]]:
    """One training step Phi_t as a pure function: (loss, new weights, new slots); see
    `pure_step_with_grads` for the arguments."""
    loss, _, new_weights, new_slots = pure_step_with_grads(*args, **kwargs)
    return loss, new_weights, new_slots


def pure_step_with_grads(
    model: tf_keras.Model,
    opt: RuleOptimizer,
    weights: Sequence[tf.Tensor],
    slots: Sequence[Mapping[str, tf.Tensor]],
    hypers: Mapping[str, tf.Tensor],
    t: tf.Tensor,
    x: tf.Tensor,
    y: tf.Tensor,
) -> tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor], list[dict[str, tf.Tensor]]]:
    """One training step Phi_t: (loss, gradients, new weights, new slots), all tensors.

    Args:
        weights, slots: the state before the step (tensors, model order).
        hypers: every hyperparameter as a scalar tensor of the weights' dtype.
        t: scalar float tensor, the 1-based step of this update.
        x, y: the mini-batch [batch, ...] and its int labels [batch].
    """
    with tf.GradientTape() as tape:
        tape.watch(weights)
        loss = cross_entropy(model, weights, x, y)
    grads = tape.gradient(loss, weights, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    grads = [tf.convert_to_tensor(g) for g in grads]  # densify IndexedSlices (dense semantics)
    new_weights, new_slots = apply_rule(opt, grads, weights, slots, hypers, t)
    return loss, grads, new_weights, new_slots


def apply_rule(
    opt: RuleOptimizer,
    grads: Sequence[tf.Tensor],
    weights: Sequence[tf.Tensor],
    slots: Sequence[Mapping[str, tf.Tensor]],
    hypers: Mapping[str, tf.Tensor],
    t: tf.Tensor,
) -> tuple[list[tf.Tensor], list[dict[str, tf.Tensor]]]:
    """The optimizer's pure rule applied to every weight: (new weights, new slots)."""
    coeffs = opt.coefficients(hypers, t)
    new_weights, new_slots = [], []
    for grad, weight, slot in zip(grads, weights, slots):
        new_w, new_s = opt.update(grad, weight, slot, coeffs)
        new_weights.append(new_w)
        new_slots.append(new_s)
    return new_weights, new_slots


def flat_dot(batched: Sequence[tf.Tensor], vectors: Sequence[tf.Tensor]) -> tf.Tensor:
    """sum_i <batched_i[b], vectors_i> for each b: [k] from tensors [k, *shape_i] and [*shape_i]."""
    total = 0.0
    for z, v in zip(batched, vectors):
        total += tf.linalg.matvec(tf.reshape(z, (tf.shape(z)[0], -1)), tf.reshape(v, (-1,)))
    return total


def validation_gradient(
    model: tf_keras.Model, weights: Sequence[tf.Tensor], x_val: tf.Tensor, y_val: tf.Tensor
) -> tuple[tf.Tensor, list[tf.Tensor]]:
    """E(w) and grad_w E(w) for the validation set (mean cross-entropy, nats)."""
    with tf.GradientTape() as tape:
        tape.watch(weights)
        loss = cross_entropy(model, weights, x_val, y_val)
    return loss, tape.gradient(loss, weights, unconnected_gradients=tf.UnconnectedGradients.ZERO)


def reverse_hypergradient(
    model: tf_keras.Model,
    opt: RuleOptimizer,
    start: State,
    batches: Sequence[tuple[tf.Tensor, tf.Tensor]],
    followed: Sequence[str],
    x_val: tf.Tensor,
    y_val: tf.Tensor,
    hypers: Mapping[str, tf.Tensor] | None = None,
    plan: ParameterPlan | None = None,
) -> dict[str, float]:
    """Reverse-mode hyper-gradient over the window of `len(batches)` steps after `start`.

    Franceschi et al. 2017, sec. 3.1, truncated to T = len(batches): the state `start` is held
    constant. Memory grows linearly with T (the tape keeps every step's intermediates).

    Args:
        start: the state at the beginning of the window.
        batches: T mini-batches (x [batch, ...], y [batch]) in training order.
        followed: parameter names to differentiate (hyperparameters, `lr_schedule.<param>`).
        hypers: parameter values, name -> scalar tensor of the weights' dtype (default: the
            current ones, `ParameterPlan.constant_values`).
        plan: the `ParameterPlan` of `opt` (default: a new one).

    Returns:
        name -> dE(w_{start.step + T})/dlambda as Python floats.

    Raises:
        KeyError: a followed name that is not a parameter (`ParameterPlan.check`).
    """
    dtype = start.weights[0].dtype
    plan = plan or ParameterPlan(opt, dtype)
    for name in followed:
        plan.check(name)
    values = dict(hypers or plan.constant_values())
    watched = [values[n] for n in followed]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        weights, slots = list(start.weights), [dict(s) for s in start.slots]
        for offset, (x, y) in enumerate(batches):
            t = tf.constant(start.step + offset + 1, dtype)
            _, weights, slots = pure_step(model, opt, weights, slots, plan.hypers_at(values, t),
                                          t, x, y)
        loss = cross_entropy(model, weights, x_val, y_val)
    grads = tape.gradient(loss, watched, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return {n: float(g.numpy()) for n, g in zip(followed, grads)}


def validation_loss_after(
    model: tf_keras.Model,
    opt: RuleOptimizer,
    start: State,
    batches: Sequence[tuple[tf.Tensor, tf.Tensor]],
    hypers: Mapping[str, tf.Tensor],
    x_val: tf.Tensor,
    y_val: tf.Tensor,
    plan: ParameterPlan | None = None,
) -> float:
    """E(w) after running `batches` from `start` with parameter values `hypers` (name -> scalar
    tensor, all of `plan.names`; for finite differences and response slices). Pure: no
    variable changes."""
    dtype = start.weights[0].dtype
    plan = plan or ParameterPlan(opt, dtype)
    weights, slots = list(start.weights), [dict(s) for s in start.slots]
    for offset, (x, y) in enumerate(batches):
        t = tf.constant(start.step + offset + 1, dtype)
        _, weights, slots = pure_step(model, opt, weights, slots, plan.hypers_at(hypers, t),
                                      t, x, y)
    return float(cross_entropy(model, weights, x_val, y_val).numpy())


def central_difference(
    model: tf_keras.Model,
    opt: RuleOptimizer,
    start: State,
    batches: Sequence[tuple[tf.Tensor, tf.Tensor]],
    followed: Sequence[str],
    x_val: tf.Tensor,
    y_val: tf.Tensor,
    relative_step: float = 1e-5,
    plan: ParameterPlan | None = None,
) -> dict[str, float]:
    """Central finite differences (E(lambda + h) - E(lambda - h)) / 2h with h = relative_step *
    max(|lambda|, 1e-3), for hyperparameters and `lr_schedule.<param>` names alike. Reliable
    only for smooth runs (tanh, float64): with ReLU units switching on and off the loss is
    piecewise and the quotient can be dominated by the kinks."""
    dtype = start.weights[0].dtype
    plan = plan or ParameterPlan(opt, dtype)
    base = plan.constant_values()
    out = {}
    for name in followed:
        value = float(base[name].numpy())
        h = relative_step * max(abs(value), 1e-3)
        losses = []
        for sign in (1.0, -1.0):
            hypers = dict(base)
            hypers[name] = tf.constant(value + sign * h, dtype)
            losses.append(validation_loss_after(model, opt, start, batches, hypers, x_val, y_val,
                                                plan))
        out[name] = (losses[0] - losses[1]) / (2 * h)
    return out


def relative_error(a: float, b: float) -> float:
    """|a - b| / max(|a|, |b|, tiny): 0 when both are 0."""
    scale = max(abs(a), abs(b), np.finfo(float).tiny)
    return abs(a - b) / scale
