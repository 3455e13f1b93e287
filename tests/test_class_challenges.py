"""Class challenges without Streamlit: the checked spec (every refusal names its field), the
student's config (fixed settings refused, each named), nicknames, who may create/close/pin/stop,
joining an open or closed challenge, scores against hand-computed numbers, the board's live
hyperparameters and the CSV/Parquet export."""

from __future__ import annotations

import io
import json
import math
import zipfile

import pandas as pd
import pytest

from runs.io.board_export import board_zip, export_tables
from runs.service import challenge_board, challenge_score, challenges
from runs.service.challenges import ChallengeError
from runs.service.ownership import TEACHER_SECRET_ENV, Caller, NotOwner
from runs.store.challenges import ChallengeTables
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
from tests.fake_runs import add_fake_run

BASE = RunConfig(optimizer="adam", steps=30, eval_every=10).to_json_dict()
SPEC = dict(title="Beat Adam", base=BASE, optimizers=["adam", "sgd"],
            free=["learning_rate", "momentum"], goal="val_loss_at_step", goal_step=20)
TEACHER = Caller("teacher-token", teacher_secret="chalk-42")
STUDENT = Caller("student-token")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(TEACHER_SECRET_ENV, "chalk-42")
    return RunStore(tmp_path / "runs.sqlite")


@pytest.fixture
def spec():
    return challenges.check_spec(SPEC)


@pytest.mark.parametrize("change, field, allowed", [
    ({"title": "  "}, "title", "1-80 printable"),
    ({"title": "x" * 81}, "title", "1-80 printable"),
    ({"base": {**BASE, "steps": 0}}, "base.steps", "greater than or equal to 1"),
    ({"base": {**BASE, "model": "embedding"}}, "base", "allowed mlp, logistic, cnn"),
    ({"base": {**BASE, "hypergradients": ["learning_rate"]}}, "base.hypergradients",
     "turn hyper-gradients off"),
    ({"optimizers": ["sgd"]}, "optimizers", "must include the setup's optimizer 'adam'"),
    ({"optimizers": ["adam", "nope"]}, "optimizers", "registered optimizers"),
    ({"free": ["rho"]}, "free", "beta_1, beta_2, epsilon, learning_rate, momentum"),
    ({"free": [], "optimizers": ["adam"]}, "free", "at least one hyperparameter"),
    ({"goal_step": 15}, "goal_step", "[1, 30] (the steps) and a multiple of eval_every=10"),
    ({"goal_step": 40}, "goal_step", "[1, 30]"),
    ({"goal_step": None}, "goal_step", "[1, 30]"),
    ({"goal": "fastest"}, "goal", "'val_loss_at_step' or 'steps_to_accuracy'"),
    ({"goal": "steps_to_accuracy", "goal_accuracy": 0.0}, "goal_accuracy", "(0, 1]"),
    ({"goal": "steps_to_accuracy", "goal_accuracy": 1.5}, "goal_accuracy", "(0, 1]"),
    ({"extra": 1}, "extra", "not permitted"),
])
def test_every_refused_field_is_named_with_its_range(change, field, allowed):
    with pytest.raises(ChallengeError) as error:
        challenges.check_spec({**SPEC, **change})
    assert str(error.value).startswith(field), error.value
    assert allowed in str(error.value)


def test_a_checked_spec_keeps_the_goal_and_fills_the_base(spec):
    assert spec.goal_step == 20 and spec.goal_accuracy is None
    assert spec.config().steps == 30 and spec.base["hyperparameters"]["beta_1"] == 0.9
    assert spec.goal_text() == "lowest validation loss at step 20"
    other = challenges.check_spec({**SPEC, "goal": "steps_to_accuracy", "goal_accuracy": 0.95})
    assert other.goal_step is None
    assert other.goal_text() == "reach 95.0% validation accuracy in the fewest steps"
    assert challenges.check_spec({**SPEC, "goal_step": 30}).goal_step == 30  # the last step


def test_student_config_keeps_every_fixed_setting(spec):
    config = challenges.student_config(spec, "sgd", {"learning_rate": 0.05, "momentum": 0.9,
                                                     "nesterov": 1.0})
    assert config.optimizer == "sgd" and config.steps == 30 and config.eval_every == 10
    assert config.hyperparameters == {"learning_rate": 0.05, "momentum": 0.9}
    adam = challenges.student_config(spec, "adam", {"learning_rate": 0.01, "beta_1": 0.5})
    assert adam.hyperparameters == {"learning_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999,
                                    "epsilon": 1e-07}  # beta_1 is not free: the base's
    with pytest.raises(ChallengeError, match=r"optimizer='rmsprop' refused: this challenge "
                                             r"allows adam, sgd"):
        challenges.student_config(spec, "rmsprop", {})
    with pytest.raises(ChallengeError, match=r"learning_rate.*\(0, 10\]"):
        challenges.student_config(spec, "adam", {"learning_rate": 20.0})


def test_a_config_changing_a_fixed_setting_is_refused_naming_each(spec):
    good = challenges.student_config(spec, "adam", {"learning_rate": 0.01})
    challenges.check_config(spec, good)
    bad = RunConfig(**{**good.to_json_dict(), "steps": 500, "seed": 3,
                       "hyperparameters": {**good.hyperparameters, "beta_1": 0.5}})
    with pytest.raises(ChallengeError) as error:
        challenges.check_config(spec, bad)
    text = str(error.value)
    assert "hyperparameters.beta_1=0.5 refused: fixed by the challenge at 0.9" in text
    assert "steps=500 refused: fixed by the challenge at 30" in text
    assert "seed=3 refused: fixed by the challenge at 0" in text


@pytest.mark.parametrize("nickname", ["Ada", "  Grace H.  ", "Émilie du-Châtelet", "李雷", "x9"])
def test_nicknames_allowed(nickname):
    assert challenges.check_nickname(nickname) == nickname.strip()


@pytest.mark.parametrize("nickname", [
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "**bold**", "[a](http://x)",
    "a", "x" * 25, "_under", "-dash", "tab\there", "new\nline", "", None, 42,
])
def test_nicknames_refused_name_the_field_and_the_rule(nickname):
    with pytest.raises(ChallengeError, match=r"nickname=.* refused: must be 2-24 characters"):
        challenges.check_nickname(nickname)


def test_only_a_teacher_creates_closes_and_pins(store, monkeypatch):
    with pytest.raises(NotOwner, match="only a teacher"):
        challenges.create_challenge(store, SPEC, caller=STUDENT)
    challenge_id = challenges.create_challenge(store, SPEC, caller=TEACHER)
    run_id = add_fake_run(store, "adam", 1e-3)
    assert ChallengeTables(store).link(challenge_id, run_id, "Ada")
    with pytest.raises(NotOwner):
        challenges.pin(store, challenge_id, run_id, caller=STUDENT)
    with pytest.raises(NotOwner):
        challenges.close_challenge(store, challenge_id, caller=STUDENT)
    challenges.pin(store, challenge_id, run_id, caller=TEACHER)
    assert ChallengeTables(store).runs(challenge_id)["pinned"].tolist() == [True]
    with pytest.raises(KeyError, match="not a run of challenge"):
        challenges.pin(store, challenge_id, run_id + 100, caller=TEACHER)
    assert challenges.close_challenge(store, challenge_id, caller=TEACHER)
    assert not challenges.close_challenge(store, challenge_id, caller=TEACHER)  # once
    monkeypatch.delenv(TEACHER_SECRET_ENV)  # the role is off without the server's secret
    with pytest.raises(NotOwner):
        challenges.create_challenge(store, SPEC, caller=TEACHER)


def test_joining_an_open_challenge_links_the_run_and_a_closed_one_refuses(store, spec,
                                                                         monkeypatch):
    started = []

    def fake_start(config, store_, name="", caller=None, **_):
        started.append(name)  # no process: the row a real start would write
        return store_.create_run(config.to_json_dict(), name=name, status="queued",
                                 owner=caller.owner)

    monkeypatch.setattr(challenges.control, "start_run", fake_start)
    challenge_id = challenges.create_challenge(store, SPEC, caller=TEACHER)
    config = challenges.student_config(spec, "sgd", {"learning_rate": 0.05})
    run_id = challenges.start_challenge_run(store, challenge_id, config, " Ada ",
                                            caller=STUDENT)
    runs = ChallengeTables(store).runs(challenge_id)
    assert runs[["run_id", "nickname"]].values.tolist() == [[run_id, "Ada"]]
    assert runs["owner"].iloc[0] == STUDENT.owner and started == [f"Ada @ challenge {challenge_id}"]
    assert not ChallengeTables(store).link(challenge_id, run_id, "Bob")  # one challenge per run
    with pytest.raises(ChallengeError, match="steps=31 refused"):
        challenges.start_challenge_run(store, challenge_id, RunConfig(
            **{**config.to_json_dict(), "steps": 31}), "Ada", caller=STUDENT)
    with pytest.raises(ChallengeError, match="nickname"):
        challenges.start_challenge_run(store, challenge_id, config, "<b>", caller=STUDENT)
    challenges.close_challenge(store, challenge_id, caller=TEACHER)
    with pytest.raises(ChallengeError, match="is closed: no new runs join it"):
        challenges.start_challenge_run(store, challenge_id, config, "Ada", caller=STUDENT)
    assert len(started) == 1
    assert not ChallengeTables(store).link(challenge_id, run_id + 1, "Eve")
    with pytest.raises(KeyError, match="challenge=99"):
        challenges.load_spec(store, 99)


def test_students_stop_their_own_runs_the_teacher_any(store):
    challenge_id = challenges.create_challenge(store, SPEC, caller=TEACHER)
    tables = ChallengeTables(store)
    mine = store.create_run(BASE, status="queued", owner=STUDENT.owner)
    theirs = store.create_run(BASE, status="queued", owner=Caller("other").owner)
    outside = store.create_run(BASE, status="queued", owner=STUDENT.owner)
    tables.link(challenge_id, mine, "Ada")
    tables.link(challenge_id, theirs, "Bob")
    with pytest.raises(NotOwner, match="belongs to another browser session"):
        challenges.stop_challenge_run(store, challenge_id, theirs, caller=STUDENT)
    with pytest.raises(KeyError, match="not a run of challenge"):
        challenges.stop_challenge_run(store, challenge_id, outside, caller=TEACHER)
    challenges.stop_challenge_run(store, challenge_id, mine, caller=STUDENT)
    challenges.stop_challenge_run(store, challenge_id, theirs, caller=TEACHER)
    assert store.run(mine)["status"] == store.run(theirs)["status"] == "stopped"
    assert store.run(outside)["status"] == "queued"
    assert store.events(theirs)["kind"].tolist() == ["teacher_stop"]  # recorded
    assert store.events(mine).empty


# ----- scores, by hand ------------------------------------------------------------------------
VALIDATION = pd.DataFrame(
    [(1, 0, "val_loss", 2.30), (1, 10, "val_loss", 1.10), (1, 20, "val_loss", 0.70),
     (2, 0, "val_loss", 2.30), (2, 10, "val_loss", 0.90), (2, 20, "val_loss", 0.70),
     (3, 0, "val_loss", 2.30), (3, 10, "val_loss", 0.50),  # not at step 20 yet
     (4, 20, "val_loss", 0.65), (4, 30, "val_loss", float("nan")),
     (1, 10, "val_accuracy", 0.80), (1, 20, "val_accuracy", 0.96),
     (2, 10, "val_accuracy", 0.95), (2, 20, "val_accuracy", 0.90),
     (3, 10, "val_accuracy", 0.94), (4, 20, "val_accuracy", 0.951)],
    columns=["run_id", "step", "name", "value"])


def test_val_loss_at_step_scores_and_ranks_with_ties():
    score = challenge_score.scores("val_loss_at_step", VALIDATION, goal_step=20)
    assert score.to_dict() == {1: 0.70, 2: 0.70, 4: 0.65}  # run 3 has not validated at 20
    ranks = challenge_score.ranks(score)
    assert ranks.to_dict() == {1: 2.0, 2: 2.0, 4: 1.0}  # 0.65 first, the two 0.70 share 2


def test_steps_to_accuracy_is_the_first_validation_step_at_or_above_x():
    score = challenge_score.scores("steps_to_accuracy", VALIDATION, goal_accuracy=0.95)
    assert score.to_dict() == {1: 20.0, 2: 10.0, 4: 20.0}  # run 2 dips below later: still 10
    assert challenge_score.ranks(score).to_dict() == {1: 2.0, 2: 1.0, 4: 2.0}
    assert challenge_score.latest(VALIDATION, "val_accuracy").to_dict() == {
        1: 0.96, 2: 0.90, 3: 0.94, 4: 0.951}
    with pytest.raises(ValueError, match="goal_accuracy=None refused"):
        challenge_score.scores("steps_to_accuracy", VALIDATION)
    with pytest.raises(ValueError, match="goal='x' refused"):
        challenge_score.scores("x", VALIDATION)


def test_the_board_has_live_hyperparameters_scores_and_curves_and_exports_them(store, spec):
    challenge_id = challenges.create_challenge(store, SPEC, caller=TEACHER)
    tables = ChallengeTables(store)
    rates = (1e-3, 1e-2, 1e-1)
    for nickname, rate in zip(("Ada", "Bob", "Cy"), rates):
        tables.link(challenge_id, add_fake_run(store, "adam", rate), nickname)
    sgd = add_fake_run(store, "sgd", 0.1, steps=15, status="stopped")  # stopped before step 20
    tables.link(challenge_id, sgd, "Dee")
    board = challenge_board.board(store, challenge_id, spec)
    runs = board.runs
    # fake runs: val loss 2.3 exp(-s / (12 (1 + 100 lr))), learning rate halved at step 11
    expected = [2.3 * math.exp(-20 / (12 * (1 + 100 * r))) for r in rates]
    # a larger rate decays slower in these fakes: Ada's 1e-3 is best
    assert runs["nickname"].tolist() == ["Ada", "Bob", "Cy", "Dee"]  # unscored last
    assert runs["score"].tolist()[:3] == pytest.approx(expected, rel=1e-12)
    assert math.isnan(runs["score"].iloc[3]) and math.isnan(runs["rank"].iloc[3])
    assert runs["rank"].tolist()[:3] == [1.0, 2.0, 3.0]
    assert runs["learning_rate"].tolist() == pytest.approx([0.0005, 0.005, 0.05, 0.05])  # live
    assert runs["momentum"].iloc[3] == 0.0 and runs["momentum"].iloc[:3].isna().all()
    assert runs["val_loss"].iloc[3] == pytest.approx(2.3 * math.exp(-10 / (12 * 11.0)))
    train = board.curves[board.curves["name"] == "train_loss"]
    assert train.groupby("run_id").size().to_dict() == {1: 30, 2: 30, 3: 30, 4: 15}
    exported = export_tables(board)
    assert "owner" not in exported["runs"] and exported["runs"].shape[0] == 4
    assert set(exported["curves"]["nickname"]) == {"Ada", "Bob", "Cy", "Dee"}
    archive = zipfile.ZipFile(io.BytesIO(board_zip(board)))
    assert sorted(archive.namelist()) == ["curves.csv", "curves.parquet", "runs.csv",
                                          "runs.parquet"]
    csv = pd.read_csv(archive.open("runs.csv"))
    parquet = pd.read_parquet(io.BytesIO(archive.read("runs.parquet")))
    assert csv["score"].tolist()[:3] == pytest.approx(expected, rel=1e-12)
    assert parquet["learning_rate"].tolist() == pytest.approx([0.0005, 0.005, 0.05, 0.05])
    curves = pd.read_parquet(io.BytesIO(archive.read("curves.parquet")))
    assert len(curves) == len(board.curves)


def test_curve_width_keeps_about_200_points():
    assert [challenge_board.curve_every(n) for n in (30, 200, 201, 2000, 10_000, 1_000_000)] \
        == [1, 1, 2, 10, 50, 5000]


def test_a_challenge_run_changes_live_only_its_free_hyperparameters(store):
    import os
    import time

    from runs.service import control
    from runs.service.challenge_guard import FixedByChallenge

    challenge_id = challenges.create_challenge(store, SPEC, caller=TEACHER)
    run_id = store.create_run(BASE, owner=STUDENT.owner)
    store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
    ChallengeTables(store).link(challenge_id, run_id, "Ada")
    control.set_hyper(store, run_id, "learning_rate", 0.01, caller=STUDENT)
    for name, value in (("beta_1", 0.5), ("decay", 0.1)):
        with pytest.raises(FixedByChallenge, match=f"{name} of run #{run_id} refused: fixed by "
                                                   f"challenge {challenge_id}; its runs may "
                                                   "change learning_rate, momentum live"):
            control.set_hyper(store, run_id, name, value, caller=STUDENT)
    control.set_hyper(store, run_id, "beta_1", 0.5)  # the server itself (local) may
    outside = store.create_run(BASE, owner=STUDENT.owner)
    store.update_run(outside, status="running", pid=os.getpid(), heartbeat=time.time())
    control.set_hyper(store, outside, "beta_1", 0.5, caller=STUDENT)  # not in a challenge
    sent = store.commands(run_id)
    assert [json.loads(p)["name"] for p in sent["payload"]] == ["learning_rate", "beta_1"]
