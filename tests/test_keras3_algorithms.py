"""Keras 3's newer algorithms as OptimizerV2 rules (Lion, Lamb, Adafactor).

* Keras 3 parity: the lab's class and its `keras.optimizers` namesake train the same model on the
  same batches for 20 steps, dense, float32; the weights and every slot agree to 1e-6. (Not
  float64: Keras 2 keeps every `_set_hyper` value in a float32 variable, beta_1 = 0.8999999762,
  where Keras 3 casts the Python float to float64, a ~1e-6 difference of its own.)
* Sparse gradients: Keras 3 densifies an `IndexedSlices` gradient (rows outside the batch see a
  zero gradient: their slots decay); the lab's sparse rule is checked against the NumPy
  reference (tests/numpy_reference.py) and the difference from Keras 3 is shown.
* Hyper-gradients: forward mode = reverse mode (1e-10) = finite differences (1e-5) in float64 on
  the hyper-gradient test model, and the derivatives that are 0 by construction are exactly 0.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypergrad.forward import ForwardModeTrainer
from hypergrad.reverse import (central_difference, read_state, relative_error,
                               reverse_hypergradient)
from optimizers import registry
from teaching import keras3_parity
from tests.numpy_reference import REFERENCES, initial_slots
from tests.test_hypergradients import make_problem, run_forward
from tests.test_optimizer_rules import float32_hypers

STEPS = 20
TOLERANCE = 1e-6  # float32, after STEPS steps

# name -> (lab hyperparameters, lab options, the Keras 3 optimizer, {lab slot: Keras 3 slot list})
KERAS3 = {
    "lion": ({"learning_rate": 0.01, "weight_decay": 0.1}, {},
             lambda: keras.optimizers.Lion(0.01, weight_decay=0.1),
             lambda opt: {"m": opt._momentums}),
    "lamb": ({"learning_rate": 0.01, "weight_decay": 0.1}, {},
             lambda: keras.optimizers.Lamb(0.01, weight_decay=0.1),
             lambda opt: {"m": opt._momentums, "v": opt._velocities}),
    "adafactor": ({"learning_rate": 0.5}, {}, lambda: keras.optimizers.Adafactor(0.5),
                  lambda opt: {"r": opt._r, "c": opt._c, "v": opt._v}),
    # Keras creates no velocity for a Muon variable (None): the lab's scalar placeholder there
    # is compared with 0
    "muon": ({"learning_rate": 0.01, "weight_decay": 0.1, "adam_weight_decay": 0.05}, {},
             lambda: keras.optimizers.Muon(0.01, weight_decay=0.1, adam_weight_decay=0.05),
             lambda opt: {"m": opt.momentums, "v": opt.adam_velocities}),
    "schedule_free_adamw": (
        {"learning_rate": 0.01, "weight_decay": 0.1}, {"keras3_tf_compat": True},
        lambda: keras.optimizers.ScheduleFreeAdamW(0.01, weight_decay=0.1),
        lambda opt: {"z": opt._momentums, "v": opt._velocities}),
}

# The parity model the Keras 3 page uses: a dense tanh layer (kernel [6, 4], bias [4]) and a
# rank-3 kernel [2, 3, 4] read through an einsum, so that every rank an optimizer treats
# differently (Adafactor: 1-D vs factored) is there.
INIT, BATCHES, model_loss = keras3_parity.problem(STEPS)


def train_pair(name: str):
    """The lab optimizer and its Keras 3 namesake after STEPS dense float32 steps: (lab weights,
    Keras weights, lab slots, Keras slots), slots as {(lab slot name, variable index): array}."""
    hypers, options, make_keras, keras_slots = KERAS3[name]
    lab = registry.create(name, hypers, options)
    stock = make_keras()
    lab_vars = [tf.Variable(v, dtype=tf.float32) for v in INIT]
    keras_vars = [keras.Variable(v, dtype="float32") for v in INIT]
    keras_tensors = [v.value for v in keras_vars]  # the tf.Variables a tape can watch
    for batch in BATCHES:
        for opt, variables, watched in ((lab, lab_vars, lab_vars),
                                        (stock, keras_vars, keras_tensors)):
            with tf.GradientTape() as tape:
                loss = model_loss(*watched, batch)
            opt.apply_gradients(zip(tape.gradient(loss, watched), variables))
    lab_slots = {(s, i): lab.get_slot(v, s).numpy()
                 for s in lab.get_slot_names() for i, v in enumerate(lab_vars)}
    stock_slots = {(s, i): np.zeros(()) if slot is None else np.asarray(tf.convert_to_tensor(slot))
                   for s, slots in keras_slots(stock).items() for i, slot in enumerate(slots)}
    stock_weights = [np.asarray(tf.convert_to_tensor(v)) for v in keras_vars]
    return [v.numpy() for v in lab_vars], stock_weights, lab_slots, stock_slots


def max_differences(name: str) -> tuple[float, float]:
    """(max |weight diff|, max |slot diff|) between the lab and Keras 3 after STEPS steps."""
    lab_w, stock_w, lab_s, stock_s = train_pair(name)
    assert lab_s.keys() == stock_s.keys() and lab_s
    for key in lab_s:
        assert lab_s[key].shape == stock_s[key].shape, key
    weights = max(float(np.abs(a - b).max()) for a, b in zip(lab_w, stock_w))
    slots = max(float(np.abs(lab_s[k] - stock_s[k]).max()) for k in lab_s)
    assert max(float(np.abs(a - b).max()) for a, b in zip(lab_w, INIT)) > 0.05  # it trained
    return weights, slots


@pytest.mark.parametrize("name", list(KERAS3))
def test_weights_and_every_slot_equal_keras3_after_20_steps(name):
    weights, slots = max_differences(name)
    print(f"{name}: max |weight diff| {weights:.2e}, max |slot diff| {slots:.2e}")
    assert weights <= TOLERANCE and slots <= TOLERANCE, (weights, slots)


def run_model(opt, variables) -> list[np.ndarray]:
    """The weights after STEPS steps of `opt` on the parity model (float32); `variables` are
    `tf.Variable`s (a lab optimizer) or `keras.Variable`s (a Keras 3 one)."""
    watched = [v.value if isinstance(v, keras.Variable) else v for v in variables]
    for batch in BATCHES:
        with tf.GradientTape() as tape:
            loss = model_loss(*watched, batch)
        opt.apply_gradients(zip(tape.gradient(loss, watched), variables))
    return [np.asarray(tf.convert_to_tensor(v)) for v in variables]


def test_keras3_adafactor_applies_the_relative_step_even_with_relative_step_false():
    """Keras 3.15's Adafactor takes min(learning_rate, 1/sqrt(t)) whatever `relative_step`
    says; the lab's relative_step=False uses learning_rate as given. With learning_rate 0.5
    (above 1/sqrt(t) from t = 5) the lab's absolute step parts from both."""
    def keras_run(**kwargs):
        return run_model(keras.optimizers.Adafactor(0.5, **kwargs),
                         [keras.Variable(v, dtype="float32") for v in INIT])

    def lab_run(relative_step):
        return run_model(registry.create("adafactor", {"learning_rate": 0.5},
                                         {"relative_step": relative_step}),
                         [tf.Variable(v, dtype=tf.float32) for v in INIT])

    stock_true, stock_false = keras_run(), keras_run(relative_step=False)
    lab_true, lab_false = lab_run(True), lab_run(False)
    for a, b, c in zip(stock_true, stock_false, lab_true):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c, a, atol=TOLERANCE)
    assert max(float(np.abs(a - b).max()) for a, b in zip(lab_false, stock_false)) > 0.1


def test_every_keras3_algorithm_is_registered_and_compared():
    assert {"lion", "lamb", "adafactor", "muon", "schedule_free_adamw"} & set(
        registry.names()) == set(KERAS3)


def test_muon_routes_as_keras3_every_2d_variable_but_embeddings_to_muon():
    """Keras 3.15 gives the momentum buffer to every variable and a velocity only to the AdamW
    ones: the 2-D kernel (an output layer's too) is Muon's, the bias, the rank-3 kernel and a
    2-D "embedding" table are AdamW's; `exclude_layers` adds by regular expression."""
    stock = keras.optimizers.Muon()
    kernel, bias = keras.Variable(INIT[0], name="kernel"), keras.Variable(INIT[1], name="bias")
    cube = keras.Variable(INIT[2], name="cube")
    table = keras.layers.Embedding(8, 3, name="embedding")
    table.build((None,))
    stock_vars = [kernel, bias, cube, table.embeddings]
    stock.build(stock_vars)
    keras_routes = ["adamw" if v is not None else "muon" for v in stock.adam_velocities]
    lab = registry.create("muon")
    lab_vars = [tf.Variable(INIT[0], name="dense/kernel"), tf.Variable(INIT[1], name="bias"),
                tf.Variable(INIT[2], name="cube"),
                tf.Variable(np.zeros((8, 3)), name="embedding/embeddings")]
    assert [lab.route_of(v) for v in lab_vars] == keras_routes == ["muon", "adamw", "adamw",
                                                                   "adamw"]
    lab._create_all_weights(lab_vars)
    assert lab.get_slot(lab_vars[0], "v").shape == ()  # placeholder: Keras has no velocity
    assert lab.get_slot(lab_vars[3], "v").shape == (8, 3)
    picky = registry.get("muon")(exclude_layers=["den.e"], exclude_embeddings=False)
    assert [picky.route_of(v) for v in lab_vars] == ["adamw", "adamw", "adamw", "muon"]


def test_schedule_free_paper_form_differs_from_keras3_and_the_snapshot_explains_the_rest():
    """The paper form (the default) is not Keras 3.15 on TensorFlow: measured after 20 steps on
    the parity model, weights differ by ~1e-2, far above the 1e-6 the compat form holds."""
    stock = run_model(keras.optimizers.ScheduleFreeAdamW(0.01),
                      [keras.Variable(v, dtype="float32") for v in INIT])
    paper = run_model(registry.create("schedule_free_adamw", {"learning_rate": 0.01}),
                      [tf.Variable(v, dtype=tf.float32) for v in INIT])
    compat = run_model(registry.create("schedule_free_adamw", {"learning_rate": 0.01},
                                       {"keras3_tf_compat": True}),
                       [tf.Variable(v, dtype=tf.float32) for v in INIT])
    gap = max(float(np.abs(a - b).max()) for a, b in zip(paper, stock))
    print(f"schedule-free paper vs Keras 3: {gap:.2e}")
    assert 1e-3 < gap < 1e-1
    assert max(float(np.abs(a - b).max()) for a, b in zip(compat, stock)) <= TOLERANCE


# ----- sparse gradients -------------------------------------------------------------------------
ROWS, COLUMNS = 8, 3
ID_BATCHES = [[1, 3, 3], [0, 1, 6], [6, 2, 2]]  # duplicate ids: their rows' gradients add up
UNIQUE_ID_BATCHES = [[1, 3, 5], [0, 1, 6], [6, 2, 7]]  # row 3 in the first batch only


def embedding_steps(opt, table, weights, batches=ID_BATCHES):
    """Apply one step per `batches` entry of loss = sum(table[ids] * weights) (an
    `IndexedSlices` gradient); yield (ids, the dense gradient) after each step."""
    for ids in batches:
        watched = table.value if isinstance(table, keras.Variable) else table
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(watched, ids) * weights)
        grad = tape.gradient(loss, watched)
        assert isinstance(grad, tf.IndexedSlices)
        opt.apply_gradients([(grad, table)])
        dense = np.zeros((ROWS, COLUMNS))
        np.add.at(dense, ids, weights)
        yield ids, dense


SPARSE = {  # name -> (hypers, options, lazy: only the batch's rows change)
    "lion": ({"learning_rate": 0.01, "weight_decay": 0.1}, {}, True),
    "lamb": ({"learning_rate": 0.01, "weight_decay": 0.1}, {}, True),
    "adafactor": ({"learning_rate": 0.5}, {}, False),
    "muon": ({"learning_rate": 0.01}, {}, False),
    "schedule_free_adamw": ({"learning_rate": 0.01}, {"keras3_tf_compat": True}, False),
}


@pytest.mark.parametrize("name", list(SPARSE))
def test_sparse_rule_matches_the_numpy_reference(name):
    """Lazy rules: the reference applied to the batch's rows only (rows outside keep their
    values and slots); densifying rules: the reference on the dense gradient (zero rows)."""
    hypers, options, lazy = SPARSE[name]
    rng = np.random.default_rng(5)
    init, weights = rng.normal(size=(ROWS, COLUMNS)), rng.normal(size=(3, COLUMNS))
    opt = registry.create(name, hypers, options)
    table = tf.Variable(init)
    ref_var, ref_slots = init.copy(), initial_slots(name, init, options)
    for t, (ids, grad) in enumerate(embedding_steps(opt, table, weights), start=1):
        rows = sorted(set(ids)) if lazy else list(range(ROWS))
        if lazy:
            new_rows, new_slots = REFERENCES[name](
                grad[rows], ref_var[rows], {k: v[rows] for k, v in ref_slots.items()},
                float32_hypers(opt), t, options)
            ref_var[rows] = new_rows
            for k in ref_slots:
                ref_slots[k][rows] = new_slots[k]
        else:
            ref_var, ref_slots = REFERENCES[name](grad, ref_var, ref_slots, float32_hypers(opt),
                                                  t, options)
        np.testing.assert_allclose(table.numpy(), ref_var, rtol=1e-10, atol=1e-12)
        for k, value in ref_slots.items():
            np.testing.assert_allclose(opt.get_slot(table, k).numpy(), value, rtol=1e-10,
                                       atol=1e-12, err_msg=f"slot {k} after step {t}")
    if lazy:  # rows 4, 5, 7 were in no batch: untouched
        np.testing.assert_array_equal(table.numpy()[[4, 5, 7]], init[[4, 5, 7]])


@pytest.mark.parametrize("name", list(SPARSE))
def test_keras3_densifies_sparse_gradients(name):
    """Keras 3 runs its dense rule on the densified gradient: it equals the NumPy reference on
    the dense gradient (zero rows included). Row 3 is in the first batch only: in Keras 3 its
    slots keep decaying at steps 2 and 3; a lazy lab rule leaves them as step 1 left them.
    (Batches without repeated ids: see the next test for what Keras 3 does with repeats.)"""
    hypers, options, make_keras, keras_slots = KERAS3[name]
    lazy = SPARSE[name][2]
    rng = np.random.default_rng(5)
    init = rng.normal(size=(ROWS, COLUMNS)).astype(np.float32)
    weights = rng.normal(size=(3, COLUMNS)).astype(np.float32)
    stock, table = make_keras(), keras.Variable(init, dtype="float32")
    lab, lab_table = registry.create(name, hypers, options), tf.Variable(init)
    ref_var, ref_slots = init, initial_slots(name, init, options)
    lab_steps = embedding_steps(lab, lab_table, weights, UNIQUE_ID_BATCHES)
    for t, (_, grad) in enumerate(embedding_steps(stock, table, weights, UNIQUE_ID_BATCHES),
                                  start=1):
        next(lab_steps)
        ref_var, ref_slots = REFERENCES[name](grad.astype(np.float32), ref_var, ref_slots,
                                              float32_hypers(lab), t, options)
        if t == 1 and lazy:
            after_first = {s: lab.get_slot(lab_table, s).numpy()[3].copy()
                           for s in lab.get_slot_names()}
    np.testing.assert_allclose(np.asarray(tf.convert_to_tensor(table)), ref_var, atol=1e-6)
    stock_slots = {s: np.zeros((), np.float32) if v[0] is None else np.asarray(
        tf.convert_to_tensor(v[0])) for s, v in keras_slots(stock).items()}
    for lab_name, value in stock_slots.items():
        np.testing.assert_allclose(value, ref_slots[lab_name], atol=1e-6, err_msg=lab_name)
    if not lazy:  # a densifying lab rule is Keras 3's, sparse or not
        np.testing.assert_allclose(lab_table.numpy(), ref_var, atol=1e-6)
        for lab_name, value in stock_slots.items():
            np.testing.assert_allclose(lab.get_slot(lab_table, lab_name).numpy(), value,
                                       atol=1e-6, err_msg=lab_name)
        return
    for lab_name, value in after_first.items():
        lab_row = lab.get_slot(lab_table, lab_name).numpy()[3]
        np.testing.assert_array_equal(lab_row, value)
        # Keras 3 decayed them twice more (Lion's m by beta_2**2 = 0.98): far above rounding
        assert not np.allclose(stock_slots[lab_name][3], lab_row, rtol=1e-3, atol=0), lab_name


def test_keras3_lamb_squares_repeated_rows_before_summing_them():
    """Keras 3.15's Lamb squares an `IndexedSlices` gradient's values before the repeated
    indices are summed: a row read twice (gradients g1, g2) gets v = (1 - beta_2)(g1**2 + g2**2)
    instead of (1 - beta_2)(g1 + g2)**2, the square of the row's gradient. The lab sums repeated
    rows first (OptimizerV2 does, before `_resource_apply_sparse`), as the dense rule implies."""
    g1, g2 = np.float32([0.5, -1.0, 2.0]), np.float32([1.5, 0.25, -1.0])
    table = keras.Variable(np.zeros((4, 3)), dtype="float32")
    stock = keras.optimizers.Lamb(0.01)
    stock.apply_gradients([(tf.IndexedSlices(tf.constant([g1, g2]), tf.constant([3, 3]),
                                             tf.constant([4, 3])), table)])
    lab, lab_table = registry.create("lamb", {"learning_rate": 0.01}), tf.Variable(np.zeros((4, 3)))
    lab.apply_gradients([(tf.IndexedSlices(tf.constant([g1, g2], tf.float64),
                                           tf.constant([3, 3]), tf.constant([4, 3])), lab_table)])
    one_minus_beta_2 = 1 - np.float32(0.999)
    np.testing.assert_allclose(np.asarray(tf.convert_to_tensor(stock._velocities[0]))[3],
                               one_minus_beta_2 * (g1**2 + g2**2), rtol=1e-4)
    np.testing.assert_allclose(lab.get_slot(lab_table, "v").numpy()[3],
                               one_minus_beta_2 * (g1 + g2) ** 2, rtol=1e-4)


# ----- hyper-gradients ---------------------------------------------------------------------------
FORWARD_REVERSE, FINITE = 1e-10, 1e-5
# Muon's 12 hyperparameters cost ~10x Lamb's check (the Newton-Schulz products under
# forward mode): CI follows one per role of the rule. All 12 agreed when measured (forward =
# reverse to 1e-10, = finite differences to 1e-5; listed in the Muon class docstring).
FOLLOWED = {"muon": ("learning_rate", "adam_beta_2", "momentum", "muon_a", "rms_rate")}
# Exactly zero by construction, not by rounding (see each class's docstring).
ZERO_HYPERGRADIENTS = {"lion": {"beta_1", "beta_2"}}


@pytest.mark.parametrize("case", list(KERAS3))
def test_hypergradients_forward_equals_reverse_equals_finite_differences(case):
    model, opt, (xt, yt, xv, yv), batches = make_problem(case)
    if case in FOLLOWED:  # a subset, for the test's time; all were checked once (docstring)
        trainer = ForwardModeTrainer(model, opt, list(FOLLOWED[case]), xt, yt, xv, yv)
        start = read_state(model, opt)
        for index in batches:
            trainer.step(index)
    else:
        trainer, start = run_forward(model, opt, (xt, yt, xv, yv), batches)
    _, forward, _ = trainer.hypergradients()
    window = [(tf.gather(xt, i), tf.gather(yt, i)) for i in batches]
    reverse = reverse_hypergradient(model, opt, start, window, trainer.followed, xv, yv)
    finite = central_difference(model, opt, start, window, trainer.followed, xv, yv,
                                relative_step=1e-7)
    zeros = ZERO_HYPERGRADIENTS.get(case, set())
    for name in trainer.followed:
        print(f"{case} d/d{name}: forward {forward[name]:.10g} reverse {reverse[name]:.10g} "
              f"finite {finite[name]:.10g}")
        if name in zeros:
            assert forward[name] == reverse[name] == finite[name] == 0.0, name
            continue
        assert forward[name] != 0.0 and np.isfinite(forward[name]), name
        assert relative_error(forward[name], reverse[name]) <= FORWARD_REVERSE, name
        assert relative_error(forward[name], finite[name]) <= FINITE, name


def test_a_schedule_free_run_is_validated_at_x_and_trains_on_y():
    """`engine.eval_point.at_eval_point` evaluates at x = (y - (1 - beta_1) z) / beta_1 inside
    a tf.function and gives y back bit for bit."""
    from engine.eval_point import at_eval_point
    from optimizers.schedule_free import eval_point

    opt = registry.create("schedule_free_adamw", {"learning_rate": 0.1})
    var = tf.Variable(INIT[0].astype(np.float32))
    for _ in range(3):
        opt.apply_gradients([(tf.ones_like(var), var)])
    y = var.numpy().copy()
    x = eval_point(var, opt.get_slot(var, "z"), tf.constant(np.float32(0.9))).numpy()
    assert np.abs(x - y).max() > 1e-3  # two different points

    @tf.function
    def evaluate():
        return at_eval_point([var], opt, lambda: tf.reduce_sum(var * var))

    np.testing.assert_allclose(evaluate().numpy(), np.sum(x * x), rtol=1e-6)
    np.testing.assert_array_equal(var.numpy(), y)
    assert at_eval_point([var], registry.create("adam"), lambda: 1.5) == 1.5  # no eval point


def test_the_pickers_slot_memory_table_is_what_the_real_slots_take():
    """`optimizers.slot_memory.BYTES_PER_PARAMETER` (shown TensorFlow-free in the optimizer
    picker's help) equals the bytes of the slots each optimizer really creates on the default
    MLP; Adafactor's factored r and c add 0.05 bytes to its v, Muon's AdamW biases 0.02."""
    from optimizers import slot_memory

    assert set(slot_memory.BYTES_PER_PARAMETER) == set(registry.names())
    variables = slot_memory.default_variables()  # one model: slot bytes do not depend on values
    measured = {name: slot_memory.measure(name, variables) for name in registry.names()}
    assert measured == slot_memory.BYTES_PER_PARAMETER
    assert "`muon`: 4.02 bytes/parameter" in slot_memory.help_table()


def test_the_run_records_muons_routing_per_variable_for_the_slots_view():
    from optimizers.routing import ROUTES_KEY
    from runs.process.run_loop import _slot_routes
    import tf_keras

    model = tf_keras.Sequential([tf_keras.layers.Embedding(8, 3, name="embedding"),
                                 tf_keras.layers.Dense(4, name="dense_1")])
    model.build((None, 2))
    routes = _slot_routes(registry.create("muon"), model.trainable_variables)
    assert routes == {ROUTES_KEY: {"embedding/embeddings": "adamw", "dense_1/kernel": "muon",
                                   "dense_1/bias": "adamw"}}
    assert _slot_routes(registry.create("adam"), model.trainable_variables) == {}


def test_schedule_free_keras3_compat_makes_beta_1_cancel_out():
    """With x_old rebuilt from the updated z, y_new = (1 - 1/t) y + z_new / t: the derivative
    of a step in beta_1 is 0 up to rounding (float64), where the paper form's is not."""
    rng = np.random.default_rng(1)
    var, grad = tf.constant(rng.normal(size=(4, 3))), tf.constant(rng.normal(size=(4, 3)))
    z = var + tf.constant(rng.normal(size=(4, 3)))
    derivatives = {}
    for compat in (True, False):
        rule = registry.create("schedule_free_adamw", {"learning_rate": 0.1},
                               {"keras3_tf_compat": compat})
        hypers = {k: tf.constant(v, tf.float64) for k, v in rule.hyper_values().items()}
        slots = {"z": z, "v": tf.fill((4, 3), tf.constant(0.5, tf.float64)),
                 "weight_sum": tf.constant(0.01, tf.float64)}
        with tf.GradientTape() as tape:
            tape.watch(hypers["beta_1"])
            new_var, _ = rule.update(grad, var, slots,
                                     rule.coefficients(hypers, tf.constant(3.0, tf.float64)))
            total = tf.reduce_sum(new_var)
        derivatives[compat] = float(tape.gradient(total, hypers["beta_1"]))
    assert abs(derivatives[True]) < 1e-12 < 1e-5 < abs(derivatives[False]), derivatives
