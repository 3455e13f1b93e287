"""The Class page and the Train page locked to a challenge, under AppTest: a student's view
(their own runs only, a hostile nickname escaped in every chart and line), the teacher's
(create from the form, pin, stop, close, export), and a student joining from the link (fixed
widgets disabled, the nickname checked, the run linked and owned by the student's session).
No run process: `control.start_run` is replaced by a row of the store."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from streamlit.testing.v1 import AppTest

from components import session_runs
from runs.service import challenges
from runs.service.ownership import TEACHER_SECRET_ENV, Caller
from runs.store.challenges import ChallengeTables
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests._pages import page_test
from tests.fake_runs import add_fake_run

STUDENT, OTHER = "s" * 43, "o" * 43
HOSTILE = "<img src=x onerror=alert(1)>**x**"
BASE = RunConfig(optimizer="adam", steps=30, eval_every=10).to_json_dict()
SPEC = dict(title="Beat <b>Adam</b>", base=BASE, optimizers=["adam", "sgd"],
            free=["learning_rate", "momentum"], goal="val_loss_at_step", goal_step=30)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    monkeypatch.setenv(TEACHER_SECRET_ENV, "chalk-42")
    store = RunStore(tmp_path / "runs.sqlite")
    challenge_id = challenges.create_challenge(store, SPEC)
    tables = ChallengeTables(store)
    for nickname, rate, token in (("Ada", 1e-3, STUDENT), (HOSTILE, 1e-2, OTHER),
                                  ("Cy", 1e-1, OTHER)):
        run_id = add_fake_run(store, "adam", rate)
        store.update_run(run_id, owner=Caller(token).owner)
        tables.link(challenge_id, run_id, nickname)  # a row written without the check
    return store


def board(token: str, teacher: bool = False) -> AppTest:
    at = page_test("class_board")
    at.session_state[session_runs._TOKEN] = token
    if teacher:
        at.session_state[session_runs._TEACHER] = "chalk-42"
    at.query_params["challenge"] = "1"
    at.run()
    assert not at.exception, at.exception
    return at


def figures(at: AppTest) -> dict[str, dict]:
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def test_a_student_sees_the_board_and_steers_only_their_runs(store):
    at = board(STUDENT)
    assert at.header[0].value == r"Beat &lt;b&gt;Adam&lt;/b&gt;"
    assert not [e for e in at.expander if e.label == "New challenge"]  # not a teacher
    table = at.dataframe[0].value
    assert table["nickname"].tolist() == ["Ada", HOSTILE, "Cy"]  # text cells, by score
    assert table["rank"].tolist() == [1, 2, 3]
    specs = [json.dumps(f) for f in figures(at).values()]
    assert len(specs) == 2 and all("<img" not in s for s in specs)
    assert "&lt;img src=x onerror=alert(1)&gt;**x** #2" in specs[0]
    assert any(m.value == "You are on the board as **Ada**." for m in at.markdown)
    assert at.selectbox(key="board_run").options == ["#1 Ada"]  # only their own run
    assert not [b for b in at.button if b.key == "board_pin"]
    assert at.button(key="board_stop").disabled  # finished: nothing to stop
    assert not [b for b in at.button if b.key in ("board_close", "board_export_button")]
    assert at.code[0].value == "/train?challenge=1"  # AppTest has no browser address
    at.text_input(key="challenge_link_base").set_value("http://10.0.0.5:8501").run()
    assert at.code[0].value == "http://10.0.0.5:8501/train?challenge=1"
    assert len(at.get("image")) == 1  # the QR code


def test_the_teacher_pins_stops_closes_and_exports(store):
    queued = store.create_run(BASE, status="queued", owner=Caller(OTHER).owner)
    ChallengeTables(store).link(1, queued, "Dee")
    at = board(STUDENT, teacher=True)
    assert at.selectbox(key="board_run").options == [
        "#1 Ada", f"#2 {HOSTILE}", "#3 Cy", f"#{queued} Dee"]  # every run
    at.selectbox(key="board_run").set_value(2).run()
    at.button(key="board_pin").click().run()
    assert not at.exception, at.exception
    assert ChallengeTables(store).runs(1)["pinned"].tolist() == [False, True, False, False]
    curves = next(iter(figures(at).values()))
    pinned = [t for t in curves["data"] if t["line"]["width"] == 4.0]
    assert [t["name"] for t in pinned] == ["&lt;img src=x onerror=alert(1)&gt;**x** #2"]
    at.selectbox(key="board_run").set_value(queued).run()
    at.button(key="board_stop").click().run()
    assert store.run(queued)["status"] == "stopped"
    assert store.events(queued)["kind"].tolist() == ["teacher_stop"]
    at.button(key="board_close").click().run()
    assert ChallengeTables(store).get(1)["status"] == "closed"
    assert at.button(key="board_close").disabled
    at.button(key="board_export_button").click().run()
    data = at.session_state["board_export"][1]
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == [
        "curves.csv", "curves.parquet", "runs.csv", "runs.parquet"]
    assert not at.exception, at.exception


def test_the_teacher_creates_a_challenge_and_every_field_is_checked(store):
    at = board(STUDENT, teacher=True)
    at.text_input(key="new_title").set_value("Speed run")
    at.number_input(key="new_steps").set_value(300)
    at.number_input(key="new_goal_step").set_value(130)
    at.button(key="new_create").click().run()  # one script run for the four
    assert [e.value for e in at.error] == [
        "goal_step=130 refused: must be in [1, 300] (the steps) and a multiple of "
        "eval_every=25 or 300 itself: validation runs only there"]
    at.number_input(key="new_goal_step").set_value(150).run()
    at.button(key="new_create").click().run()
    assert not at.exception and not at.error, at.error
    row, spec = challenges.load_spec(store, 2)
    assert (row["title"], spec.goal_step, spec.config().steps) == ("Speed run", 150, 300)
    assert at.query_params["challenge"] == ["2"] or at.query_params["challenge"] == "2"


def train(token: str, challenge: str) -> AppTest:
    at = page_test("train")
    at.session_state[session_runs._TOKEN] = token
    at.query_params["challenge"] = challenge
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_student_joins_from_the_link_with_the_setup_locked(store, monkeypatch):
    def fake_start(config, store_, name="", caller=None, **_):
        return store_.create_run(config.to_json_dict(), name=name, status="queued",
                                 owner=caller.owner)

    monkeypatch.setattr(challenges.control, "start_run", fake_start)
    at = train("n" * 43, "99")  # an unknown challenge: said so, the usual Train page
    assert at.error[0].value.startswith("challenge='99' refused: no such challenge")
    assert not [w for w in at.sidebar.text_input if w.label == "your nickname"]
    at.query_params["challenge"] = "1"
    at.run()
    assert not at.exception, at.exception
    side = at.sidebar
    fixed = {w.label: (w.value, w.disabled) for w in side.text_input if w.label != "your nickname"}
    assert fixed["steps"] == ("30", True) and fixed["dataset"] == ("digits", True)
    assert all(disabled for _, disabled in fixed.values())
    assert {w.label: w.disabled for w in side.number_input} == {
        "learning_rate": False, "beta_1": True, "beta_2": True, "epsilon": True}
    assert "Fixed by the challenge: beta_1, beta_2, epsilon." in [c.value for c in side.caption]
    assert at.button(key="start").disabled  # no nickname yet
    at.text_input(key="challenge_nickname").set_value("<script>x</script>").run()
    assert at.button(key="start").disabled
    assert [e.value for e in at.sidebar.error][0].startswith("nickname='<script>x</script>' "
                                                             "refused: must be 2-24 characters")
    at.text_input(key="challenge_nickname").set_value("Grace").run()
    at.selectbox(key="optimizer").set_value("sgd").run()
    at.number_input(key="hp_sgd_learning_rate").set_value(0.05).run()
    assert not at.button(key="start").disabled
    at.button(key="start").click().run()
    assert not at.exception and not at.sidebar.error, at.sidebar.error
    runs = ChallengeTables(store).runs(1)
    joined = runs[runs["nickname"] == "Grace"].iloc[0]
    assert joined["owner"] == Caller("n" * 43).owner
    config = json.loads(joined["config"])
    assert (config["optimizer"], config["steps"], config["hyperparameters"]) == (
        "sgd", 30, {"learning_rate": 0.05, "momentum": 0.0})
    assert at.query_params["challenge"] in ("1", ["1"])  # the link is kept

