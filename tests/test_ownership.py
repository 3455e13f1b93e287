"""Ownership enforced in the run service (`runs.service.ownership.authorize`): every command, rename,
delete and take-control from a session that does not own the run is refused naming the run and
the rule, and accepted from the owner; takeovers and teacher actions are recorded; response
slices are bounded per run and per session. No run process: the runs are faked as running in
this test's own process (pid alive, heartbeat fresh)."""

from __future__ import annotations

import os
import time

import pytest

from runs.service import control, ownership
from runs.service.ownership import Caller, NotOwner
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

ALICE, BOB = Caller("alice-token"), Caller("bob-token")


@pytest.fixture()
def store(any_store, monkeypatch):
    """A fresh store, once on SQLite and once on PostgreSQL (tests/conftest.py)."""
    monkeypatch.delenv(ownership.TEACHER_SECRET_ENV, raising=False)
    monkeypatch.delenv(ownership.TAKEOVER_ENV, raising=False)
    return any_store


def fake_run(store: RunStore, owner: Caller | None = ALICE, status: str = "running") -> int:
    """A run owned by `owner`, in `status`, 'alive' in this process (no worker)."""
    config = RunConfig(steps=1000, hypergradients=["learning_rate"])
    run_id = store.create_run(config.to_json_dict(), owner=owner.owner if owner else None)
    store.update_run(run_id, status=status, pid=os.getpid(), heartbeat=time.time())
    store.touch_viewers([run_id])  # the owner's tab is open
    return run_id


def _continue(store: RunStore, run_id: int, caller: Caller):
    """Continue needs an interrupted run with a checkpoint, no process (the fake run's pid is
    this test's own) and no hyper-gradients: made so here, then `continuing.continue_run` (left
    queued)."""
    from runs.service import continuing
    from runs.store import checkpoint_files as files
    from runs.store import checkpoints

    store.update_run(run_id, status="interrupted", pid=None,
                     config=RunConfig(steps=1000).to_json_dict())
    checkpoints.of_run(store, run_id).write({}, {
        "format": files.FORMAT, "step": 0, "run_created": store.run(run_id)["created"]})
    return continuing.continue_run(store, run_id, caller=caller, dispatch=False)


# action -> (needs an ended run, how the caller does it)
COMMANDS = {
    "set_hyper": (False, lambda s, r, c: control.set_hyper(s, r, "learning_rate", 0.01,
                                                           caller=c)),
    "pause": (False, lambda s, r, c: control.pause(s, r, caller=c)),
    "resume": (False, lambda s, r, c: control.resume(s, r, caller=c)),
    "stop": (False, lambda s, r, c: control.stop(s, r, caller=c)),
    "autotune": (False, lambda s, r, c: control.autotune(s, r, "learning_rate", 0.1, caller=c)),
    "response_slice": (False, lambda s, r, c: control.response_slice(s, r, "learning_rate",
                                                                     caller=c)),
    "check_hypergradients": (False, lambda s, r, c: control.check_hypergradients(
        s, r, 3, caller=c)),
    "lr_range": (False, lambda s, r, c: control.lr_range(s, r, caller=c)),
    "rename": (False, lambda s, r, c: control.rename(s, r, "renamed", caller=c)),
    "delete": (True, lambda s, r, c: control.delete(s, r, caller=c)),
    "take_control": (False, lambda s, r, c: control.take_control(s, r, c)),
    "continue": (True, _continue),
}


def test_every_action_is_in_the_table():
    assert set(COMMANDS) == set(ownership.ACTIONS)


@pytest.mark.parametrize("action", list(COMMANDS))
def test_a_stranger_is_refused_and_the_owner_accepted(store, action):
    ended, do = COMMANDS[action]
    run_id = fake_run(store, status="finished" if ended else "running")
    before = (store.commands(run_id).to_dict(), store.run(run_id)["name"],
              store.run(run_id)["owner"])
    with pytest.raises(NotOwner, match=rf"run #{run_id} refused.*(another browser session)"):
        do(store, run_id, BOB)
    # nothing happened: no command queued, same name, same owner, run still there
    assert (store.commands(run_id).to_dict(), store.run(run_id)["name"],
            store.run(run_id)["owner"]) == before
    do(store, run_id, ALICE)
    if action == "delete":
        with pytest.raises(KeyError):
            store.run(run_id)
    elif action == "rename":
        assert store.run(run_id)["name"] == "renamed"
    elif action == "take_control":
        assert store.run(run_id)["owner"] == ALICE.owner and store.events(run_id).empty
    elif action == "continue":
        assert store.run(run_id)["status"] == "queued"
        assert list(store.events(run_id)["kind"]) == ["continue"]
    else:
        assert list(store.commands(run_id)["kind"]) == [action]


def test_refusals_say_why(store):
    run_id = fake_run(store)
    with pytest.raises(NotOwner) as refused:
        control.pause(store, run_id, caller=BOB)
    text = str(refused.value)
    assert f"pause of run #{run_id} refused" in text
    assert "only the session that started a run may steer, rename or delete it" in text
    assert isinstance(refused.value, ValueError)  # pages catching ValueError show it
    with pytest.raises(NotOwner, match=r"take control of run #\d+ refused: it belongs to "
                                       r"another browser session \(seen \d+ s ago\)"):
        control.take_control(store, run_id, BOB)


def test_the_store_holds_a_hash_not_the_token(store):
    run_id = fake_run(store)
    owner = store.run(run_id)["owner"]
    assert owner == ALICE.owner and "alice-token" not in owner and len(owner) == 32
    with pytest.raises(NotOwner):  # knowing the stored owner id does not make one the owner
        control.pause(store, run_id, caller=Caller(owner))


def test_an_ownerless_run_is_view_only_until_taken_over(store):
    run_id = fake_run(store, owner=None)  # started from the CLI / an old store
    with pytest.raises(NotOwner, match="no browser session.*Take control first"):
        control.set_hyper(store, run_id, "learning_rate", 0.01, caller=BOB)
    assert control.take_control(store, run_id, BOB) == "the run had no owner"
    control.set_hyper(store, run_id, "learning_rate", 0.01, caller=BOB)
    events = store.events(run_id)
    assert list(events["kind"]) == ["take_control"] and events["actor"][0] == BOB.owner
    with pytest.raises(NotOwner):  # and now it is Bob's: Alice cannot take it back at once
        control.take_control(store, run_id, ALICE)


def test_an_owned_run_is_never_taken_over_by_default(store, monkeypatch):
    monkeypatch.delenv(ownership.TAKEOVER_ENV, raising=False)
    run_id = fake_run(store)
    store.touch_viewers([run_id], now=time.time() - 100_000)  # the owner left long ago
    with pytest.raises(NotOwner, match=r"only a run with no owner can be taken over$"):
        control.take_control(store, run_id, BOB)


def test_fallback_a_live_run_of_a_silent_owner_can_be_taken_over(store, monkeypatch):
    monkeypatch.setenv(ownership.TAKEOVER_ENV, "150")
    run_id = fake_run(store)
    store.touch_viewers([run_id], now=time.time() - 140)
    with pytest.raises(NotOwner, match=r"silent for more than 150 s "
                                       r"\(OPTIMIZER_LAB_TAKEOVER_AFTER_S\)"):
        control.take_control(store, run_id, BOB)
    store.touch_viewers([run_id], now=time.time() - 160)
    assert "owner session was silent for 16" in control.take_control(store, run_id, BOB)
    assert store.run(run_id)["owner"] == BOB.owner
    with pytest.raises(NotOwner):
        control.pause(store, run_id, caller=ALICE)
    # an ended run stays with its owner however long the owner is away
    ended = fake_run(store, status="finished")
    store.touch_viewers([ended], now=time.time() - 100_000)
    with pytest.raises(NotOwner):
        control.take_control(store, ended, BOB)


@pytest.mark.parametrize("raw", ["0", "10", "soon", "inf"])
def test_takeover_setting_is_validated(monkeypatch, raw):
    monkeypatch.setenv(ownership.TAKEOVER_ENV, raw)
    with pytest.raises(ValueError, match=rf"OPTIMIZER_LAB_TAKEOVER_AFTER_S='{raw}' refused"):
        ownership.takeover_after_s()


def test_suggested_takeover_margin_is_the_tab_close_margin():
    from runs.process import run_loop

    assert ownership.SUGGESTED_TAKEOVER_AFTER_S == run_loop.TAB_CLOSED_AFTER_S


def test_teacher_may_stop_rename_delete_and_it_is_recorded(store, monkeypatch):
    teacher = Caller("teacher-token", teacher_secret="chalk-42")
    running, ended = fake_run(store), fake_run(store, status="finished")
    assert not teacher.is_teacher  # the role is off while the secret is unset
    with pytest.raises(NotOwner):
        control.stop(store, running, caller=teacher)
    monkeypatch.setenv(ownership.TEACHER_SECRET_ENV, "chalk-42")
    assert teacher.is_teacher and not Caller("x", teacher_secret="chalk-4").is_teacher
    control.stop(store, running, caller=teacher)
    control.rename(store, ended, "graded", caller=teacher)
    control.delete(store, ended, caller=teacher)
    assert list(store.commands(running)["kind"]) == ["stop"]
    assert list(store.events(running)["kind"]) == ["teacher_stop"]
    assert list(store.events(ended)["kind"]) == ["teacher_rename", "teacher_delete"]
    assert set(store.events(ended)["actor"]) == {teacher.owner}
    for steer in ("set_hyper", "pause", "autotune", "response_slice", "continue"):  # the owner's
        with pytest.raises(NotOwner):
            COMMANDS[steer][1](store, running, teacher)


def test_local_caller_keeps_the_cli_working(store):
    run_id = fake_run(store)
    assert control.pause(store, run_id) > 0  # the CLI and tests: LOCAL by default
    assert store.events(run_id).empty


def test_response_slices_are_bounded_per_run_and_per_session(store):
    first, second = fake_run(store), fake_run(store)
    for _ in range(control.MAX_PENDING_SLICES_PER_RUN):
        control.response_slice(store, first, "learning_rate", caller=ALICE)
    with pytest.raises(ValueError, match=rf"response_slice of run #{first} refused: 2 slices "
                                         r"are already pending for this run \(at most 2\)"):
        control.response_slice(store, first, "learning_rate", caller=ALICE)
    control.response_slice(store, second, "learning_rate", caller=ALICE)  # 3 for Alice
    with pytest.raises(ValueError, match=r"this session has 3 slices pending \(at most 3\)"):
        control.response_slice(store, second, "learning_rate", caller=ALICE)
    store.finish_command(int(store.commands(first)["id"].iloc[0]), "done")
    control.response_slice(store, first, "learning_rate", caller=ALICE)  # room again
    with pytest.raises(ValueError, match=r"horizon=201 refused: must be in \[1, 200\] steps"):
        control.response_slice(store, second, "learning_rate", horizon=201, caller=ALICE)
    with pytest.raises(ValueError, match=r"points=99 refused"):
        control.response_slice(store, second, "learning_rate", points=99, caller=ALICE)


def test_old_store_gets_the_owner_column_and_events_table(store_location):
    from runs.store.connection import Backend

    with Backend(store_location).connect() as con:  # the SQLite DDL, translated on PostgreSQL
        con.executescript("""CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL,
        status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', optimizer TEXT NOT NULL,
        dataset TEXT NOT NULL, model TEXT NOT NULL, seed INTEGER NOT NULL,
        device TEXT NOT NULL DEFAULT '', total_steps INTEGER NOT NULL,
        step INTEGER NOT NULL DEFAULT 0, config TEXT NOT NULL,
        optimizer_config TEXT NOT NULL DEFAULT '{}', hyper_variables TEXT NOT NULL DEFAULT '[]',
        versions TEXT NOT NULL DEFAULT '{}', traces INTEGER NOT NULL DEFAULT 0, pid INTEGER,
        heartbeat REAL)""")
        con.execute("INSERT INTO runs (created, updated, status, optimizer, dataset, model, seed,"
                    " total_steps, config) VALUES (1, 1, 'finished', 'adam', 'digits', 'mlp',"
                    " 0, 10, '{}')")
    store = RunStore(store_location)
    run = store.run(1)
    assert run["owner"] is None and run["pid_start"] is None
    assert store.events(1).empty
    with pytest.raises(NotOwner, match="no browser session"):
        control.delete(store, 1, caller=BOB)


def test_pages_change_runs_only_through_the_run_service():
    """No page or component writes a command, a name, a status or a deletion to the store
    itself: everything goes through `runs.service.control`, hence through `ownership.authorize`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for path in [*root.glob("views/*.py"), *root.glob("components/*.py"), root / "app.py"]:
        text = path.read_text()
        for mutator in (".send_command(", ".rename_run(", ".delete_run(", ".set_status(",
                        ".update_run(", ".add_event("):
            assert mutator not in text, f"{path.name} calls {mutator}"


def test_of_two_servers_taking_a_run_over_at_once_one_wins(store):
    """`take_owner` from two store objects at once (two web servers on one database): one
    UPDATE each, so exactly one of them changes the owner and the run has that owner."""
    import threading

    run_id = fake_run(store, owner=None)
    stores = [RunStore(store.path) for _ in range(2)]
    start, won = threading.Barrier(2), {}

    def take(index: int) -> None:
        start.wait()
        won[index] = stores[index].take_owner(run_id, f"owner-{index}", None)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(won.values()) == [False, True]
    winner = next(i for i, w in won.items() if w)
    assert store.run(run_id)["owner"] == f"owner-{winner}"
