"""The fused dense fast path (`fused=True`, the default; issue 12's speed target).

Where a configuration is one Keras runs as a single kernel, the lab's dense update calls that
kernel (`RuleOptimizer.fused_kernel` / `fused_apply`); the pure rule stays the reference and
what the hyper-gradient engine differentiates. What is held here:

* fused == the pure rule (`fused=False`) after 20 eager steps, variable and every slot, in
  every dtype the kernel takes, with schedules + `decay` off and on (the kernels round
  differently: `m + (g - m)(1 - b1)` for `b1 m + (1 - b1) g`, so the tolerance is a few ulps
  of the dtype grown over 20 steps, not equality);
* fused == the Keras built-in BIT FOR BIT (same kernel, same hyperparameter tensors), live
  changes included, with one trace;
* the kernel really runs (its op is in the traced graph), XLA compiles the fused path;
* SGD/RMSprop without momentum run Keras's plain regime (no momentum buffer work): a live
  change across 0 changes `trace_signature()`; a traced step keeps its old regime until
  retraced (the `self.t_cur = 5` lesson), and the lab's run loop retraces exactly once;
* the `fused` keyword: refused when not a bool, in `get_config` only when False.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from engine.record_rows import HyperChangeRow
from engine.train_step import Engine
from optimizers.adadelta import Adadelta
from optimizers.adagrad import Adagrad
from optimizers.adamax import Adamax
from optimizers.adam import Adam
from optimizers.adamw import AdamW
from optimizers.base import trace_signature
from optimizers.ftrl import Ftrl
from optimizers.fused_kernels import dense_kernel, kernel_runs
from optimizers.nadam import Nadam
from optimizers.rmsprop import RMSprop
from optimizers.sgd import SGD
from runs.process.handlers import HANDLERS, TRACES_ROW
from runs.process.run_loop import RunLoop
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

LEGACY = tf_keras.optimizers.legacy
REAL = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
COMPLEX = (tf.complex64, tf.complex128)

FTRL_KW = {"learning_rate_power": -0.75, "l1_regularization_strength": 0.01,
           "l2_regularization_strength": 0.1, "l2_shrinkage_regularization_strength": 0.1,
           "beta": 0.5}
# id -> (lab factory(lr, **kw), Keras factory(lr), kernel op in the graph or None, dtypes,
#        slots the fused path leaves untouched)
CASES = {
    "sgd": (lambda lr, **kw: SGD(lr, **kw), lambda lr, **kw: LEGACY.SGD(lr, **kw),
            "ResourceApplyGradientDescent", REAL + COMPLEX, ("momentum",)),
    "sgd-momentum": (lambda lr, **kw: SGD(lr, 0.5, **kw),
                     lambda lr, **kw: LEGACY.SGD(lr, 0.5, **kw),
                     "ResourceApplyKerasMomentum", REAL + COMPLEX, ()),
    "sgd-nesterov": (lambda lr, **kw: SGD(lr, 0.5, nesterov=True, **kw),
                     lambda lr, **kw: LEGACY.SGD(lr, 0.5, nesterov=True, **kw),
                     "ResourceApplyKerasMomentum", REAL + COMPLEX, ()),
    "adam": (lambda lr, **kw: Adam(lr, **kw), lambda lr, **kw: LEGACY.Adam(lr, **kw),
             "ResourceApplyAdam", REAL, ()),
    "adam-amsgrad": (lambda lr, **kw: Adam(lr, amsgrad=True, **kw),
                     lambda lr, **kw: LEGACY.Adam(lr, amsgrad=True, **kw),
                     "ResourceApplyAdamWithAmsgrad", REAL, ()),
    "rmsprop": (lambda lr, **kw: RMSprop(lr, **kw), lambda lr, **kw: LEGACY.RMSprop(lr, **kw),
                None, REAL + COMPLEX, ("momentum",)),
    "rmsprop-momentum": (lambda lr, **kw: RMSprop(lr, momentum=0.5, **kw),
                         lambda lr, **kw: LEGACY.RMSprop(lr, momentum=0.5, **kw),
                         "ResourceApplyRMSProp", REAL + COMPLEX, ()),
    "rmsprop-centered-momentum": (
        lambda lr, **kw: RMSprop(lr, momentum=0.5, centered=True, **kw),
        lambda lr, **kw: LEGACY.RMSprop(lr, momentum=0.5, centered=True, **kw),
        "ResourceApplyCenteredRMSProp", REAL + COMPLEX, ()),
    "adagrad": (lambda lr, **kw: Adagrad(lr, **kw), lambda lr, **kw: LEGACY.Adagrad(lr, **kw),
                "ResourceApplyAdagradV2", REAL + COMPLEX, ()),
    "adamw": (lambda lr, **kw: AdamW(lr, **kw), None, None, REAL, ()),
    "adadelta": (lambda lr, **kw: Adadelta(lr, **kw),
                 lambda lr, **kw: LEGACY.Adadelta(lr, **kw),
                 "ResourceApplyAdadelta", REAL + COMPLEX, ()),
    "adamax": (lambda lr, **kw: Adamax(lr, **kw), lambda lr, **kw: LEGACY.Adamax(lr, **kw),
               "ResourceApplyAdaMax", REAL, ()),
    "ftrl": (lambda lr, **kw: Ftrl(lr, **kw), lambda lr, **kw: LEGACY.Ftrl(lr, **kw),
             "ResourceApplyFtrlV2", REAL, ()),
    "ftrl-shrinkage": (lambda lr, **kw: Ftrl(lr, **FTRL_KW, **kw),
                       lambda lr, **kw: LEGACY.Ftrl(lr, **FTRL_KW, **kw),
                       "ResourceApplyFtrlV2", REAL, ()),
    # no kernel (Keras 2's Nadam is plain ops); Keras refuses the schedule of the Keras test;
    # no bfloat16: beta_2 = 0.999 rounds to 1 there, 1 - beta_2**t = 0 (NaN, as in Keras)
    "nadam": (lambda lr, **kw: Nadam(lr, **kw), None, None,
              (tf.float16, tf.float32, tf.float64) + COMPLEX, ()),
}
# max |fused - rule| allowed after 20 steps, relative to max(1, |value|): a few ulps of the
# dtype per step (the kernels' rounding), bfloat16/float16 with 8/11-bit mantissas
TOL = {tf.float16: 2e-2, tf.bfloat16: 1e-1, tf.float32: 2e-5, tf.float64: 1e-12,
       tf.complex64: 2e-5, tf.complex128: 1e-12}


def schedule(on: bool, lr: float):
    if not on:
        return lr, {}
    return (tf_keras.optimizers.schedules.ExponentialDecay(lr, decay_steps=5, decay_rate=0.7),
            {"decay": 0.01})


def gradients(dtype: tf.DType, steps: int = 20) -> list[tf.Tensor]:
    rng = np.random.default_rng(3)
    out = []
    for _ in range(steps):
        g = rng.normal(size=(3, 4))
        if dtype.is_complex:
            g = g + 1j * rng.normal(size=(3, 4))
        out.append(tf.constant(g.astype(dtype.as_numpy_dtype)))
    return out


def train(opt, dtype: tf.DType, grads) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    start = np.linspace(-1, 1, 12).reshape(3, 4)
    var = tf.Variable(start.astype(dtype.as_numpy_dtype))
    for grad in grads:
        opt.apply_gradients([(grad, var)])
    slots = {s: opt.get_slot(var, s).numpy() for s in opt.get_slot_names()}
    return var.numpy(), slots


def as_float(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128) if np.iscomplexobj(x) else x.astype(np.float64)


PARAMS = [pytest.param(case, dtype, on, id=f"{case}-{dtype.name}-{'sched' if on else 'plain'}")
          for case, spec in CASES.items() for dtype in spec[3] for on in (False, True)]


@pytest.mark.parametrize("case,dtype,on", PARAMS)
def test_fused_equals_the_pure_rule_after_20_steps(case, dtype, on):
    make, _, _, _, untouched = CASES[case]
    lr, extra = schedule(on, 0.05)
    grads = gradients(dtype)
    fused_var, fused_slots = train(make(lr, **extra), dtype, grads)
    lr, extra = schedule(on, 0.05)
    rule_var, rule_slots = train(make(lr, fused=False, **extra), dtype, grads)
    tol = TOL[dtype]
    for got, want, what in [(fused_var, rule_var, "var")] + [
            (fused_slots[s], rule_slots[s], s) for s in rule_slots if s not in untouched]:
        got, want = as_float(got), as_float(want)
        assert np.all(np.abs(got - want) <= tol * np.maximum(1.0, np.abs(want))), (what, got, want)
    assert not np.allclose(as_float(fused_var), np.linspace(-1, 1, 12).reshape(3, 4))
    for slot in untouched:  # Keras's plain regime: no momentum buffer; the lab's stays at 0
        assert not np.any(fused_slots[slot]), slot
        assert np.any(rule_slots[slot]), slot  # the rule (by value) writes the last update


KERAS_CASES = [c for c, spec in CASES.items() if spec[1] is not None]


@pytest.mark.parametrize("on", [False, True], ids=["plain", "sched+decay"])
@pytest.mark.parametrize("case", KERAS_CASES)
def test_fused_equals_the_keras_built_in_bit_for_bit_with_a_live_change(case, on):
    """Same kernel, same hyperparameter tensors: the lab's class IS the built-in, in a traced
    step, with the learning rate (or a schedule parameter) changed live at step 10."""
    make, make_keras, _, _, _ = CASES[case]
    results = []
    for factory in (make, make_keras):
        lr, extra = schedule(on, 0.05)
        opt = factory(lr, **extra)
        var = tf.Variable(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32))
        traces = []

        @tf.function
        def step(grad):
            traces.append(1)
            opt.apply_gradients([(grad, var)])

        for i, grad in enumerate(gradients(tf.float32)):
            if i == 10 and not on:
                opt.learning_rate = 0.02  # `_set_hyper`: an assign, no retrace
            step(grad)
        results.append((var.numpy(), {s: opt.get_slot(var, s).numpy()
                                      for s in opt.get_slot_names()}, len(traces)))
    (lab_var, lab_slots, lab_traces), (keras_var, keras_slots, _) = results
    np.testing.assert_array_equal(lab_var, keras_var)
    for slot, value in keras_slots.items():  # Keras's slot names are the lab's
        np.testing.assert_array_equal(lab_slots[slot], value, err_msg=slot)
    assert lab_traces <= 2  # the first call traces twice (it creates the variables)


@pytest.mark.parametrize("case", list(CASES))
def test_the_kernel_is_what_runs_in_the_traced_step(case):
    make, _, kernel, _, _ = CASES[case]
    opt = make(0.05)
    var = tf.Variable(tf.ones([3, 4]))
    opt.apply_gradients([(tf.ones([3, 4]), var)])

    @tf.function
    def step():
        opt.apply_gradients([(tf.fill([3, 4], 0.5), var)])

    ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
    applies = {t for t in ops if t.startswith("ResourceApply")}
    assert applies == ({kernel} if kernel else set()), ops


@pytest.mark.parametrize("case", list(CASES))
def test_xla_compiles_the_fused_path_and_matches_the_rule(case):
    make, _, kernel, _, _ = CASES[case]
    results = []
    for fused in (True, False):
        opt = make(0.05, fused=fused)
        var = tf.Variable(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32))

        @tf.function(jit_compile=True)
        def step(grad):
            opt.apply_gradients([(grad, var)])
            return var.read_value()

        for grad in gradients(tf.float32, 10):
            step(grad)
        results.append(var.numpy())
        if fused:  # under XLA, only kernels with an XLA lowering (AMSGrad's has none)
            ops = {op.type for op in step.get_concrete_function(
                gradients(tf.float32, 1)[0]).graph.get_operations()}
            expected = kernel if kernel and kernel != "ResourceApplyAdamWithAmsgrad" else None
            assert {t for t in ops if t.startswith("ResourceApply")} == (
                {expected} if expected else set())
    np.testing.assert_allclose(results[0], results[1], rtol=2e-5, atol=2e-6)


def test_kernel_availability_is_read_from_the_registry():
    assert kernel_runs("ResourceApplyAdam", tf.float32, "/device:CPU:0")
    assert kernel_runs("ResourceApplyAdam", tf.bfloat16, "/job:localhost/replica:0/task:0/device:CPU:0")
    assert not kernel_runs("ResourceApplyAdamWithAmsgrad", tf.complex64, "/device:CPU:0")
    assert not kernel_runs("ResourceApplyAdam", tf.int32, "/device:CPU:0")
    assert not kernel_runs("NoSuchKernel", tf.float32, "/device:CPU:0")
    # no device known: the dtype must be registered on every device type (GPU has no bfloat16)
    assert not kernel_runs("ResourceApplyAdam", tf.bfloat16, "")
    assert kernel_runs("ResourceApplyAdam", tf.float32, "")


@pytest.mark.parametrize("make", [lambda **kw: SGD(0.1, **kw), lambda **kw: RMSprop(0.01, **kw)],
                         ids=["sgd", "rmsprop"])
def test_a_traced_step_keeps_its_momentum_regime_until_retraced(make):
    """The regime is Python state (as Keras's `self._momentum`): eager calls follow a live
    change across 0 at once, a traced step only after a retrace. The pure rule follows by value
    without one."""
    grads = gradients(tf.float32, 6)
    finals = {}
    for mode in ("eager", "stale trace", "retraced", "rule traced"):
        opt = make(fused=mode != "rule traced")
        var = tf.Variable(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32))

        def apply(g, opt=opt, var=var):
            opt.apply_gradients([(g, var)])

        step = apply if mode == "eager" else tf.function(apply)
        for i, grad in enumerate(grads):
            if i == 3:
                signature = trace_signature(opt)
                opt.momentum = 0.9
                assert (trace_signature(opt) != signature) == (mode != "rule traced")
                if mode == "retraced":
                    step = tf.function(apply)
            step(grad)
        finals[mode] = var.numpy()
    np.testing.assert_allclose(finals["retraced"], finals["eager"], rtol=1e-6, atol=1e-7)
    assert np.abs(finals["stale trace"] - finals["eager"]).max() > 1e-4  # momentum ignored
    # the rule writes the last update into the buffer while momentum is 0, the fused path
    # leaves it at 0: after the switch the two differ, by the momentum of that update only
    assert np.abs(finals["rule traced"] - finals["eager"]).max() > 0


def make_run(tmp_path, optimizer: str, hypers: dict) -> tuple[RunLoop, RunStore, int]:
    config = RunConfig(optimizer=optimizer, hyperparameters=hypers, dataset="moons",
                       model="logistic", batch_size=32, steps=200, eval_every=1000)
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    run = RunLoop(run_id, store, Engine(config, "/CPU:0"), total=config.steps,
                  eval_every=config.eval_every, record=lambda s: True, histogram=lambda s: False,
                  handlers=HANDLERS)
    run.buffers["hyper_changes"] = [HyperChangeRow(1, n, None, v, "init")
                                    for n, v in run.engine.optimizer.hyper_values().items()]
    return run, store, run_id


def send(run: RunLoop, name: str, value: float) -> str:
    payload = {"name": name, "value": value, "source": "user"}
    command_id = run.store.send_command(run.run_id, "set_hyper", payload)
    return run.handle({"id": command_id, "kind": "set_hyper", "payload": json.dumps(payload)})


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop"])
def test_the_run_loop_retraces_once_when_momentum_crosses_zero(tmp_path, optimizer):
    run, store, run_id = make_run(tmp_path, optimizer, {"learning_rate": 0.05})
    try:
        for _ in range(3):
            run.one_step()
        assert run.engine.tracing_count() == 1
        assert send(run, "momentum", 0.5) == "done"  # 0 -> on: the regime changes
        assert run.engine.tracing_count() == 2
        slot = run.engine.optimizer.get_slot(run.engine.variables[0], "momentum")
        assert not np.any(slot.numpy())  # Keras's plain regime left the buffer alone
        run.one_step()
        assert np.any(slot.numpy())  # the momentum kernel now runs in the traced step
        assert send(run, "momentum", 0.25) == "done"  # same regime: an assign
        assert run.engine.tracing_count() == 2
        assert send(run, "momentum", 0.0) == "done"  # back to plain: one more retrace
        assert run.engine.tracing_count() == 3
        before = slot.numpy().copy()
        run.one_step()
        np.testing.assert_array_equal(slot.numpy(), before)
        run.flush(wait=True)
        rows = store.hyper_changes(run_id)
        traced = rows[rows["name"] == TRACES_ROW]
        assert traced[["step", "old", "new"]].values.tolist() == [[4, 1, 2], [5, 2, 3]]
        assert all("momentum regime (retrace)" in s for s in traced["source"])
    finally:
        run.close()


def test_the_fused_keyword():
    with pytest.raises(TypeError, match=r"fused=1 refused: must be True or False"):
        Adam(fused=1)
    assert "fused" not in Adam().get_config()  # a default config has exactly Keras's keys
    assert set(Adam().get_config()) == set(LEGACY.Adam().get_config()) | {"epsilon", "decay"}
    config = RMSprop(momentum=0.5, fused=False).get_config()
    assert config["fused"] is False
    clone = RMSprop.from_config(config)
    assert clone.fused is False and clone.get_config() == config
    assert SGD.from_config(SGD().get_config()).fused is True


class SignSGD(SGD):
    """A student's optimizer: SGD's class with its own rule, the sign of the gradient."""

    def update(self, grad, var, slots, coeffs):
        return var - coeffs["lr_t"] * tf.sign(grad), {}


class RenamedSGD(SGD):
    """A subclass that keeps SGD's rule (only its name differs)."""


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_a_subclass_with_its_own_rule_runs_it_not_the_inherited_kernel(momentum):
    grad = tf.constant([0.5, -4.0, 0.0])
    opt = SignSGD(0.1, momentum)
    var = tf.Variable([1.0, -2.0, 3.0])
    opt.apply_gradients([(grad, var)])  # eager: lr * sign(grad), not lr * grad
    np.testing.assert_allclose(var.numpy(), [0.9, -1.9, 3.0], rtol=1e-6)

    @tf.function
    def step():
        opt.apply_gradients([(grad, var)])

    ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
    assert not {t for t in ops if t.startswith("ResourceApply")}, ops
    step()
    np.testing.assert_allclose(var.numpy(), [0.8, -1.8, 3.0], rtol=1e-6)
    rows = tf.Variable([[1.0, 1.0], [2.0, 2.0]])  # the sparse path runs the subclass's rule too
    opt.apply_gradients([(tf.IndexedSlices(tf.constant([[3.0, -3.0]]), tf.constant([1])),
                          rows)])
    np.testing.assert_allclose(rows.numpy(), [[1.0, 1.0], [1.9, 2.1]], rtol=1e-6)
    assert dense_kernel(opt, var) is None
    kernel = "ResourceApplyKerasMomentum" if momentum else "ResourceApplyGradientDescent"
    assert dense_kernel(RenamedSGD(0.1, momentum), var) == kernel  # SGD's rule: its kernel
