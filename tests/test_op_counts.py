"""Speed guards of the dense apply path (issue 12) and the derivatives it must not break.

* Op counts: the graph of one traced `apply_gradients` is counted with one and with two
  variables; the difference is the per-variable cost. The ceilings are the counts measured after
  the issue-12 changes (Adam: 42 ops per variable before, 22 after; the fused Keras kernel path is
  6), so a change that re-adds per-variable work (a hyperparameter re-read, a per-variable
  `1 - beta`, the four-op square root) fails here, without timing anything.
* Values: the apply path (one-op square root) gives the same numbers as the pure rule the
  hyper-gradient engine differentiates (four-op square root), bit for bit.
* Derivatives: outside the apply path `safe_sqrt` keeps a finite derivative at 0 under
  `tf.GradientTape` and `tf.autodiff.ForwardAccumulator`, both inside `tf.function`, so forward-
  mode tangents stay finite for a parameter whose gradient is exactly 0.
* Complex dtypes (SGD, RMSprop, Adagrad, as Keras) still apply, checked against NumPy.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers.adagrad import Adagrad
from optimizers.adam import Adam, adam_coefficients, adam_update
from optimizers.adamw import AdamW
from optimizers.diffgrad import DiffGrad
from optimizers.rmsprop import RMSprop
from optimizers.rules import derivative_free, safe_sqrt
from optimizers.sgd import SGD
from tests.numpy_reference import REFERENCES, initial_slots

# id -> (factory, ceiling on ops per variable, element-wise ops per variable), measured here
# (TF 2.21, float32), on the pure rule's apply path (`fused=False`; the fused kernels are pinned
# in tests/test_fused_kernels.py). Element-wise = ops that touch every element (not reads,
# assigns, consts).
CASES = {
    "sgd": (lambda: SGD(0.1, fused=False), 13, 4),
    "sgd-nesterov": (lambda: SGD(0.1, 0.9, nesterov=True, fused=False), 16, 7),
    "adam": (lambda: Adam(0.01, fused=False), 22, 11),
    "adam-amsgrad": (lambda: Adam(0.01, amsgrad=True, fused=False), 26, 12),
    "adam-schedule-decay": (lambda: Adam(tf_keras.optimizers.schedules.ExponentialDecay(
        0.01, 10, 0.5), decay=0.1, fused=False), 22, 11),
    "adamw": (lambda: AdamW(0.01, fused=False), 26, 14),
    "rmsprop": (lambda: RMSprop(0.01, fused=False), 22, 11),
    # + 2 (Maximum and its 0): max(x, 0) before the root, rounding can make rms - mg**2 < 0
    "rmsprop-centered": (lambda: RMSprop(0.01, centered=True, fused=False), 32, 17),
    "adagrad": (lambda: Adagrad(0.1, fused=False), 14, 6),
    "diffgrad": (lambda: DiffGrad(0.01), 30, 15),
}
# reads, writes (the in-place `AssignSubVariableOp` included), captures, constants, grouping
NOT_ELEMENTWISE = {"Placeholder", "ReadVariableOp", "AssignVariableOp", "AssignSubVariableOp",
                   "Const", "Identity", "NoOp"}


def traced_op_types(make_optimizer, n_variables: int) -> list[str]:
    """Op types of the graph of one traced `apply_gradients` on `n_variables` [4, 4] variables."""
    opt = make_optimizer()
    variables = [tf.Variable(tf.fill([4, 4], 0.5 + i)) for i in range(n_variables)]
    grads = [tf.fill([4, 4], 0.25) for _ in variables]
    opt.apply_gradients(zip(grads, variables))  # slots and hyperparameter variables

    @tf.function
    def step():
        opt.apply_gradients(zip(grads, variables))

    return [op.type for op in step.get_concrete_function().graph.get_operations()]


def per_variable_ops(make_optimizer) -> collections.Counter:
    return (collections.Counter(traced_op_types(make_optimizer, 2))
            - collections.Counter(traced_op_types(make_optimizer, 1)))


@pytest.mark.parametrize("case", list(CASES))
def test_dense_update_ops_per_variable_stay_at_the_measured_count(case):
    make, ceiling, elementwise = CASES[case]
    ops = per_variable_ops(make)
    assert sum(ops.values()) <= ceiling, dict(ops)
    assert sum(n for t, n in ops.items() if t not in NOT_ELEMENTWISE) <= elementwise, dict(ops)
    # the one-op square root, no `tf.where` pair, and each hyperparameter read once per step
    # (not per variable): one read per slot, and per variable unless it is updated in place
    assert ops["SelectV2"] == 0 and ops["Greater"] == 0
    n_slots = len(make().declared_slot_names())
    in_place = ops["AssignSubVariableOp"]
    assert in_place == (0 if case.startswith(("sgd", "adamw")) else 1)
    assert ops["ReadVariableOp"] == 1 + n_slots - in_place, dict(ops)
    assert ops["AssignVariableOp"] == 1 + n_slots - in_place


def test_hyperparameters_are_read_once_per_step_whatever_the_number_of_variables():
    one, three = (collections.Counter(traced_op_types(lambda: Adam(0.01, fused=False), n))
                  for n in (1, 3))
    # each extra variable adds its own 2 reads (m, v; the variable is updated in place) and
    # nothing else is re-read
    assert three["ReadVariableOp"] - one["ReadVariableOp"] == 2 * 2


VALUE_CASES = ["sgd-nesterov", "adam", "adam-amsgrad", "adam-schedule-decay", "adamw",
               "rmsprop", "rmsprop-centered", "adagrad", "diffgrad"]


@pytest.mark.parametrize("case", VALUE_CASES)
def test_apply_path_equals_the_differentiable_rule_bit_for_bit(case):
    make = CASES[case][0]
    opt = make()
    rng = np.random.default_rng(3)
    var = tf.Variable(rng.normal(size=(5, 3)).astype(np.float32))
    # the first column's gradient is exactly 0: sqrt(0) on both paths
    grads = [(rng.normal(size=(5, 3)) * [0, 1, 1]).astype(np.float32) for _ in range(4)]

    @tf.function
    def apply(g):
        opt.apply_gradients([(g, var)])

    apply(tf.constant(grads[0]))  # slots exist from here on
    for grad in grads[1:]:
        w = tf.identity(var)
        slots = {n: tf.identity(opt.get_slot(var, n)) for n in opt.slot_names_for_rule()}
        hypers = opt.hyper_tensors(tf.float32)
        coeffs = opt.coefficients(hypers, tf.cast(opt.iterations + 1, tf.float32))
        want_var, want_slots = opt.update(tf.constant(grad), w, slots, coeffs)
        apply(tf.constant(grad))
        np.testing.assert_array_equal(var.numpy(), want_var.numpy())
        for name, value in want_slots.items():
            np.testing.assert_array_equal(opt.get_slot(var, name).numpy(), value.numpy())
    assert np.all(np.isfinite(var.numpy()))


def test_derivative_free_only_changes_tracing_inside_the_block():
    x = tf.constant([0.0, 4.0])
    with derivative_free():
        with derivative_free():
            pass
        inner = tf.function(safe_sqrt).get_concrete_function(x).graph
    outer = tf.function(safe_sqrt).get_concrete_function(tf.constant([0.0, 9.0])).graph
    assert "SelectV2" not in [op.type for op in inner.get_operations()]
    assert "SelectV2" in [op.type for op in outer.get_operations()]


@tf.function
def tangents_and_gradients(grad, m, v, var, lr):
    """d(new_var)/d(learning_rate) by forward mode and by reverse mode, traced."""
    def new_var(learning_rate):
        hypers = {"learning_rate": learning_rate, "beta_1": tf.constant(0.9),
                  "beta_2": tf.constant(0.999), "epsilon": tf.constant(1e-7)}
        coeffs = adam_coefficients(hypers, tf.constant(3.0))
        return adam_update(grad, var, {"m": m, "v": v}, coeffs)[0]

    with tf.autodiff.ForwardAccumulator(lr, tf.ones_like(lr)) as acc:
        out = new_var(lr)
    with tf.GradientTape() as tape:
        tape.watch(lr)
        total = tf.reduce_sum(new_var(lr))
    # the derivative w.r.t. v goes through sqrt at v = 0: finite only with safe_sqrt
    with tf.autodiff.ForwardAccumulator(v, tf.ones_like(v)) as acc_v:
        out_v = new_var(lr)
    return acc.jvp(out), tape.gradient(total, lr), acc_v.jvp(out_v)


def test_forward_and_reverse_derivatives_stay_finite_through_a_zero_gradient():
    grad = tf.constant([0.0, 0.5])
    m, v = tf.constant([0.0, 0.2]), tf.constant([0.0, 0.04])
    var, lr = tf.constant([1.0, 1.0]), tf.constant(0.01)
    with derivative_free():  # the flag must not leak into a rule traced by the engine
        pass
    jvp_lr, grad_lr, jvp_v = (t.numpy() for t in tangents_and_gradients(grad, m, v, var, lr))
    # analytic: d new_var / d lr = -sqrt(1 - b2^3) / (1 - b1^3) * m_t / (sqrt(v_t) + eps)
    m_t = 0.9 * 0.2 + 0.1 * 0.5
    v_t = 0.999 * 0.04 + 0.001 * 0.25
    scale = np.sqrt(1 - 0.999**3) / (1 - 0.9**3)
    want = [0.0, -scale * m_t / (np.sqrt(v_t) + 1e-7)]
    np.testing.assert_allclose(jvp_lr, want, rtol=1e-5)
    assert grad_lr == pytest.approx(sum(want), rel=1e-5)
    # v = 0 and grad = 0: the tangent w.r.t. v is 0 (finite), not NaN
    assert np.all(np.isfinite(jvp_v)) and jvp_v[0] == 0.0
    # element 2: -lr_t * m_t * d sqrt(v_t) / (sqrt(v_t) + eps)^2, with d v_t / d v = 0.999
    d_sqrt = 0.999 / (2 * np.sqrt(v_t))
    assert jvp_v[1] == pytest.approx(0.01 * scale * m_t * d_sqrt / (np.sqrt(v_t) + 1e-7) ** 2,
                                     rel=1e-4)


COMPLEX_CASES = [
    ("sgd", lambda: SGD(0.1, 0.5), {"learning_rate": 0.1, "momentum": 0.5}, {}),
    ("rmsprop", lambda: RMSprop(0.01, momentum=0.5, centered=True),
     {"learning_rate": 0.01, "rho": 0.9, "momentum": 0.5, "epsilon": 1e-7}, {"centered": True}),
    ("adagrad", lambda: Adagrad(0.1),
     {"learning_rate": 0.1, "epsilon": 1e-7}, {"initial_accumulator_value": 0.1}),
]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name,make,hypers,options", COMPLEX_CASES, ids=[c[0] for c in COMPLEX_CASES])
def test_complex_dtypes_still_apply(dtype, name, make, hypers, options):
    opt = make()
    rng = np.random.default_rng(5)
    start = (rng.normal(size=(3, 2)) + 1j * rng.normal(size=(3, 2))).astype(dtype)
    var = tf.Variable(start)
    grads = [(rng.normal(size=(3, 2)) + 1j * rng.normal(size=(3, 2))).astype(dtype)
             for _ in range(3)]

    @tf.function
    def apply(g):
        opt.apply_gradients([(g, var)])

    want, slots = start, initial_slots(name, start, options)
    # the hyperparameters live in float32 variables, cast to the complex dtype when applied
    stored = {k: float(np.float32(v)) for k, v in hypers.items()}
    for t, grad in enumerate(grads, start=1):
        apply(tf.constant(grad))
        want, slots = REFERENCES[name](grad, want, slots, stored, t, options)
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    np.testing.assert_allclose(var.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["adam", "rmsprop-centered", "adagrad", "diffgrad", "adamw"])
def test_sparse_apply_equals_the_rule_on_the_touched_rows(case):
    opt = CASES[case][0]()
    rng = np.random.default_rng(11)
    start = rng.normal(size=(6, 2)).astype(np.float32)
    var = tf.Variable(start)
    indices = tf.constant([4, 1])
    rows = tf.constant(rng.normal(size=(2, 2)).astype(np.float32))

    @tf.function
    def apply():
        opt.apply_gradients([(tf.IndexedSlices(rows, indices, tf.constant([6, 2])), var)])

    apply()  # slots exist from here on
    slots = {n: tf.gather(opt.get_slot(var, n), indices) for n in opt.slot_names_for_rule()}
    coeffs = opt.coefficients(opt.hyper_tensors(tf.float32), tf.cast(opt.iterations + 1, tf.float32))
    before = var.numpy()
    want_rows, want_slots = opt.update(rows, tf.gather(before, indices), slots, coeffs)
    apply()
    after = var.numpy()
    np.testing.assert_array_equal(after[[4, 1]], want_rows.numpy())
    np.testing.assert_array_equal(np.delete(after, [4, 1], axis=0), np.delete(before, [4, 1], axis=0))
    for name, value in want_slots.items():
        np.testing.assert_array_equal(tf.gather(opt.get_slot(var, name), indices).numpy(),
                                      value.numpy())


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_centered_rmsprop_keeps_a_finite_step_when_rounding_makes_the_variance_negative(momentum):
    # the pure rule clamps; the fused kernel (as Keras) does not: this guards the rule
    opt = RMSprop(0.01, rho=0.9, momentum=momentum, epsilon=1e-7, centered=True, fused=False)
    var = tf.Variable([1.0, 1.0])
    grad = tf.constant([0.5, 0.5])
    opt.apply_gradients([(grad, var)])
    # element 0: rms - mg**2 after the next step = 0.9 + 0.025 - (0.945 + 0.05)**2 = -0.065
    # (what rounding does on a tiny scale); the differentiable rule's root gives 0 there
    opt.get_slot(var, "rms").assign([1.0, 1.0])
    opt.get_slot(var, "mg").assign([1.05, 0.0])
    slots = {n: tf.identity(opt.get_slot(var, n)) for n in opt.slot_names_for_rule()}
    coeffs = opt.coefficients(opt.hyper_tensors(tf.float32), tf.constant(2.0))
    want, _ = opt.update(grad, tf.identity(var), slots, coeffs)

    @tf.function
    def apply():
        opt.apply_gradients([(grad, var)])

    apply()
    # momentum 0: denominator 0 + epsilon, a finite step; momentum > 0: epsilon is inside the
    # root, so the denominator is 0 and both paths give the same -inf (not NaN)
    assert not np.any(np.isnan(var.numpy()))
    assert np.all(np.isfinite(var.numpy())) == (momentum == 0.0)
    np.testing.assert_array_equal(var.numpy(), want.numpy())
