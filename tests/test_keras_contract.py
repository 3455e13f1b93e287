"""The Keras 2 hyperparameter contract of SGD, Adam, RMSprop, Adagrad against NumPy references.

Written from the `OptimizerV2` documentation: `_set_hyper` takes floats, callables, tensors and
(learning_rate) `LearningRateSchedule`s; `_decayed_lr` evaluates a schedule at `iterations` and
divides by 1 + decay * iterations; `get_config` writes a schedule as
`{"class_name", "config"}` and a callable as its value. The references (tests/numpy_reference.py)
get the effective learning rate computed here in NumPy at every step, dense and sparse (lazy:
only the rows of the `IndexedSlices` change), in float16/32/64 and complex where Keras allows.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from hypergrad.reverse import hyper_constants
from optimizers.adagrad import Adagrad
from optimizers.adam import Adam
from optimizers.hyperparams import InvalidHyperparameter
from optimizers.rmsprop import RMSprop
from optimizers.keras_schedules import ALLOWED_SCHEDULES, schedule_from_config
from optimizers.sgd import SGD
from tests.numpy_reference import REFERENCES, initial_slots

S = tf_keras.optimizers.schedules
CLASSES = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adagrad": Adagrad}
# Other hyperparameters per optimizer (floats; the "callable"/"tensor" kinds wrap the second).
OTHERS = {"sgd": {"momentum": 0.5}, "adam": {"beta_1": 0.75, "beta_2": 0.875},
          "rmsprop": {"rho": 0.75, "momentum": 0.5}, "adagrad": {"epsilon": 0.0625}}
LR0, DECAY, STEPS = 0.0625, 0.25, 6


def np_exponential(it):  # ExponentialDecay(LR0, 2, 0.5), computed in float32 like Keras
    return np.float32(LR0) * np.float32(0.5) ** (np.float32(it) / np.float32(2))


# kind -> (constructor kwargs factory, effective lr at iteration `it` (0-based) as float32)
KINDS = {
    "float": (lambda o: {"learning_rate": LR0, **o}, lambda it: np.float32(LR0)),
    "schedule": (lambda o: {"learning_rate": S.ExponentialDecay(LR0, 2, 0.5), **o},
                 np_exponential),
    "decay": (lambda o: {"learning_rate": LR0, "decay": DECAY, **o}, None),
    "schedule+decay": (lambda o: {"learning_rate": S.ExponentialDecay(LR0, 2, 0.5),
                                  "decay": DECAY, **o}, None),
    "callable": (lambda o: {"learning_rate": lambda: LR0,
                            **{k: (lambda v=v: v) for k, v in o.items()}},
                 lambda it: np.float32(LR0)),
    "tensor": (lambda o: {"learning_rate": tf.constant(LR0),
                          **{k: tf.constant(v) for k, v in o.items()}},
               lambda it: np.float32(LR0)),
    "variable": (lambda o: {"learning_rate": tf.Variable(LR0), **o}, lambda it: np.float32(LR0)),
}


def effective_lr(kind, it, dtype):
    """The learning rate `_decayed_lr(dtype)` gives at 0-based iteration `it`."""
    base = np_exponential(it) if kind.startswith("schedule") else np.float32(LR0)
    lr = dtype.type(base)
    if "decay" in kind:
        lr = lr / (dtype.type(1) + dtype.type(DECAY) * dtype.type(it))
    return lr


TOL = {"float16": 2e-2, "float32": 2e-5, "float64": 1e-9, "complex64": 2e-5,
       "complex128": 1e-9}
CASES = [(name, kind, dtype) for name in CLASSES for kind in KINDS
         for dtype in ("float16", "float32", "float64")]
CASES += [(name, kind, dtype) for name in ("sgd", "adagrad", "rmsprop")
          for kind in ("float", "schedule+decay") for dtype in ("complex64", "complex128")]


def grads_for(dtype, t, rows):
    g = np.cos(np.arange(rows * 3.0).reshape(rows, 3) * (t + 1) + 0.5)
    if np.dtype(dtype).kind == "c":
        g = g + 0.25j * g[::-1]
    return g.astype(dtype)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name,kind,dtype", CASES)
def test_every_hyperparameter_kind_matches_numpy(name, kind, dtype, sparse):
    others = dict(OTHERS[name])
    if np.dtype(dtype).kind == "c" and name == "rmsprop":
        others["momentum"] = 0.0  # the reference compares momentum > 0: real momentum only
    opt = CLASSES[name](**KINDS[kind][0](others))
    np_dtype = np.dtype(dtype)
    init = (np.linspace(-1, 1, 12).reshape(4, 3) * (1 + 0.5j if np_dtype.kind == "c" else 1))
    init = init.astype(dtype)
    var = tf.Variable(init)
    ref_var, ref_slots = init.copy(), initial_slots(name, init, {})
    rows = np.array([0, 2]) if sparse else np.arange(4)
    for it in range(STEPS):
        grad = grads_for(dtype, it, len(rows))
        tf_grad = tf.constant(grad)
        if sparse:
            tf_grad = tf.IndexedSlices(tf_grad, tf.constant(rows), tf.constant([4, 3]))
        opt.apply_gradients([(tf_grad, var)])
        # hyperparameters live in float32 (variables or float32 tensors/constants)
        hypers = {k: float(np.float32(v)) for k, v in others.items()}
        hypers["learning_rate"] = effective_lr(kind, it, np_dtype)
        if name != "adagrad":
            hypers.setdefault("epsilon", float(np.float32(1e-7)))
        sub_slots = {k: v[rows] for k, v in ref_slots.items()}
        new_rows, new_slots = REFERENCES[name](grad, ref_var[rows], sub_slots, hypers, it + 1, {})
        ref_var[rows] = new_rows
        for k in ref_slots:
            ref_slots[k][rows] = new_slots[k]
    tol = TOL[dtype]
    np.testing.assert_allclose(var.numpy(), ref_var, rtol=tol, atol=tol)
    for slot, expected in ref_slots.items():
        np.testing.assert_allclose(opt.get_slot(var, slot).numpy(), expected, rtol=tol,
                                   atol=tol, err_msg=slot)
    assert np.max(np.abs(ref_var - init)) > 1e-3


@pytest.mark.parametrize("name", CLASSES)
def test_hyper_tensors_and_hypergradient_constants_see_the_decayed_lr(name):
    opt = CLASSES[name](**KINDS["schedule+decay"][0](OTHERS[name]))
    var = tf.Variable([1.0, -2.0], dtype=tf.float64)
    for _ in range(3):
        opt.apply_gradients([(tf.constant([0.5, 0.25], tf.float64), var)])
    expected = effective_lr("schedule+decay", 3, np.dtype("float64"))
    assert opt.hyper_tensors(tf.float64)["learning_rate"].numpy() == pytest.approx(expected,
                                                                                  rel=1e-7)
    assert hyper_constants(opt, tf.float64)["learning_rate"].numpy() == pytest.approx(expected,
                                                                                     rel=1e-7)


# ----- config round-trips ----------------------------------------------------------------------
SCHEDULES = {
    "ExponentialDecay": lambda: S.ExponentialDecay(0.1, 3, 0.5, staircase=True),
    "InverseTimeDecay": lambda: S.InverseTimeDecay(0.1, 2, 0.5),
    "PiecewiseConstantDecay": lambda: S.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]),
    "PolynomialDecay": lambda: S.PolynomialDecay(0.1, 5, 0.01, power=0.5, cycle=True),
    "CosineDecay": lambda: S.CosineDecay(0.0, 6, alpha=0.1, warmup_target=0.1, warmup_steps=2),
    "CosineDecayRestarts": lambda: S.CosineDecayRestarts(0.1, 3, t_mul=2.0, m_mul=0.5),
}


def test_allow_list_is_exactly_the_documented_schedule_classes():
    assert set(ALLOWED_SCHEDULES) == set(SCHEDULES)


def run_steps(opt, n=7):
    var = tf.Variable([1.0, -2.0, 0.5])
    for t in range(n):
        opt.apply_gradients([(tf.constant([0.5, -0.25, 1.0]) * (t + 1), var)])
    return var.numpy()


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", CLASSES)
def test_schedule_config_round_trips_through_json(name, schedule):
    opt = CLASSES[name](learning_rate=SCHEDULES[schedule](), decay=0.125, **OTHERS[name])
    config = json.loads(json.dumps(opt.get_config()))
    assert config["learning_rate"]["class_name"] == schedule
    assert config["learning_rate"]["config"] == SCHEDULES[schedule]().get_config()
    assert config["decay"] == 0.125
    clone = CLASSES[name].from_config(config)
    assert json.loads(json.dumps(clone.get_config())) == config
    np.testing.assert_allclose(run_steps(clone), run_steps(
        CLASSES[name](learning_rate=SCHEDULES[schedule](), decay=0.125, **OTHERS[name])),
        rtol=1e-7)
    if name == "adagrad":
        return  # Keras's own Adagrad.from_config does not deserialize a schedule dict
    # and Keras reads our config (same format as its own)
    keras_cls = getattr(tf_keras.optimizers.legacy, CLASSES[name].__name__)
    keras_opt = keras_cls.from_config({k: v for k, v in config.items()
                                       if k in keras_cls().get_config()})
    assert type(keras_opt.learning_rate).__name__ == schedule


@pytest.mark.parametrize("name", CLASSES)
def test_callables_tensors_and_variables_serialize_as_their_value(name):
    other, value = next(iter(OTHERS[name].items()))
    current = {"v": value}
    for kind, wrap in [("callable", lambda v: (lambda: v)),
                       ("tensor", tf.constant), ("variable", tf.Variable)]:
        opt = CLASSES[name](learning_rate=wrap(0.25), **{other: wrap(value)})
        config = json.loads(json.dumps(opt.get_config()))
        assert config["learning_rate"] == 0.25 and config[other] == value, kind
        assert config["decay"] == 0.0
        clone = CLASSES[name].from_config(config)
        assert clone.get_config() == config
    current["v"] = value / 2  # a callable is serialized as its value at serialization time
    opt = CLASSES[name](**{other: lambda: current["v"]})
    assert opt.get_config()[other] == value / 2


def test_the_config_keras_writes_round_trips():
    """What Keras itself writes: SGD with momentum has its `decay` key, and a schedule's own
    `get_config` (`"name": None`, float `decay_steps`) goes back through `from_config`."""
    from optimizers.sgd import SGD

    config = SGD(momentum=0.9).get_config()
    assert config["decay"] == 0.0 and config["momentum"] == pytest.approx(0.9)
    schedule = tf_keras.optimizers.schedules.InverseTimeDecay(0.1, 10.0, 0.5)
    written = json.loads(json.dumps(Adam(learning_rate=schedule).get_config()))
    assert written["learning_rate"]["config"]["name"] is None
    assert written["learning_rate"]["config"]["decay_steps"] == 10.0
    clone = Adam.from_config(written)
    rebuilt = clone._hyper["learning_rate"]
    assert type(rebuilt).__name__ == "InverseTimeDecay"
    assert float(rebuilt(20)) == pytest.approx(0.1 / (1 + 0.5 * 20 / 10.0), rel=1e-6)
    assert json.loads(json.dumps(clone.get_config())) == written


# ----- refusals --------------------------------------------------------------------------------
BAD_CONFIGS = [
    ("unknown class", {"class_name": "LambdaSchedule", "config": {}},
     "learning_rate.class_name"),
    ("a module path", {"class_name": "os.system", "config": {}}, "learning_rate.class_name"),
    ("the base class", {"class_name": "LearningRateSchedule", "config": {}},
     "learning_rate.class_name"),
    ("unknown key", {"class_name": "ExponentialDecay",
                     "config": {"initial_learning_rate": 0.1, "decay_steps": 2,
                                "decay_rate": 0.5, "exec": "x"}}, "learning_rate.config.exec"),
    ("nested object", {"class_name": "ExponentialDecay",
                       "config": {"initial_learning_rate": {"class_name": "ExponentialDecay"},
                                  "decay_steps": 2, "decay_rate": 0.5}},
     "learning_rate.config.initial_learning_rate"),
    ("piecewise lengths", {"class_name": "PiecewiseConstantDecay",
                           "config": {"boundaries": [10], "values": [0.1]}},
     "learning_rate.config"),
    ("zero decay_steps", {"class_name": "ExponentialDecay",
                          "config": {"initial_learning_rate": 0.1, "decay_steps": 0,
                                     "decay_rate": 0.5}}, "learning_rate.config"),
    ("missing argument", {"class_name": "InverseTimeDecay",
                          "config": {"initial_learning_rate": 0.1}}, "learning_rate.config"),
    ("not a schedule dict", {"config": {}}, "learning_rate"),
]


@pytest.mark.parametrize("case,data,field", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
@pytest.mark.parametrize("name", CLASSES)
def test_bad_schedule_configs_are_refused_naming_the_field(name, case, data, field):
    config = {**CLASSES[name]().get_config(), "learning_rate": data}
    with pytest.raises(InvalidHyperparameter) as error:
        CLASSES[name].from_config(config)
    assert error.value.name == field, str(error.value)
    assert str(error.value).startswith(f"{field}=")


@pytest.mark.parametrize("name", CLASSES)
def test_callables_and_tensors_in_a_config_are_refused(name):
    other = next(iter(OTHERS[name]))
    for value in (print, lambda: 0.1, tf.constant(0.1)):
        with pytest.raises(InvalidHyperparameter, match=f"^{other}="):
            CLASSES[name].from_config({**CLASSES[name]().get_config(), other: value})
    with pytest.raises(InvalidHyperparameter, match="^beta_1="):  # a schedule where not allowed
        Adam.from_config({**Adam().get_config(),
                          "beta_1": S.serialize(S.ExponentialDecay(0.9, 2, 0.5))})


def test_schedule_from_config_never_deserializes_by_name(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("deserialize must not be called on input")

    monkeypatch.setattr(S, "deserialize", forbidden)
    monkeypatch.setattr(tf_keras.saving, "deserialize_keras_object", forbidden)
    schedule = schedule_from_config("learning_rate", S.serialize(S.InverseTimeDecay(0.1, 2, 0.5)))
    assert float(schedule(4)) == pytest.approx(0.1 / (1 + 0.5 * 2))


LIBRARY_REFUSALS = [
    (SGD, {"momentum": 1.5}, "momentum"), (SGD, {"momentum": -0.1}, "momentum"),
    (RMSprop, {"momentum": 2.0}, "momentum"), (Adam, {"decay": -0.1}, "decay"),
    (SGD, {"decay": math.nan}, "decay"), (Adam, {"learning_rate": math.nan}, "learning_rate"),
    (Adam, {"learning_rate": "0.1"}, "learning_rate"), (Adam, {"beta_1": True}, "beta_1"),
    (Adam, {"learning_rate": tf.constant([0.1, 0.2])}, "learning_rate"),
    (Adam, {"beta_2": S.ExponentialDecay(0.9, 2, 0.5)}, "beta_2"),
    (Adagrad, {"epsilon": -1e-3}, "epsilon"), (RMSprop, {"lr": math.inf}, "learning_rate"),
]


@pytest.mark.parametrize("cls,kwargs,field", LIBRARY_REFUSALS,
                         ids=[f"{c.__name__}-{f}-{i}" for i, (c, _, f) in
                              enumerate(LIBRARY_REFUSALS)])
def test_values_keras_refuses_stay_refused_naming_the_field(cls, kwargs, field):
    with pytest.raises(InvalidHyperparameter) as error:
        cls(**kwargs)
    assert error.value.name == field


def test_live_change_of_a_float_hyperparameter_still_assigns_without_retrace():
    opt = SGD(learning_rate=S.ExponentialDecay(0.1, 2, 0.5), momentum=0.5)
    var = tf.Variable([1.0, 2.0])
    traces = []

    @tf.function
    def step(grad):
        traces.append(1)
        opt.apply_gradients([(grad, var)])

    step(tf.constant([1.0, 1.0]))
    first = len(traces)  # 1 or 2: a tf.function that creates variables traces twice
    momentum_var = opt._hyper["momentum"]
    opt.momentum = 0.0  # assigned to the existing variable
    assert opt._hyper["momentum"] is momentum_var
    before = var.numpy()
    step(tf.constant([1.0, 1.0]))
    assert len(traces) == first
    np.testing.assert_allclose(var.numpy(), before - 0.1 * 0.5 ** 0.5, rtol=1e-6)
