"""The Runs page under AppTest with a store holding three small fake runs owned by the page's
session (`TOKEN`); rename/delete/stop of another session's run are refused, a teacher's are
recorded."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from runs.service import ownership
from runs.service.ownership import Caller
from settings.run_config import RunConfig
from tests.fake_runs import add_fake_run
from runs.store.run_store import RunStore
from tests._pages import page_test

TOKEN = "t" * 43



@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore(tmp_path / "runs.sqlite")
    add_fake_run(store, "adam", 1e-3, name="baseline")
    add_fake_run(store, "sgd", 0.1, seed=1, slots=("momentum", "update"))
    add_fake_run(store, "adam", 1e-2, status="diverged")
    store.update_run(1, owner=Caller(TOKEN).owner)
    store.update_run(2, owner=Caller(TOKEN).owner)
    store.update_run(3, owner=Caller(TOKEN).owner)
    return store


@pytest.fixture
def page(store) -> AppTest:
    at = page_test("runs", default_timeout=60)
    at.session_state[session_runs._TOKEN] = TOKEN
    at.run()
    assert not at.exception, at.exception
    return at


def other_session(token: str = "o" * 43) -> AppTest:
    at = page_test("runs", default_timeout=60)
    at.session_state[session_runs._TOKEN] = token
    at.run()
    assert not at.exception, at.exception
    return at


def _figures(at: AppTest) -> dict[str, dict]:
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def test_table_lists_every_run(page):
    table = page.dataframe[0].value
    assert list(table["id"]) == [3, 2, 1]
    assert list(table["status"]) == ["diverged", "finished", "finished"]
    assert table.loc[table["id"] == 1, "val_loss"].iloc[0] == pytest.approx(
        2.3 * 2.718281828 ** (-30 / 12.0 / 1.1), rel=1e-6)
    assert page.info[0].value.startswith("Select runs")
    assert not page.get("plotly_chart")


def test_filters_narrow_the_table(page):
    page.multiselect(key="runs_filter_optimizer").set_value(["sgd"]).run()
    assert list(page.dataframe[0].value["id"]) == [2]
    page.multiselect(key="runs_filter_optimizer").set_value([]).run()
    page.text_input(key="runs_filter_text").set_value("baseline").run()
    assert list(page.dataframe[0].value["id"]) == [1]


def test_selecting_runs_overlays_their_curves(page):
    page.multiselect(key="compare_ids").set_value([1, 2, 3]).run()
    assert not page.exception, page.exception
    captions = " ".join(c.value for c in page.caption)
    assert ("Legend names what differs in the start configs: optimizer, "
            "hyperparameters.learning_rate, seed") in captions
    # each fake run halves its own learning rate at step 11
    assert "changed differently while training: learning_rate" in captions
    figures = [json.loads(c.proto.spec) for c in page.get("plotly_chart")]
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert titles[:3] == ["Loss (solid: train, dotted: validation)", "Validation metrics",
                          "Hyperparameter traces"]
    loss = figures[0]
    assert [t["name"] for t in loss["data"]][::2] == [
        "#1 baseline adam, lr=0.001, seed=0 · train",
        "#2 sgd, lr=0.1, seed=1 · train",
        "#3 adam, lr=0.01, seed=0 · train"]
    assert len(loss["data"][0]["x"]) == 30 and loss["layout"]["uirevision"] == "1-2-3"
    slots = figures[3]
    variable = page.selectbox(key="runs_slot_variable").value
    assert variable in ("dense/kernel", "dense/bias")
    assert slots["layout"]["title"]["text"] == f"norm of slot m of {variable}"
    assert len(slots["data"]) == 2  # the SGD run has no `m`
    page.selectbox(key="runs_slot_slot").set_value("update").run()
    slots = [json.loads(c.proto.spec) for c in page.get("plotly_chart")][3]
    assert len(slots["data"]) == 3
    assert any("No hyper-gradients recorded" in i.value for i in page.info)


def test_hypergradients_tab_reads_an_optional_table(store, page):
    store.append(1, hypergradients=[(s, "learning_rate", -0.1 * s, -0.05 * s, None, 1.0)
                                    for s in range(1, 6)])
    page.multiselect(key="compare_ids").set_value([1, 2]).run()
    figures = [json.loads(c.proto.spec) for c in page.get("plotly_chart")]
    grads = figures[-1]
    assert grads["layout"]["title"]["text"] == "Hyper-gradients"
    assert [len(t["y"]) for t in grads["data"]] == [5]


def test_rename_delete_and_export(store, page, tmp_path):
    page.selectbox(key="manage_run").set_value(2).run()
    page.text_input(key="rename_2").set_value("momentum run").run()
    page.button(key="rename_button_2").click().run()
    assert store.run(2)["name"] == "momentum run"
    assert page.button(key="delete_2").disabled  # not confirmed yet
    page.checkbox(key="confirm_2").check().run()
    page.button(key="delete_2").click().run()
    assert not page.exception
    assert list(store.runs()["id"]) == [3, 1]
    assert any("run #2 deleted" in s.value for s in page.success)
    page.selectbox(key="manage_run").set_value(1).run()
    page.button(key="export_1").click().run()
    assert not page.exception, page.exception
    assert (tmp_path / "exports" / "run-1.zip").exists()
    assert any("tensorboard --logdir" in c.value for c in page.code)
    assert page.get("download_button")


def test_empty_store_shows_how_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path / "empty"))
    at = page_test("runs", default_timeout=60)
    at.run()
    assert not at.exception
    assert "No run in the store yet" in at.info[0].value


def test_another_session_cannot_rename_or_delete(store):
    at = other_session()
    at.selectbox(key="manage_run").set_value(2).run()
    assert at.text_input(key="rename_2").disabled and at.button(key="rename_button_2").disabled
    assert at.checkbox(key="confirm_2").disabled and at.button(key="delete_2").disabled
    assert any("view only" in c.value for c in at.caption)
    # the callbacks refuse too (a crafted rerun cannot go around the disabled buttons)
    from runs.service import control

    stranger = Caller("o" * 43)
    with pytest.raises(ownership.NotOwner, match=r"rename of run #2 refused.*another browser"):
        control.rename(store, 2, "mine now", caller=stranger)
    with pytest.raises(ownership.NotOwner, match=r"delete of run #2 refused"):
        control.delete(store, 2, caller=stranger)
    assert store.run(2)["name"] == "" and len(store.runs()) == 3


def test_teacher_may_rename_and_delete_and_it_is_recorded(store, monkeypatch):
    monkeypatch.setenv(ownership.TEACHER_SECRET_ENV, "chalk-42")
    at = other_session("q" * 43)
    at.text_input(key="teacher_secret_input").set_value("wrong").run()
    assert any("teacher secret refused" in e.value for e in at.error)
    at.text_input(key="teacher_secret_input").set_value("chalk-42").run()
    assert any("teacher role on" in m.value for m in at.success)
    at.selectbox(key="manage_run").set_value(2).run()
    at.text_input(key="rename_2").set_value("checked by teacher").run()
    at.button(key="rename_button_2").click().run()
    assert store.run(2)["name"] == "checked by teacher"
    at.checkbox(key="confirm_2").check().run()
    at.button(key="delete_2").click().run()
    assert not at.exception, at.exception
    assert list(store.runs()["id"]) == [3, 1]
    events = store.events(2)  # kept after the delete
    assert list(events["kind"]) == ["teacher_rename", "teacher_delete"]
    assert set(events["actor"]) == {Caller("q" * 43).owner}


def test_teacher_section_is_hidden_without_a_secret(page, monkeypatch):
    monkeypatch.delenv(ownership.TEACHER_SECRET_ENV, raising=False)
    assert not [t for t in page.text_input if t.key == "teacher_secret_input"]


def _import_start_script():
    """Renders the Runs page, then presses its import Start callback (AppTest cannot drive a
    file upload; the validated config is put where the upload puts it)."""
    import streamlit as st

    import views.runs as runs_view

    if not st.session_state.get("test_page_drawn"):  # the page once, as its reader opened it
        st.session_state["test_page_drawn"] = True
        runs_view.page()
    runs_view.init_state()
    st.session_state["import_config"] = st.session_state["test_import_config"]  # the upload's
    if st.button("start the import", key="test_import_start"):
        runs_view.on_import_start()


def test_import_start_is_owned_by_the_session_that_started_it(store, monkeypatch):
    from runs.service import pool

    monkeypatch.setattr(pool, "dispatch", lambda store, size=None: [])  # no process
    at = AppTest.from_function(_import_start_script, default_timeout=60)
    at.session_state[session_runs._TOKEN] = TOKEN
    at.session_state["test_import_config"] = RunConfig(steps=10).to_json_dict()
    at.session_state["import_name"] = "from a file"
    at.run()
    at.button(key="test_import_start").click().run()
    assert not at.exception, at.exception
    run = store.run(4)
    assert run["name"] == "from a file" and run["status"] == "queued"
    assert run["owner"] == Caller(TOKEN).owner  # adopted: no "Take control" needed
    assert store.owned_runs(Caller(TOKEN).owner) == [1, 2, 3, 4]


def test_an_ownerless_run_can_be_claimed_on_the_runs_page(store):
    store.update_run(3, owner=None)  # e.g. started from the command line
    at = other_session("n" * 43)
    at.selectbox(key="manage_run").set_value(2).run()
    assert not [b for b in at.button if b.key == "runs_adopt_2"]  # owned, owner may be away
    at.selectbox(key="manage_run").set_value(3).run()
    assert at.button(key="delete_3").disabled
    at.button(key="runs_adopt_3").click().run()
    assert not at.exception, at.exception
    assert store.run(3)["owner"] == Caller("n" * 43).owner
    assert list(store.events(3)["kind"]) == ["take_control"]
    assert not at.text_input(key="rename_3").disabled


def test_runs_of_one_config_steered_differently_are_told_apart(tmp_path, monkeypatch):
    """Same config, three live changes on one run: the comparison names what was changed
    while training (not "nothing") and lists each run's live changes."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore(tmp_path / "runs.sqlite")
    for _ in range(2):
        add_fake_run(store, "adam", 1e-3)
    store.append(1, hyper_changes=[(100, "learning_rate", 0.001, 0.01, "user"),
                                   (200, "beta_1", 0.9, 0.5, "user"),
                                   (300, "learning_rate", 0.01, 0.003, "auto-tune")])
    at = page_test("runs", default_timeout=60).run()
    at.multiselect(key="compare_ids").set_value([1, 2]).run()
    assert not at.exception, at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "start configs: nothing (same config)" in captions
    assert "changed differently while training: learning_rate, beta_1" in captions
    live = next(df.value for df in at.dataframe if "source" in df.value.columns)
    assert live["step"].tolist() == [11, 100, 200, 300, 11]  # run 1's, then run 2's
    assert live["new"].tolist() == [0.0005, 0.01, 0.5, 0.003, 0.0005]
    assert live["run"].str.startswith("#1").sum() == 4
