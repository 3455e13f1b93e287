"""`optimizers.hyper_kinds`: the table of what `_set_hyper` stored, `_get_hyper` returned and
`_serialize_hyperparameter` wrote, checked against NumPy casts and against live calls made here."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers import hyper_kinds as hk
from teaching.inspect_step import build_optimizer

LR = 0.01
MAKERS = {  # the stock Keras 2 class and the lab's pure-rule twin
    "keras SGD": lambda: tf_keras.optimizers.legacy.SGD(learning_rate=LR),
    "lab SGD": lambda: registry.create("sgd", {"learning_rate": LR}),
}
NP = {"float32": np.float32, "float64": np.float64}


def rows_by_phase(rows):
    out = {}
    for row in rows:
        out.setdefault(row["phase"], {})[row["name"]] = row
    return out


def f32(x):
    """`x` rounded to float32 and back: the value a float32 hyper variable or tensor holds."""
    return float(np.float32(x))


@pytest.mark.parametrize("maker", list(MAKERS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", hk.KINDS)
def test_each_kind_before_and_after_the_hypers_are_created(maker, dtype, kind):
    opt = MAKERS[maker]()
    hk.set_kinds(opt, {"learning_rate": kind})
    given = opt._hyper["learning_rate"]
    before_table = hk.hyper_kinds_table(opt, dtype)
    # the table itself creates nothing (a `_get_hyper` call would)
    assert not opt._hypers_created and opt._hyper["learning_rate"] is given
    phases = rows_by_phase(hk.walkthrough(opt, dtype))
    before, after = phases["1 after __init__"]["learning_rate"], \
        phases["2 after apply_gradients #1"]["learning_rate"]
    assert {k: v for k, v in before.items() if k != "phase"} == before_table[0]
    assert before["kind"] == kind and before["hypers_created"] is False
    assert before["get_hyper_type"] == hk.NOT_CREATED and before["decayed_lr"] is None
    cast = NP[dtype]
    if kind == "float":  # the moment a number becomes a variable
        assert before["serialized"] == LR and before["serialized_type"] == "float"
        assert after["kind"] == "tf.Variable" and after["stored_type"] == "ResourceVariable"
        assert after["aggregation"] == "ONLY_FIRST_REPLICA" and after["stored_dtype"] == "float32"
        assert opt._hyper["learning_rate"].aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA
        assert after["set_hyper_now"] == hk.ASSIGNS
    else:  # everything else is kept as given
        assert after["kind"] == kind and opt._hyper["learning_rate"] is given
    if kind == "LearningRateSchedule":
        assert after["get_hyper_type"] == "the ExponentialDecay itself"
        assert after["get_hyper_value"] is None and after["get_hyper_dtype"] is None
        # _decayed_lr evaluates 0.01 * 0.5 ** iterations at iterations = 1; ExponentialDecay
        # computes in its own float32 (the dtype of 0.01 as a tensor), then it is cast
        assert after["iterations"] == 1
        assert after["decayed_lr"] == float(np.float32(LR) * np.float32(0.5))
        serialized = after["serialized"]
        assert serialized["class_name"] == "ExponentialDecay"
        assert serialized["config"]["initial_learning_rate"] == LR
        assert serialized["config"]["decay_rate"] == 0.5
        assert json.loads(json.dumps(serialized)) == serialized
        return
    assert after["get_hyper_dtype"] == dtype and after["hypers_created"] is True
    # every kind reaches dtype through float32: a float32 variable / tensor is widened, and
    # `tf.cast(0.01, tf.float64)` first converts the callable's Python float to a float32
    # tensor; so float64 shows 0.009999999776482582, not 0.01
    exact = float(cast(np.float32(LR)))
    assert after["get_hyper_value"] == exact
    # `tf.cast` to the dtype a variable already has returns the variable itself, not a tensor
    variable = kind in ("float", "tf.Variable") and dtype == "float32"
    assert after["get_hyper_type"] == ("ResourceVariable" if variable else "EagerTensor")
    assert after["decayed_lr"] == exact and after["iterations"] == 1
    if kind == "callable":
        assert after["serialized"] == LR and after["serialized_type"] == "float"
    else:
        assert after["serialized"] == f32(LR) and after["serialized_type"] == "float32"
    if kind == "tf.Variable":  # a variable you pass in keeps its own aggregation
        assert after["aggregation"] == "NONE" and "user_learning_rate:0" in after["stored"]


@pytest.mark.parametrize("maker", list(MAKERS))
@pytest.mark.parametrize("kind", hk.KINDS)
def test_set_hyper_now_says_what_set_hyper_really_does(maker, kind):
    opt = MAKERS[maker]()
    hk.set_kinds(opt, {"learning_rate": kind})
    hk.walkthrough(opt)
    (row,) = [r for r in hk.hyper_kinds_table(opt) if r["name"] == "learning_rate"]
    old = opt._hyper["learning_rate"]
    opt._set_hyper("learning_rate", 0.5)
    new = opt._hyper["learning_rate"]
    assert (new is old) == (row["set_hyper_now"] == hk.ASSIGNS)
    assert float(opt._get_hyper("learning_rate", tf.float32)) == 0.5
    if kind == "tf.Variable":  # Keras assigns INTO the variable the user passed in
        assert new is old and float(old.numpy()) == 0.5


def test_float64_is_a_cast_of_the_float32_variable():
    opt = registry.create("adam", {"learning_rate": 0.001})
    rows = rows_by_phase(hk.walkthrough(opt, "float64"))["2 after apply_gradients #1"]
    assert rows["learning_rate"]["get_hyper_value"] == 0.0010000000474974513
    assert rows["beta_2"]["get_hyper_value"] == float(np.float64(np.float32(0.999)))
    assert rows["beta_2"]["stored_dtype"] == "float32"  # the variable stays float32
    # Adam's _decayed_lr is the plain rate (no schedule, no decay)
    assert rows["learning_rate"]["decayed_lr"] == 0.0010000000474974513


def test_plain_attribute_is_not_a_hyperparameter():
    opt = registry.create("adam")
    rows = hk.walkthrough(opt)
    plain = rows[-1]
    assert plain["kind"] == hk.PLAIN_ATTRIBUTE and plain["name"] == "t_cur"
    assert plain["get_hyper_type"] == "KeyError 't_cur'"
    assert plain["serialized"] == "KeyError 't_cur'" and plain["in_get_config"] is False
    assert opt.t_cur == 5.0 and "t_cur" not in opt._hyper
    with pytest.raises(ValueError, match="attribute='learning_rate' refused"):
        hk.plain_attribute_row(opt, "learning_rate")


def test_wrapper_rows_cover_the_inner_optimizer():
    opt = build_optimizer("lookahead:sgd")
    table = hk.hyper_kinds_table(opt)
    assert [(r["owner"], r["name"]) for r in table] == [
        ("optimizer", "sync_period"), ("optimizer", "slow_step_size"),
        ("inner", "learning_rate"), ("inner", "momentum")]
    hk.set_kinds(opt, {"learning_rate": "callable"})  # routed to the inner optimizer
    assert hk.kind_of(opt.inner._hyper["learning_rate"]) == "callable"


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_optimizer_gives_a_json_table(name):
    opt = registry.create(name)
    rows = hk.walkthrough(opt, "float64")
    assert json.loads(json.dumps(rows)) == rows
    after = [r for r in rows if r["phase"].startswith("2") and r["kind"] != hk.PLAIN_ATTRIBUTE]
    assert after and all(r["kind"] == "tf.Variable" for r in after)
    assert all(r["aggregation"] == "ONLY_FIRST_REPLICA" for r in after)
    assert all(r["get_hyper_dtype"] == "float64" for r in after)


def test_allowed_kinds_follow_the_library_checks():
    lab = hk.allowed_kinds(lambda: registry.create("adam"))
    assert lab["learning_rate"] == list(hk.KINDS)
    assert lab["epsilon"] == ["float", "tf.Variable", "callable", "tensor"]
    keras = hk.allowed_kinds(lambda: tf_keras.optimizers.legacy.Adam())
    assert keras["beta_1"] == list(hk.KINDS)  # stock Keras refuses nothing
    look = hk.allowed_kinds(lambda: build_optimizer("lookahead:adam"))
    assert look["sync_period"] == ["float"]


def test_refusals_name_the_field():
    with pytest.raises(ValueError, match="kind='string' refused: one of float"):
        hk.make_value("string", 1.0)
    with pytest.raises(ValueError, match="dtype='int32' refused: one of float32, float64"):
        hk.hyper_kinds_table(registry.create("sgd"), "int32")
    with pytest.raises(KeyError, match="hyperparameter 'rho' refused: known"):
        hk.set_kinds(registry.create("sgd"), {"rho": "float"})
    opt = registry.create("sgd")
    hk.walkthrough(opt)
    with pytest.raises(ValueError, match="before its first step"):
        hk.set_kinds(opt, {"learning_rate": "callable"})
    with pytest.raises(TypeError, match="not a number"):
        hk.kind_of("0.1")


# ----- the tables shown by the pages (TF-free builders) ----------------------------------------
def test_frame_shows_what_each_method_returned_exactly():
    from components.inspect_figures import KIND_COLUMNS, hyper_kinds_frame

    opt = registry.create("adam", {"learning_rate": 0.001})
    hk.set_kinds(opt, {"learning_rate": "LearningRateSchedule", "beta_1": "callable"})
    rows = json.loads(json.dumps(hk.walkthrough(opt, "float64")))  # as read from the store
    after = hyper_kinds_frame([r for r in rows if r["phase"].startswith("2")]).set_index("name")
    assert "owner" not in after.columns  # no wrapper: no owner column
    assert after.loc["beta_2", KIND_COLUMNS["get_hyper"]] == "EagerTensor float64 0.9990000128746033"
    assert after.loc["beta_2", KIND_COLUMNS["aggregation"]] == "ONLY_FIRST_REPLICA"
    assert after.loc["beta_2", KIND_COLUMNS["serialized"]] == "float32 0.9990000128746033"
    assert after.loc["beta_1", KIND_COLUMNS["aggregation"]] == ""
    assert after.loc["beta_1", KIND_COLUMNS["serialized"]] == "float 0.9"
    assert after.loc["learning_rate", KIND_COLUMNS["decayed_lr"]] == \
        f"{float(np.float32(0.001) * np.float32(0.5))!r} at iterations 1"
    assert after.loc["learning_rate", KIND_COLUMNS["serialized"]].startswith(
        'dict {"class_name":"ExponentialDecay", "config":{"initial_learning_rate":0.001, '
        '"decay_steps":1, "decay_rate":0.5')
    assert after.loc["t_cur", KIND_COLUMNS["get_hyper"]] == "KeyError 't_cur'"
    before = hyper_kinds_frame([r for r in rows if r["phase"].startswith("1")])
    assert set(before[KIND_COLUMNS["get_hyper"]]) == {hk.NOT_CREATED}
    look = hyper_kinds_frame(hk.hyper_kinds_table(build_optimizer("lookahead:sgd")))
    assert look["owner"].tolist() == ["optimizer", "optimizer", "inner", "inner"]


def test_run_panel_reads_the_recorded_table():
    from components import run_panels

    rows = json.loads(json.dumps(hk.walkthrough(registry.create("sgd"))))
    assert run_panels.recorded_hyper_kinds({"hyper_kinds": rows}) == rows
    assert run_panels.recorded_hyper_kinds({"hyper_kinds": json.dumps(rows)}) == rows
    in_config = {"optimizer_config": {"name": "SGD", "_hyper_kinds": rows}}
    assert run_panels.recorded_hyper_kinds(in_config) == rows
    assert run_panels.optimizer_config_shown(in_config) == {"name": "SGD"}
    for old in ({}, {"hyper_kinds": []}, {"hyper_kinds": "not json"}, {"hyper_kinds": [1, 2]},
                {"optimizer_config": {"name": "SGD"}}):
        assert run_panels.recorded_hyper_kinds(old) is None


def _config_panel(run):
    from components import run_panels

    run_panels.hyper_kinds_section(run)


def test_config_tab_section_shows_the_table_or_says_why_not():
    from streamlit.testing.v1 import AppTest

    from components import run_panels

    opt = registry.create("sgd")
    hk.walkthrough(opt)
    rows = json.loads(json.dumps(hk.hyper_kinds_table(opt, "float32")))
    at = AppTest.from_function(_config_panel, kwargs={"run": {"id": 7, "hyper_kinds": rows}},
                               default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    table = at.table[0].value
    assert table.loc["learning_rate", "aggregation="] == "ONLY_FIRST_REPLICA"
    # float32 asked of a float32 variable: `tf.cast` hands back the variable itself
    assert table.loc["momentum", "_get_hyper(name, dtype)"] == "ResourceVariable float32 0.0"
    assert "ONLY_FIRST_REPLICA" in at.caption[0].value
    old = AppTest.from_function(_config_panel, kwargs={"run": {"id": 8, "optimizer_config": {}}},
                                default_timeout=60)
    old.run()
    assert not old.exception and not old.table
    assert old.caption[0].value == run_panels.NOT_RECORDED


def test_inside_step_page_builds_the_chosen_kinds_live():
    from tests._pages import page_test

    at = page_test("inside_step", default_timeout=240)
    at.run()
    assert not at.exception, at.exception
    # adam: a schedule is offered for learning_rate only
    assert "LearningRateSchedule" in at.selectbox(key="is_kind_learning_rate").options
    assert "LearningRateSchedule" not in at.selectbox(key="is_kind_epsilon").options
    at.selectbox(key="is_kind_learning_rate").set_value("callable")
    at.selectbox(key="is_kind_beta_2").set_value("tf.Variable")
    at.radio(key="is_kinds_dtype").set_value("float64").run()
    assert not at.exception, at.exception
    # the section's three tables, in page order: before, after the first step, `t_cur`
    before, after, plain = [t.value for t in at.table if "kind" in t.value.columns]
    assert before.loc["learning_rate", "kind"] == "callable"
    assert before.loc["beta_1", "kind"] == "float"
    assert after.loc["beta_1", "kind"] == "tf.Variable"  # created by _create_hypers
    assert after.loc["beta_1", "aggregation="] == "ONLY_FIRST_REPLICA"
    assert after.loc["beta_2", "aggregation="] == "NONE"  # the user's own variable
    assert after.loc["learning_rate", "_get_hyper(name, dtype)"] == \
        f"EagerTensor float64 {float(np.float32(0.001))!r}"
    assert plain.loc["t_cur", "kind"] == hk.PLAIN_ATTRIBUTE
    at.button(key="is_demo_setattr").click().run()
    demo = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert (demo["traces_after"] - demo["traces_before"]).tolist() == [0, 1, 0, 0]


def test_stock_adam_demo_shows_aggregation():
    from teaching import demos

    table = demos.hyper_kinds().set_index("kind")
    assert table.loc["float", "aggregation"] == "ONLY_FIRST_REPLICA"  # made by _create_hypers
    assert table.loc["tf.Variable", "aggregation"] == "NONE"  # the user's own variable
    assert table.loc["callable", "aggregation"] == ""


def _whole_config_tab(run_id):
    from components import run_panels
    from runs.store.run_store import RunStore

    store = RunStore()
    run_panels.config_tab(store, store.run(run_id))


def test_config_tab_with_a_stored_run(store):
    """What the worker would write (see the report: `save_optimizer`), through the real store."""
    from streamlit.testing.v1 import AppTest

    opt = registry.create("adam", {"learning_rate": 0.002})
    hk.walkthrough(opt)
    run_id = store.create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                               "seed": 0, "steps": 10})
    config = {**opt.get_config(), "_hyper_kinds": hk.hyper_kinds_table(opt, "float64")}
    store.update_run(run_id, optimizer_config=hk.jsonable(config))
    at = AppTest.from_function(_whole_config_tab, kwargs={"run_id": run_id},
                               default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    (table,) = at.table
    assert table.value.loc["learning_rate", "_get_hyper(name, dtype)"] == \
        f"EagerTensor float64 {float(np.float32(0.002))!r}"
    assert set(table.value["aggregation="]) == {"ONLY_FIRST_REPLICA"}
    shown = json.loads(at.get("json")[0].proto.body)  # get_config() without the table
    assert "_hyper_kinds" not in shown and shown["learning_rate"] == 0.002
