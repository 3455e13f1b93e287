"""The lessons table: every lesson opens, loads a valid setup, and its answer is what the lab
computes (numbers measured here, against the same code the pages run).

The hyper-gradient lesson's answer (one-step = exact after the first update, not later) is
asserted by `tests/test_hypergradients.py::test_one_step_equals_exact_after_first_update_only`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from streamlit.testing.v1 import AppTest

from optimizers import registry
from settings.run_config import RunConfig
from teaching import demos, lessons
from teaching.inspect_step import EMBEDDING_IDS, StepInspector
import views
from tests._pages import page_test

ROOT = Path(__file__).resolve().parents[1]


def number_in(text: str) -> float:
    """The first bold number of an answer, e.g. `**0.000316**` -> 0.000316."""
    return float(re.search(r"\*\*([0-9.]+)", text).group(1))


def test_table_is_well_formed():
    keys = [lesson.key for lesson in lessons.LESSONS]
    assert len(keys) == len(set(keys)) >= 10
    for lesson in lessons.LESSONS:
        assert re.fullmatch(r"[a-z0-9_]+", lesson.key)
        assert lesson.page in lessons.PAGES
        path = lessons.PAGE_URLS[lesson.page]
        assert path in views.TITLES and (ROOT / "views" / f"{path}.py").is_file()
        assert lesson.steps and lesson.check.endswith("?") and lesson.answer
        if lesson.run_setup:
            RunConfig(**lesson.run_setup)  # raises when the table holds an invalid run
    with pytest.raises(KeyError, match="known: momentum, bias_correction"):
        lessons.get("nope")


def closure_and_set_hyper_rows() -> tuple:
    """The demo's rows for a closure over a plain attribute and for `_set_hyper`."""
    table = demos.attribute_vs_set_hyper()
    return (table[table["how"].str.contains("closure")].iloc[0],
            table[table["how"].str.startswith("_set_hyper")].iloc[0])


def test_set_hyper_answer():
    closure, hyper = closure_and_set_hyper_rows()
    assert closure["value_returned_after"] == 0.0
    assert hyper["value_returned_after"] == 5.0 and hyper["traces_after"] == 1
    answer = lessons.get("set_hyper").answer
    assert "**0.0**" in answer and "**5.0**" in answer and "**1** trace" in answer


def test_slots_empty_answer():
    record = StepInspector("adam", "dense").step()
    assert record.slot_names_before == []
    assert record.slot_names_after == ["m", "v"]
    assert "`[]` before; `['m', 'v']` after" in lessons.get("slots_empty").answer


def test_prepare_local_answer():
    record = StepInspector("adam", "dense").step()
    assert len(record.var_before) == 2  # kernel and bias
    assert (record.calls["method"] == "_prepare_local").sum() == 1
    assert len(record.apply_state) == 1
    assert lessons.get("prepare_local").answer.startswith("**Once**")


def test_dense_sparse_answer():
    inspector = StepInspector("adam", "embedding")
    record = inspector.step()
    name = next(iter(record.var_before))
    in_batch = sorted(set(EMBEDDING_IDS.ravel().tolist()))
    changed = np.any(record.var_before[name] != record.var_after[name], axis=1)
    assert np.flatnonzero(changed).tolist() == in_batch
    m_after = record.slots_after[name]["m"]
    assert np.flatnonzero(np.any(m_after != 0, axis=1)).tolist() == in_batch


def test_bias_correction_answer():
    opt = registry.create("adam")
    hypers = {k: tf.constant(v, tf.float64) for k, v in opt.hyper_values().items()}
    lr_t = float(opt.coefficients(hypers, tf.constant(1.0, tf.float64))["lr_t"])
    assert lr_t == pytest.approx(0.001 * np.sqrt(1 - 0.999) / (1 - 0.9), rel=1e-12)
    assert number_in(lessons.get("bias_correction").answer) == pytest.approx(lr_t, rel=2e-3)


def test_momentum_answer():
    lr, grad = 0.01, 1.0
    opt = registry.create("sgd", {"learning_rate": lr, "momentum": 0.9})
    var = tf.Variable([0.0], dtype=tf.float64)
    for _ in range(300):  # 0.9**300 ~ 2e-14: the buffer is full
        before = float(var[0])
        opt.apply_gradients([(tf.constant([grad], tf.float64), var)])
    step = before - float(var[0])
    assert step / (lr * grad) == pytest.approx(10.0, rel=1e-6)
    assert lessons.get("momentum").answer.startswith("**10x**")


def second_steps_on_a_repeated_gradient() -> dict[str, np.ndarray]:
    """{"adam", "diffgrad"}: the second step of each on the same gradient twice (float64)."""
    hypers = {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
    moved = {}
    for name in ("adam", "diffgrad"):
        opt = registry.create(name, hypers)
        var = tf.Variable([1.0, -2.0], dtype=tf.float64)
        for _ in range(2):
            before = var.numpy().copy()
            opt.apply_gradients([(tf.constant([0.3, -0.1], tf.float64), var)])
        moved[name] = var.numpy() - before
    return moved


def test_diffgrad_answer():
    """xi = 0.5 where the gradient does not change: the step is half of Adam's."""
    moved = second_steps_on_a_repeated_gradient()
    np.testing.assert_allclose(moved["diffgrad"], 0.5 * moved["adam"], rtol=1e-9)
    assert "**[0.5, 1)**" in lessons.get("diffgrad").answer


def test_adamw_answer():
    opt = registry.create("adamw", {"learning_rate": 0.001, "weight_decay": 0.05})
    var = tf.Variable([2.0, -4.0], dtype=tf.float64)
    opt.apply_gradients([(tf.zeros([2], tf.float64), var)])
    factor = number_in(lessons.get("adamw").answer)
    # hyperparameters live in float32 variables: lr * weight_decay is exact to ~1e-7 relative
    np.testing.assert_allclose(var.numpy(), np.array([2.0, -4.0]) * factor, rtol=1e-10)


def test_the_app_opens_on_home_with_every_lesson(tmp_path, monkeypatch):
    from optimizer_plugins import plugin_discovery as plugins

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    # the app registers the plugins folder and exports it: undo both after the test
    monkeypatch.setattr(registry, "OPTIMIZERS", dict(registry.OPTIMIZERS))
    monkeypatch.setenv(plugins.ENV_VAR, str(plugins.DEFAULT_DIR))
    monkeypatch.setenv(plugins.LOADED_ENV_VAR, "")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    for lesson in lessons.LESSONS:
        assert lesson.title in text


@pytest.mark.parametrize("key", ["set_hyper", "dense_sparse"])
def test_a_lesson_link_sets_up_the_inside_step_page(key, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("inside_step", default_timeout=120)
    at.query_params["lesson"] = key
    at.run()
    assert not at.exception, at.exception
    lesson = lessons.get(key)
    assert at.session_state["is_model"] == lesson.page_state["is_model"]
    assert any(lesson.title in e.label for e in at.expander)
    shown = " ".join(c.value for c in at.caption)
    for claim in lesson.claims:  # each claim is on the page, with its numbers
        assert f"You will see: {claim.quantity}: {claim.expected}" in shown


def test_every_builtin_optimizer_has_its_rule_and_pure_sources():
    from optimizers.rule_source import pure_rule_sources
    from teaching import rule_math

    for name in ("adam", "adamw", "sgd", "rmsprop", "adagrad", "diffgrad", "accumulation",
                 "lookahead", "adadelta", "adamax", "ftrl", "nadam", "lion", "lamb", "adafactor",
                 "muon", "schedule_free_adamw"):
        assert rule_math.rule_for(name) is not None, name
    sources = pure_rule_sources(registry.entry("adam").class_path)
    assert "adam_update" in sources and "Adam.update" in sources
    assert pure_rule_sources(registry.entry("lookahead").class_path) == {}  # no pure rule


def test_keras3_answer():
    from teaching import migration

    table = migration.parity("adam", dtype=tf.float32)
    assert len(table) == 3 + 2 * 3  # 3 weights, m and v of each
    assert table["max_abs_difference"].max() == number_in(lessons.get("keras3").answer) == 0.0


def test_the_template_plugin_passes_the_contract_and_accumulates():
    """The own-optimizer lesson's template: every contract item passes, and k = 2 micro-steps
    with gradients g1, g2 equal one SGD step on their mean (the second step applies)."""
    from optimizer_plugins import plugin_discovery as plugins

    report = plugins.check_file(ROOT / "plugins" / "template_optimizer.py", register=False)
    assert report.error is None and [c.name for c in report.classes] == ["AccumulatedSGD"]
    assert report.classes[0].passed, report.classes[0].checks
    module, _ = plugins.import_plugin(ROOT / "plugins" / "template_optimizer.py")
    opt = module.AccumulatedSGD(learning_rate=0.1, accumulation_steps=2)
    var = tf.Variable([1.0, 2.0], dtype=tf.float64)
    g1, g2 = np.array([0.5, -1.0]), np.array([1.5, 3.0])
    opt.apply_gradients([(tf.constant(g1), var)])
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])  # collected, not applied
    opt.apply_gradients([(tf.constant(g2), var)])
    np.testing.assert_allclose(var.numpy(), np.array([1.0, 2.0]) - 0.1 * (g1 + g2) / 2,
                               rtol=1e-7)  # learning_rate lives in a float32 variable
    assert "`coefficients(hypers, step)`" in lessons.get("own_optimizer").answer


def test_glossary_explains_the_terms_the_pages_use():
    from teaching import glossary

    for term in ("tangent", "truncation horizon", "sign agreement", "RTHO", "asinh axis"):
        assert f"**{term}**" in glossary.explain()
    assert glossary.explain("tangent").startswith("- **tangent**: Z_t")
    with pytest.raises(KeyError, match="known: hyper-gradient"):
        glossary.explain("nope")


def test_a_page_without_its_run_offers_the_setup_that_starts_one(tmp_path, monkeypatch):
    """The Hyper-gradients page with no run links to the Train page set up by the lesson (as
    Markdown when the page runs alone, without the app's navigation)."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("hypergrad", default_timeout=120).run()
    assert not at.exception, at.exception
    assert any("(train?lesson=hypergradients)" in m.value for m in at.markdown)


def overflowing_step_row():
    """The step row of a mixed_float16 Adam run whose step 2 overflows on purpose."""
    from teaching import mixed_precision as mp

    run = mp.train("mixed_float16", "adam", steps=3, overflow_at=(2,))
    return run.steps[run.steps["step"] == 2].iloc[0]


def test_mixed_precision_answer():
    skipped = overflowing_step_row()
    assert bool(skipped["skipped"]) and skipped["max_weight_change"] == 0.0
    assert (skipped["loss_scale_before"], skipped["loss_scale_after"]) == (32768.0, 16384.0)
    assert "**unchanged**" in lessons.get("mixed_precision").answer


def test_set_hyper_kinds_from_live_calls():
    table = demos.hyper_kinds().set_index("kind")
    assert table.loc["float", "stored_before"] == "float"
    assert table.loc["float", "stored_after"] == "ResourceVariable"  # made by _create_hypers
    assert table.loc["scalar tensor", "stored_after"] == "EagerTensor"  # never a variable
    assert table.loc["callable", "stored_after"] == "function"
    assert table.loc["LearningRateSchedule", "get_hyper"] == "the ExponentialDecay itself"
    # ExponentialDecay(0.01, decay_steps=1, decay_rate=0.5) at iterations = 1: 0.01 * 0.5
    assert table.loc["LearningRateSchedule", "decayed_lr"] == pytest.approx(0.005)
    assert "ExponentialDecay" in table.loc["LearningRateSchedule", "serialized"]
    assert table.loc["callable", "serialized"] == pytest.approx(0.01)


# ----- the claims each lesson step makes about the page -------------------------------------
# Each function measures, with the code the page runs, what a `Claim` says the page shows; it
# returns the claim's bold numbers in order and asserts the claim's direction.
def _claim_adam_lr_t() -> list[float]:
    inspector = StepInspector("adam", "dense")
    lr_t = [next(iter(inspector.step().apply_state.values()))["lr_t"] for _ in range(30)]
    assert all(a > b for a, b in zip(lr_t[:11], lr_t[1:12]))  # falls to step 12 ...
    assert all(a < b for a, b in zip(lr_t[12:29], lr_t[13:30]))  # ... then rises
    return [lr_t[0], lr_t[1], lr_t[9], lr_t[11], lr_t[29]]


def _claim_adam_uncorrected() -> list[float]:
    g = np.array([0.3, -2.0])
    m, v = 0.1 * g, 0.001 * g**2  # Keras's defaults, one step from zero slots
    uncorrected, corrected = m / np.sqrt(v), (m / 0.1) / np.sqrt(v / 0.001)
    ratio = uncorrected / corrected
    assert np.allclose(ratio, ratio[0]) and ratio[0] > 1  # too large, for every coordinate
    return [float(ratio[0])]


def _momentum_val_loss(momentum: float, steps: int) -> float:
    from engine.train_step import Engine

    setup = dict(lessons.get("momentum").run_setup)
    setup["hyperparameters"] = {**setup["hyperparameters"], "momentum": momentum}
    engine = Engine(RunConfig(**setup), "/CPU:0")
    for _ in range(steps):
        engine.step(record=False)
    return engine.evaluate()[0]


def _claim_momentum_digits() -> list[float]:
    plain, heavy = _momentum_val_loss(0.0, 200), _momentum_val_loss(0.9, 200)
    assert plain - heavy > 0.3
    return [plain, heavy]


def _landscape_paths() -> tuple[np.ndarray, np.ndarray]:
    from teaching import landscape

    state = lessons.get("momentum").page_state
    runner = landscape.LandscapeRunner(state["ls_function"], [
        landscape.Racer("plain", "sgd"), landscape.Racer("momentum", "sgd")])
    runner.set_hypers("plain", {"learning_rate": state["ls_hp_sgd_learning_rate"],
                                "momentum": state["ls_hp_sgd_momentum"]})
    runner.set_hypers("momentum", {"learning_rate": state["ls_hp_sgd_learning_rate"],
                                   "momentum": 0.9})
    path, loss = runner.run_arrays((state["ls_x0"], state["ls_y0"]), state["ls_steps"])
    return path, loss


def _claim_momentum_zigzag() -> list[float]:
    path, _ = _landscape_paths()
    dy = np.sign(np.diff(path[:51, 0, 1]))
    changes = int((dy[1:] != dy[:-1]).sum())
    assert changes >= 45
    return [changes]


def _claim_momentum_landscape() -> list[float]:
    path, loss = _landscape_paths()
    plain, heavy = np.linalg.norm(path[-1], axis=1)
    assert heavy < plain / 10 and loss[-1, 1] < loss[-1, 0]
    return [plain, heavy]


def _claim_adamw_factor() -> list[float]:
    opt = registry.create("adamw", {"learning_rate": 0.001, "weight_decay": 0.05})
    var = tf.Variable([2.0], dtype=tf.float64)
    opt.apply_gradients([(tf.zeros([1], tf.float64), var)])
    return [float(var[0]) / 2.0]


def _claim_diffgrad_ratio() -> list[float]:
    moved = second_steps_on_a_repeated_gradient()
    ratio = moved["diffgrad"] / moved["adam"]
    assert np.allclose(ratio, ratio[0], rtol=1e-9)
    return [float(ratio[0])]


def _claim_set_hyper_values() -> list[float]:
    closure, hyper = closure_and_set_hyper_rows()
    return [closure["value_returned_after"], hyper["value_returned_after"]]


def _claim_slot_names() -> list[float]:
    record = StepInspector("adam", "dense").step()
    return [len(record.slot_names_before), len(record.slot_names_after)]


def _claim_prepare_local_calls() -> list[float]:
    record = StepInspector("adam", "dense").step()
    assert len(record.var_before) == 2
    return [int((record.calls["method"] == "_prepare_local").sum())]


def _claim_sparse_rows() -> list[float]:
    record = StepInspector("adam", "embedding").step()
    name = next(iter(record.var_before))
    changed = np.any(record.var_before[name] != record.var_after[name], axis=1)
    assert np.flatnonzero(changed).tolist() == sorted(set(EMBEDDING_IDS.ravel().tolist()))
    return [int(changed.sum())]


def _claim_template_contract() -> list[float]:
    from optimizer_plugins import plugin_discovery as plugins

    report = plugins.check_file(ROOT / "plugins" / "template_optimizer.py", register=False)
    return [sum(not check.passed for cls in report.classes for check in cls.checks)]


def _claim_one_step_first_update() -> list[float]:
    from tests.test_hypergradients import make_problem
    from hypergrad.forward import ForwardModeTrainer

    model, opt, (xt, yt, xv, yv), batches = make_problem("sgd")
    trainer = ForwardModeTrainer(model, opt, ["learning_rate"], xt, yt, xv, yv)
    trainer.step(batches[0])
    _, exact, one_step = trainer.hypergradients()
    return [abs(one_step["learning_rate"] - exact["learning_rate"]) / abs(exact["learning_rate"])]


def _claim_keras3_parity() -> list[float]:
    from teaching import migration

    return [float(migration.parity("adam", dtype=tf.float32)["max_abs_difference"].max())]


def _claim_loss_scale_halves() -> list[float]:
    skipped = overflowing_step_row()
    assert bool(skipped["skipped"])
    return [skipped["loss_scale_before"], skipped["loss_scale_after"]]


RAISED_AT, RAISED_TO, SETTLE_STEPS = 500, 0.4, 200  # the edge-of-stability lesson's step 3


@functools.lru_cache(maxsize=1)
def _edge_of_stability() -> dict[str, float]:
    """The edge-of-stability lesson's run, as the page records it: full-batch SGD at 0.2,
    sharpness every 25 steps until it reaches 2/lr (the recorded steps after that cannot move
    the first crossing, so they are skipped), the learning rate raised live to 0.4 at step 500
    and the sharpness read 200 steps later. ~700 full-batch steps and ~18 Lanczos runs of the
    digits MLP: the slowest claim of this file (~15-25 s)."""
    from components.dynamics_figures import REACH_TOLERANCE
    from engine.diagnostics import catalog
    from engine.diagnostics.recorder import Diagnostics
    from engine.train_step import Engine

    config = RunConfig(**lessons.get("edge_of_stability").run_setup)
    engine = Engine(config, "/CPU:0")
    diagnostics = Diagnostics(engine)
    out: dict[str, float] = {}
    for step in range(1, RAISED_AT + SETTLE_STEPS + 1):
        if step == RAISED_AT + 1:  # what the sidebar's live change does between two steps
            engine.optimizer._set_hyper("learning_rate", RAISED_TO)
        engine.step(record=False)
        due = step == 1 or step % config.sharpness_every == 0
        if due and "reached_step" not in out:
            rows = {r.name: r.value for r in diagnostics.sharpness_rows(step)}
            out.setdefault("first", rows[catalog.SHARPNESS])
            if rows[catalog.SHARPNESS] >= (1 - REACH_TOLERANCE) * rows[
                    catalog.SHARPNESS_THRESHOLD]:
                out["reached_step"], out["reached_value"] = step, rows[catalog.SHARPNESS]
    rows = {r.name: r.value for r in diagnostics.sharpness_rows(RAISED_AT + SETTLE_STEPS)}
    out["settled"], out["threshold"] = rows[catalog.SHARPNESS], rows[catalog.SHARPNESS_THRESHOLD]
    return out


def _claim_eos_reached() -> list[float]:
    run = _edge_of_stability()
    assert run["first"] < 0.5 * 10  # it starts far below 2/lr = 10 ...
    assert run["reached_step"] < RAISED_AT  # ... and reaches it before the raise
    return [run["reached_step"], run["reached_value"]]


def _claim_eos_settles() -> list[float]:
    run = _edge_of_stability()
    assert run["threshold"] == pytest.approx(2 / RAISED_TO, rel=1e-6)
    assert run["settled"] < 0.8 * run["reached_value"]  # it fell with the threshold
    assert abs(run["settled"] - run["threshold"]) < 0.25 * run["threshold"]  # to the new line
    return [run["settled"]]


def test_edge_of_stability_answer():
    from engine.diagnostics import catalog

    assert catalog.sharpness_threshold("sgd", {"momentum": 0.9}, {}, 0.01) == \
        pytest.approx(number_in(lessons.get("edge_of_stability").answer))
    assert catalog.sharpness_threshold("sgd", {"momentum": 0.9}, {"nesterov": True}, 0.01) == \
        pytest.approx(136, abs=0.5)
def _claim_lion_steps() -> list[float]:
    from teaching import zoo_demos

    ratios = zoo_demos.lion_step_lengths()
    assert np.all(ratios == 1.0)  # every coordinate, every step: exactly the learning rate
    return [float(ratios.min()), float(ratios.max())]


def _claim_lion_zero_betas() -> list[float]:
    from teaching import zoo_demos

    d = zoo_demos.lion_derivatives()
    assert d["d_beta_1"] == d["d_beta_2"] == 0.0 and d["d_lr"] != 0.0
    return [d["d_beta_1"], d["d_beta_2"]]


def _claim_lion_lr_from_signs() -> list[float]:
    from teaching import zoo_demos

    d = zoo_demos.lion_derivatives()
    assert abs(d["d_lr"] - d["d_lr_from_signs"]) <= 1e-12 * abs(d["d_lr"])
    return [d["d_lr"] / d["d_lr_from_signs"]]


def _claim_adafactor_slots() -> list[float]:
    from teaching import zoo_demos

    sizes = zoo_demos.adafactor_slot_sizes()
    assert sizes["r"] + sizes["c"] == number_in(lessons.get("adafactor").answer) == 512
    return [sizes["r"], sizes["c"], sizes["v"]]


def _claim_muon_singular_values() -> list[float]:
    from teaching import zoo_demos

    values = zoo_demos.muon_singular_values()
    assert 0.5 < values.min() < values.max() < 1.3  # near 1, not exactly 1
    return [float(values.min()), float(values.max())]


def _claim_muon_update_rms() -> list[float]:
    from teaching import zoo_demos

    rms = zoo_demos.muon_update_rms()
    assert 0.1 < rms <= 0.2  # about rms_rate: the singular values are a bit below 1
    return [rms]


def _claim_schedule_free_weights() -> list[float]:
    from teaching import zoo_demos

    weights = zoo_demos.schedule_free_average_weights()
    assert all(w > 1 / t for t, w in enumerate(weights, start=1) if t > 1)  # above Keras's 1/t
    return [weights[0], weights[1], weights[2], weights[9]]


def _claim_schedule_free_live_mean() -> list[float]:
    from teaching import conventions as cv

    w, mean = cv.schedule_free_live_mean(30, 0.01)
    gap = float(np.abs(w - mean).max())
    assert gap < 1e-12
    return [gap]
def _claim_lr_range_marks() -> list[float]:
    from engine import lr_range, lr_range_sweep

    rows = lr_range_sweep.sweep_config(RunConfig(**lessons.get("lr_range").run_setup))
    result = lr_range.analyse([r.learning_rate for r in rows], [r.loss for r in rows])
    assert result.steepest < result.minimum < result.divergence < result.blowup
    return [result.steepest, result.divergence]


def path_distances() -> dict[str, tuple[float, float]]:
    """optimizer -> (||theta_200 - theta_0||, % of it the plane shows) of the lesson's setup."""
    from engine.path_landscape import PathLandscape
    from engine.train_step import Engine

    out = {}
    for optimizer in ("adam", "sgd"):
        config = RunConfig(**{**lessons.get("path_landscape").run_setup,
                              "optimizer": optimizer})
        engine = Engine(config, "/CPU:0")
        landscape = PathLandscape(engine.model, config.model, engine.dataset, config.seed,
                                  config.dtype, engine.x_train, engine.y_train,
                                  config.path_landscape)
        for _ in range(config.steps):
            engine.step(record=False)
        row = landscape.distance_row(config.steps)
        out[optimizer] = (row.x, 100 * row.y)
    return out


def _claim_path_distances() -> list[float]:
    found = path_distances()
    (adam, adam_share), (sgd, sgd_share) = found["adam"], found["sgd"]
    assert adam > sgd and adam_share < 1.0 and sgd_share < 1.0
    assert number_in(lessons.get("path_landscape").answer) == pytest.approx(adam_share, abs=5e-3)
    return [adam, sgd, adam_share, sgd_share]


def test_lr_range_answer():
    """2/L of the quadratic the range test is measured on; that the test finds it within 20%
    is `tests/test_lr_range.py::test_divergence_point_is_within_20_percent_of_two_over_l_for_sgd`."""
    curvature = 4.0  # tests/test_lr_range.py's CURVATURE
    assert number_in(lessons.get("lr_range").answer) == 2 / curvature


CLAIMS = {name[len("_claim_"):]: fn for name, fn in globals().items()
          if name.startswith("_claim_")}
ALL_CLAIMS = [(lesson.key, claim) for lesson in lessons.LESSONS for claim in lesson.claims]
SLOW_CLAIMS = {"eos_reached", "eos_settles"}  # ~700 full-batch steps of the digits MLP


def test_every_lesson_states_claims_a_test_measures():
    for lesson in lessons.LESSONS:
        assert lesson.claims, f"{lesson.key}: no claim about what its page shows"
        for claim in lesson.claims:
            assert claim.measure in CLAIMS, f"{lesson.key}: no measurement {claim.measure!r}"
            assert 1 <= claim.step <= len(lesson.steps)
            assert re.search(r"\*\*[0-9.]+\*\*", claim.expected), claim


def test_lessons_form_a_path_concepts_first():
    stages = [lesson.stage for lesson in lessons.LESSONS]
    assert stages == sorted(stages) and set(stages) == set(range(len(lessons.STAGES)))


@pytest.mark.parametrize("key,claim", [
    pytest.param(k, c, marks=[pytest.mark.slow] if c.measure in SLOW_CLAIMS else [])
    for k, c in ALL_CLAIMS], ids=[f"{k}-{c.measure}" for k, c in ALL_CLAIMS])
def test_each_claim_holds_with_the_numbers_the_page_shows(key, claim):
    measured = CLAIMS[claim.measure]()
    shown = [float(n) for n in re.findall(r"\*\*([0-9.]+)\*\*", claim.expected)]
    assert len(shown) == len(measured), (claim.expected, measured)
    for text, value in zip(re.findall(r"\*\*([0-9.]+)\*\*", claim.expected), measured):
        digits = len(text.split(".")[1]) if "." in text else 0
        # printed with the digits it needs: equal to the measured value at that rounding
        # (three significant digits for the small ones)
        tolerance = max(0.5 * 10 ** -digits, 5e-3 * abs(value)) if digits else 0.5
        assert abs(float(text) - value) <= tolerance, (key, text, value)


def test_the_momentum_lesson_sets_up_the_landscape_page(tmp_path, monkeypatch):
    """The lesson's Landscape setup goes in before the page's widgets exist: the page opens on
    the ill-conditioned valley with SGD at the learning rate its claims were measured at."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("landscape", default_timeout=180)
    at.query_params["lesson"] = "momentum"
    at.run()
    assert not at.exception, at.exception
    state = lessons.get("momentum").page_state
    for key in ("ls_function", "ls_optimizers", "ls_hp_sgd_learning_rate", "ls_hp_sgd_momentum",
                "ls_x0", "ls_y0"):
        assert at.session_state[key] == state[key], key
    shown = " ".join(c.value for c in at.caption)
    assert "sign changes of the steep coordinate's step" in shown
