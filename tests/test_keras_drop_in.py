"""Drop-in: the same Keras code trains one model with `tf_keras.optimizers.legacy.X(**kwargs)` and
with the lab's `X(**kwargs)`; weights and every Keras slot agree after 20 steps (float32, 1e-6).

The table `DROP_IN` lists every supported constructor-argument kind per optimizer: schedules,
`decay`, callables, tensors and variables, `lr`, `epsilon=0` (both read it as 1e-7), momentum,
nesterov, amsgrad, centered, initial_accumulator_value and gradient clipping. Each row is a
factory so each optimizer gets its own objects (a schedule or callable is never shared).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers.adadelta import Adadelta
from optimizers.adagrad import Adagrad
from optimizers.adam import Adam
from optimizers.adamax import Adamax
from optimizers.ftrl import Ftrl
from optimizers.nadam import Nadam
from optimizers.rmsprop import RMSprop
from optimizers.sgd import SGD

K = tf_keras.optimizers.legacy
S = tf_keras.optimizers.schedules
LAB = {"SGD": SGD, "Adam": Adam, "RMSprop": RMSprop, "Adagrad": Adagrad, "Adadelta": Adadelta,
       "Adamax": Adamax, "Ftrl": Ftrl, "Nadam": Nadam}
STEPS, BATCH = 20, 8


def _exp():
    return S.ExponentialDecay(0.05, decay_steps=3, decay_rate=0.7)


DROP_IN = [
    ("SGD", "default", lambda: {}),
    ("SGD", "lr-alias", lambda: {"lr": 0.05}),
    ("SGD", "momentum", lambda: {"learning_rate": 0.05, "momentum": 0.9}),
    ("SGD", "nesterov", lambda: {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True}),
    ("SGD", "momentum-one", lambda: {"learning_rate": 0.01, "momentum": 1.0}),
    ("SGD", "exp-schedule", lambda: {"learning_rate": _exp(), "momentum": 0.5}),
    ("SGD", "decay", lambda: {"learning_rate": 0.1, "decay": 0.05, "momentum": 0.5}),
    ("SGD", "tensor-lr", lambda: {"learning_rate": tf.constant(0.05)}),
    ("SGD", "variable-lr", lambda: {"learning_rate": tf.Variable(0.05)}),
    ("SGD", "callable-momentum", lambda: {"learning_rate": 0.05, "momentum": lambda: 0.8}),
    ("SGD", "callable-lr", lambda: {"learning_rate": lambda: 0.03}),
    ("SGD", "clipnorm", lambda: {"learning_rate": 0.1, "clipnorm": 0.05}),
    ("SGD", "clipvalue", lambda: {"learning_rate": 0.1, "clipvalue": 0.01}),
    ("SGD", "global-clipnorm", lambda: {"learning_rate": 0.1, "global_clipnorm": 0.05}),
    ("Adam", "default", lambda: {}),
    ("Adam", "amsgrad", lambda: {"learning_rate": 0.01, "amsgrad": True}),
    ("Adam", "piecewise", lambda: {"learning_rate": S.PiecewiseConstantDecay([5, 12],
                                                                            [0.02, 0.01, 0.005])}),
    ("Adam", "cosine-warmup", lambda: {"learning_rate": S.CosineDecay(
        0.0, 20, alpha=0.1, warmup_target=0.02, warmup_steps=5)}),
    ("Adam", "decay", lambda: {"learning_rate": 0.02, "decay": 0.1}),
    ("Adam", "schedule-and-decay", lambda: {"learning_rate": _exp(), "decay": 0.1}),
    ("Adam", "callable-beta", lambda: {"learning_rate": 0.01, "beta_1": lambda: 0.8,
                                       "beta_2": lambda: 0.99}),
    ("Adam", "tensor-lr", lambda: {"learning_rate": tf.constant(0.01)}),
    ("Adam", "tensor-beta", lambda: {"learning_rate": 0.01, "beta_1": tf.constant(0.7)}),
    ("Adam", "epsilon-0", lambda: {"learning_rate": 0.01, "epsilon": 0}),
    ("Adam", "epsilon-big", lambda: {"learning_rate": 0.01, "epsilon": 0.1}),
    ("Adam", "clipnorm", lambda: {"learning_rate": 0.01, "clipnorm": 0.1, "amsgrad": True}),
    ("RMSprop", "default", lambda: {}),
    ("RMSprop", "centered", lambda: {"learning_rate": 0.01, "centered": True}),
    ("RMSprop", "momentum", lambda: {"learning_rate": 0.01, "momentum": 0.5}),
    ("RMSprop", "momentum-0", lambda: {"learning_rate": 0.01, "momentum": 0}),
    ("RMSprop", "centered-momentum", lambda: {"learning_rate": 0.01, "centered": True,
                                              "momentum": 0.9}),
    ("RMSprop", "inverse-time", lambda: {"learning_rate": S.InverseTimeDecay(0.01, 4, 0.5)}),
    ("RMSprop", "decay", lambda: {"learning_rate": 0.01, "decay": 0.2, "momentum": 0.5}),
    ("RMSprop", "epsilon-0", lambda: {"learning_rate": 0.01, "epsilon": 0}),
    ("RMSprop", "callable-rho", lambda: {"learning_rate": 0.01, "rho": lambda: 0.8}),
    ("RMSprop", "tensor-momentum", lambda: {"learning_rate": 0.01, "momentum": tf.constant(0.5)}),
    ("RMSprop", "variable-lr", lambda: {"learning_rate": tf.Variable(0.01)}),
    ("RMSprop", "clipnorm", lambda: {"learning_rate": 0.01, "clipnorm": 0.1}),
    ("Adagrad", "default", lambda: {}),
    ("Adagrad", "initial-accumulator", lambda: {"learning_rate": 0.1,
                                                "initial_accumulator_value": 0.5}),
    ("Adagrad", "initial-accumulator-int", lambda: {"learning_rate": 0.1,
                                                    "initial_accumulator_value": 1}),
    ("Adagrad", "epsilon-0", lambda: {"learning_rate": 0.1, "epsilon": 0}),
    ("Adagrad", "polynomial", lambda: {"learning_rate": S.PolynomialDecay(0.1, 10, 0.01,
                                                                         power=2.0)}),
    ("Adagrad", "restarts", lambda: {"learning_rate": S.CosineDecayRestarts(0.1, 4)}),
    ("Adagrad", "decay", lambda: {"learning_rate": 0.1, "decay": 0.3}),
    ("Adagrad", "tensor-lr", lambda: {"learning_rate": tf.constant(0.1)}),
    ("Adagrad", "clipvalue", lambda: {"learning_rate": 0.1, "clipvalue": 0.05}),
    ("Adadelta", "paper-lr", lambda: {"learning_rate": 1.0}),
    ("Adadelta", "rho-epsilon", lambda: {"learning_rate": 1.0, "rho": 0.8, "epsilon": 1e-4}),
    ("Adadelta", "lr-alias", lambda: {"lr": 2.0}),
    ("Adadelta", "epsilon-0", lambda: {"learning_rate": 1.0, "epsilon": 0}),
    ("Adadelta", "schedule", lambda: {"learning_rate": S.ExponentialDecay(2.0, 4, 0.6)}),
    ("Adadelta", "decay", lambda: {"learning_rate": 1.0, "decay": 0.2}),
    ("Adadelta", "callable-rho", lambda: {"learning_rate": 1.0, "rho": lambda: 0.7}),
    ("Adadelta", "tensor-lr", lambda: {"learning_rate": tf.constant(1.5)}),
    ("Adadelta", "variable-rho", lambda: {"learning_rate": 1.0, "rho": tf.Variable(0.9)}),
    ("Adadelta", "clipnorm", lambda: {"learning_rate": 1.0, "clipnorm": 0.05}),
    ("Adamax", "default", lambda: {}),
    ("Adamax", "betas", lambda: {"learning_rate": 0.01, "beta_1": 0.5, "beta_2": 0.8}),
    ("Adamax", "lr-alias", lambda: {"lr": 0.02}),
    ("Adamax", "epsilon-0", lambda: {"learning_rate": 0.01, "epsilon": 0}),
    ("Adamax", "epsilon-big", lambda: {"learning_rate": 0.01, "epsilon": 0.5}),
    ("Adamax", "cosine-warmup", lambda: {"learning_rate": S.CosineDecay(
        0.0, 20, alpha=0.1, warmup_target=0.02, warmup_steps=5)}),
    ("Adamax", "schedule-and-decay", lambda: {"learning_rate": _exp(), "decay": 0.1}),
    ("Adamax", "callable-betas", lambda: {"learning_rate": 0.01, "beta_1": lambda: 0.8,
                                          "beta_2": lambda: 0.9}),
    ("Adamax", "tensor-beta", lambda: {"learning_rate": 0.01, "beta_2": tf.constant(0.7)}),
    ("Adamax", "variable-lr", lambda: {"learning_rate": tf.Variable(0.01)}),
    ("Adamax", "global-clipnorm", lambda: {"learning_rate": 0.01, "global_clipnorm": 0.1}),
    ("Ftrl", "default", lambda: {"learning_rate": 0.05}),
    ("Ftrl", "l1-l2", lambda: {"learning_rate": 0.05, "l1_regularization_strength": 0.01,
                               "l2_regularization_strength": 0.1}),
    ("Ftrl", "shrinkage-beta", lambda: {"learning_rate": 0.05, "beta": 0.5,
                                        "l2_shrinkage_regularization_strength": 0.1}),
    ("Ftrl", "power-initial", lambda: {"learning_rate": 0.05, "learning_rate_power": -0.75,
                                       "initial_accumulator_value": 0.5}),
    ("Ftrl", "power-0", lambda: {"learning_rate": 0.01, "learning_rate_power": 0.0,
                                 "initial_accumulator_value": 0.0}),
    ("Ftrl", "piecewise", lambda: {"learning_rate": S.PiecewiseConstantDecay(
        [5, 12], [0.1, 0.05, 0.02])}),
    ("Ftrl", "decay", lambda: {"learning_rate": 0.1, "decay": 0.1}),
    ("Ftrl", "callable-beta", lambda: {"learning_rate": lambda: 0.05, "beta": lambda: 0.2}),
    ("Ftrl", "variable-l1", lambda: {"learning_rate": 0.05,
                                     "l1_regularization_strength": tf.Variable(0.02)}),
    ("Ftrl", "tensor-beta", lambda: {"learning_rate": 0.05, "beta": tf.constant(0.25)}),
    ("Ftrl", "clipvalue", lambda: {"learning_rate": 0.05, "clipvalue": 0.05}),
    ("Nadam", "default", lambda: {}),
    ("Nadam", "betas", lambda: {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.9}),
    ("Nadam", "schedule-decay", lambda: {"learning_rate": 0.01, "schedule_decay": 0.1}),
    # Keras writes schedule_decay as "decay" in its config (and reads no other decay)
    ("Nadam", "decay-as-keras-writes-it", lambda: {"learning_rate": 0.01, "decay": 0.004}),
    ("Nadam", "lr-alias", lambda: {"lr": 0.02}),
    ("Nadam", "epsilon-0", lambda: {"learning_rate": 0.01, "epsilon": 0}),
    ("Nadam", "epsilon-big", lambda: {"learning_rate": 0.01, "epsilon": 0.25}),
    ("Nadam", "callable-betas", lambda: {"learning_rate": 0.01, "beta_1": lambda: 0.7,
                                         "beta_2": lambda: 0.95}),
    ("Nadam", "tensor-lr", lambda: {"learning_rate": tf.constant(0.01)}),
    ("Nadam", "variable-beta", lambda: {"learning_rate": 0.01, "beta_1": tf.Variable(0.85)}),
    ("Nadam", "callable-lr", lambda: {"learning_rate": lambda: 0.02}),
    ("Nadam", "clipnorm", lambda: {"learning_rate": 0.01, "clipnorm": 0.1}),
]


def make_model(seed: int = 3) -> tf_keras.Model:
    tf_keras.utils.set_random_seed(seed)
    return tf_keras.Sequential([
        tf_keras.layers.Dense(6, activation="tanh", input_shape=(4,)),
        tf_keras.layers.Dense(2),
    ])


def train(optimizer) -> tf_keras.Model:
    """The user's code: compile and fit one small regression model for `STEPS` steps."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    y = np.stack([np.sin(x[:, 0] + x[:, 1]), x[:, 2] * x[:, 3]], axis=1).astype(np.float32)
    model = make_model()
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("opt_name,case,kwargs", [pytest.param(*row, id=f"{row[0]}-{row[1]}")
                                                  for row in DROP_IN])
def test_drop_in_same_weights_and_slots_after_20_steps(opt_name, case, kwargs):
    keras_opt = getattr(K, opt_name)(**kwargs())
    lab_opt = LAB[opt_name](**kwargs())
    keras_model, lab_model = train(keras_opt), train(lab_opt)
    assert int(keras_opt.iterations.numpy()) == int(lab_opt.iterations.numpy()) == STEPS
    moved = 0.0
    for k_var, l_var, init in zip(keras_model.trainable_variables,
                                  lab_model.trainable_variables, make_model().get_weights()):
        np.testing.assert_allclose(l_var.numpy(), k_var.numpy(), rtol=1e-6, atol=1e-6)
        moved = max(moved, float(np.max(np.abs(k_var.numpy() - init))))
        for slot in keras_opt.get_slot_names():
            np.testing.assert_allclose(lab_opt.get_slot(l_var, slot).numpy(),
                                       keras_opt.get_slot(k_var, slot).numpy(),
                                       rtol=1e-6, atol=1e-6, err_msg=f"{case}: slot {slot}")
    assert moved > 1e-4  # the comparison is not between two untrained models
    # the learning rate each one would use at the next step agrees too (schedules, decay);
    # Keras's Nadam reads it undecayed (its `_initial_decay` is the momentum schedule's decay)
    keras_lr = (keras_opt._get_hyper("learning_rate", tf.float32) if opt_name == "Nadam"
                else keras_opt._decayed_lr(tf.float32))
    np.testing.assert_allclose(lab_opt._decayed_lr(tf.float32).numpy(), keras_lr.numpy(),
                               rtol=1e-6)


def test_table_covers_every_constructor_argument():
    """Every keyword of each Keras built-in's signature, and `decay`, appears in one of its rows;
    the base class's keywords (lr, clipnorm, clipvalue, global_clipnorm) appear in the table."""
    import inspect

    all_used = set()
    for opt_name, lab_cls in LAB.items():
        params = set(inspect.signature(getattr(K, opt_name).__init__).parameters)
        params -= {"self", "name", "kwargs"}
        assert params <= set(inspect.signature(lab_cls.__init__).parameters)
        used = set().union(*(set(f()) for n, _, f in DROP_IN if n == opt_name))
        assert (params | {"decay"}) - used == set(), opt_name
        all_used |= used
    assert {"lr", "clipnorm", "clipvalue", "global_clipnorm"} <= all_used


# Adadelta's step is learning_rate * RMS[update] / RMS[grad] * grad, ~sqrt(epsilon) at first
# Nadam: Keras 2 refuses a schedule and reads `decay` as the momentum schedule's decay.
DTYPE_KWARGS = {
    "Adadelta": lambda: {"learning_rate": S.ExponentialDecay(20.0, decay_steps=3,
                                                             decay_rate=0.7), "decay": 0.05},
    "Nadam": lambda: {"learning_rate": 0.05, "schedule_decay": 0.1},
}


# Keras's Adamax has no bfloat16 dense kernel (the lab's runs the rule there); Keras's Nadam
# gives NaN in bfloat16 (its momentum cache loses every digit)
OTHER_FLOAT_DTYPES = [(n, d) for n in ("SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax",
                                        "Ftrl", "Nadam")
                      for d in ("float16", "bfloat16", "float64")
                      if (n, d) not in (("Adamax", "bfloat16"), ("Nadam", "bfloat16"))]


@pytest.mark.parametrize("opt_name,dtype", OTHER_FLOAT_DTYPES)
def test_drop_in_other_float_dtypes(opt_name, dtype):
    """Keras and the lab agree in every float dtype Keras supports (custom loop, 10 steps)."""
    def kwargs():  # a new schedule for each optimizer
        out = DTYPE_KWARGS.get(opt_name, lambda: {"learning_rate": _exp(), "decay": 0.05})()
        return {**out, "momentum": 0.5} if opt_name in ("SGD", "RMSprop") else out

    results = []
    for opt in (getattr(K, opt_name)(**kwargs()), LAB[opt_name](**kwargs())):
        var = tf.Variable(np.linspace(-1.0, 1.0, 12).reshape(3, 4), dtype=dtype)
        for t in range(10):
            grad = tf.cast(np.cos(np.arange(12.0).reshape(3, 4) * (t + 1)), dtype)
            opt.apply_gradients([(grad, var)])
        results.append(tf.cast(var, tf.float64).numpy())
    # float64: epsilon is a float32 variable here, a Python float in Keras (1e-7 vs 1.0000000e-7)
    tol = {"float16": 5e-3, "bfloat16": 3e-2, "float64": 1e-9}[dtype]
    np.testing.assert_allclose(results[1], results[0], rtol=tol, atol=tol)
    assert np.max(np.abs(results[0] - np.linspace(-1.0, 1.0, 12).reshape(3, 4))) > 1e-3


@pytest.mark.parametrize("opt_name", ["SGD", "RMSprop", "Adagrad", "Adadelta", "Nadam"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_drop_in_complex(opt_name, dtype):
    """SGD, RMSprop, Adagrad, Adadelta and Nadam take complex variables as the Keras built-ins
    do."""
    kwargs = {"learning_rate": 0.05}
    if opt_name in ("SGD", "RMSprop"):
        kwargs["momentum"] = 0.5
    results = []
    for opt in (getattr(K, opt_name)(**kwargs), LAB[opt_name](**kwargs)):
        base = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
        var = tf.Variable(base + 0.5j * base[::-1], dtype=dtype)
        for t in range(10):
            g = np.cos(np.arange(12.0).reshape(3, 4) * (t + 1))
            opt.apply_gradients([(tf.constant(g - 0.3j * g, dtype), var)])
        results.append(var.numpy())
    tol = 1e-5 if dtype == "complex64" else 1e-9  # epsilon: a float32 variable here
    np.testing.assert_allclose(results[1], results[0], rtol=tol, atol=tol)


# ----- dense and sparse, float32 and float64: weights and every Keras slot at every step -------
# Keras's sparse updates of these optimizers are kernels or plain ops whose semantics the lab
# keeps (Adadelta, Adamax and Ftrl: only the rows in the batch change, slots included; Nadam:
# every row's moments decay, only the rows in the batch move).
SPARSE_DROP_IN = [
    ("Adadelta", lambda: {"learning_rate": 1.0, "rho": 0.9}),
    ("Adadelta", lambda: {"learning_rate": S.InverseTimeDecay(2.0, 3, 0.5), "epsilon": 2**-16}),
    ("Adamax", lambda: {"learning_rate": 0.05}),
    ("Adamax", lambda: {"learning_rate": _exp(), "beta_1": 0.5, "decay": 0.1}),
    ("Ftrl", lambda: {"learning_rate": 0.1}),
    # -0.75: Keras keeps learning_rate_power in a float32 variable, the lab as a float option
    ("Ftrl", lambda: {"learning_rate": _exp(), "learning_rate_power": -0.75, "beta": 0.5,
                      "l1_regularization_strength": 0.001, "l2_regularization_strength": 0.125,
                      "l2_shrinkage_regularization_strength": 0.0625}),
    ("Nadam", lambda: {"learning_rate": 0.05}),
    ("Nadam", lambda: {"learning_rate": 0.02, "beta_1": 0.8, "schedule_decay": 0.1,
                       "epsilon": 2**-16}),
]
# max |lab - Keras| allowed over weights and slots, 8 steps: float32 rounding (Ftrl's sparse
# path: the rule on the rows against Keras's kernel, a few ulps of z per step); float64 is
# limited by the hyperparameters the lab keeps in float32 variables (Keras: Python floats)
DROP_IN_TOL = {"float32": 1e-5, "float64": 1e-9}
ROWS = [[0, 3], [1, 3, 4], [3], [0, 2, 4], [1], [0, 1, 2, 3, 4], [4, 0], [2]]


def sparse_drop_in_run(opt, dtype: str, sparse: bool) -> tuple[tf.Variable, list]:
    """8 steps on a [5, 3] table: the gradient of rows `ROWS[t]` as IndexedSlices, or the same
    rows as a dense gradient zero elsewhere; returns the variable and its state per step."""
    var = tf.Variable(np.linspace(-1.0, 1.0, 15).reshape(5, 3), dtype=dtype)
    states = []
    for t, rows in enumerate(ROWS):
        values = np.cos(np.arange(len(rows) * 3.0).reshape(len(rows), 3) * (t + 1) + 0.3)
        values = tf.constant(values, dtype)
        if sparse:
            grad = tf.IndexedSlices(values, tf.constant(rows), tf.constant([5, 3]))
        else:
            grad = tf.scatter_nd(tf.constant(rows)[:, None], values, [5, 3])
        opt.apply_gradients([(grad, var)])
        states.append(var.numpy().copy())
    return var, states


def drop_in_gap(opt_name: str, kwargs, dtype: str, sparse: bool) -> float:
    """max |lab - Keras| over the variable at every step and every Keras slot at the end."""
    keras_opt, lab_opt = getattr(K, opt_name)(**kwargs()), LAB[opt_name](**kwargs())
    k_var, k_states = sparse_drop_in_run(keras_opt, dtype, sparse)
    l_var, l_states = sparse_drop_in_run(lab_opt, dtype, sparse)
    gaps = [np.max(np.abs(a - b)) for a, b in zip(k_states, l_states)]
    assert keras_opt.get_slot_names(), opt_name
    for slot in keras_opt.get_slot_names():
        gaps.append(np.max(np.abs(lab_opt.get_slot(l_var, slot).numpy()
                                  - keras_opt.get_slot(k_var, slot).numpy())))
    if opt_name == "Nadam":  # Keras's non-slot momentum cache is the lab's m_cache slot
        gaps.append(abs(float(lab_opt.get_slot(l_var, "m_cache")) - float(keras_opt._m_cache)))
    assert np.max(np.abs(k_states[-1] - np.linspace(-1.0, 1.0, 15).reshape(5, 3))) > 1e-3
    return float(max(gaps))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("opt_name,kwargs", [pytest.param(n, k, id=f"{n}-{i}") for i, (n, k)
                                             in enumerate(SPARSE_DROP_IN)])
def test_drop_in_dense_and_sparse_weights_and_slots(opt_name, kwargs, dtype, sparse):
    assert drop_in_gap(opt_name, kwargs, dtype, sparse) <= DROP_IN_TOL[dtype]


def test_sparse_leaves_rows_outside_the_batch_as_keras_does():
    """Adadelta: a row absent from every batch keeps its value and zero slots (lazy), in Keras
    and in the lab; the dense path with the same zero rows is the same here."""
    for cls in (K.Adadelta, Adadelta):
        opt = cls(learning_rate=1.0)
        var = tf.Variable(np.ones((4, 2)))
        for _ in range(3):
            opt.apply_gradients([(tf.IndexedSlices(tf.ones((1, 2), tf.float64),
                                                   tf.constant([1]), tf.constant([4, 2])), var)])
        np.testing.assert_array_equal(var.numpy()[[0, 2, 3]], 1.0)
        assert np.all(var.numpy()[1] < 1.0)
        for slot in opt.get_slot_names():
            np.testing.assert_array_equal(opt.get_slot(var, slot).numpy()[[0, 2, 3]], 0.0)


@pytest.mark.parametrize("opt_name,kwargs", [
    *[pytest.param(n, {}, id=f"{n}-default") for n in LAB],
    pytest.param("SGD", {"momentum": 0.9}, id="SGD-momentum"),
    pytest.param("SGD", {"learning_rate": S.InverseTimeDecay(0.5, decay_steps=1.0,
                                                            decay_rate=0.1)}, id="SGD-schedule"),
    pytest.param("Adadelta", {"rho": 0.8, "epsilon": 1e-4, "decay": 0.01}, id="Adadelta-set"),
    pytest.param("Adamax", {"beta_2": 0.5, "learning_rate": _exp()}, id="Adamax-set"),
    pytest.param("Nadam", {"schedule_decay": 0.01, "beta_1": 0.8}, id="Nadam-set"),
    pytest.param("Ftrl", {"learning_rate_power": -0.75, "initial_accumulator_value": 0.5,
                          "beta": 0.5, "l2_shrinkage_regularization_strength": 0.25},
                 id="Ftrl-set"),
])
def test_keras_config_keys_defaults_and_round_trip(opt_name, kwargs):
    """Every key of Keras's `get_config()` is in the lab's with the same value (defaults
    included: `decay` too), and the lab's `from_config` rebuilds Keras's own config (a schedule
    as Keras writes it: `"name": None`, float `decay_steps`) to the same config."""
    keras_config = getattr(K, opt_name)(**kwargs).get_config()
    lab_config = LAB[opt_name](**kwargs).get_config()
    assert set(keras_config) <= set(lab_config), set(keras_config) - set(lab_config)
    for key, value in keras_config.items():
        if isinstance(value, float):  # Keras reads its hypers back from float32 variables
            assert np.float32(lab_config[key]) == np.float32(value), key
        else:
            assert lab_config[key] == value, key
    rebuilt = LAB[opt_name].from_config(dict(keras_config)).get_config()
    assert rebuilt == lab_config
