"""The commands of a run process (`runs.protocol.parse`, `runs.process.handlers`): malformed
command rows are refused naming the field and the run trains on; well-formed ones are carried
out.

In-process tests drive `RunLoop.handle` on a real `RunLoop` over a fake engine (no TensorFlow
step); the slow test inserts malformed rows into the store of a real run process. The
store-level tests run on SQLite and on PostgreSQL (`store_location`, tests/conftest.py).
"""

from __future__ import annotations

import json
import time

import pytest

from engine.record_rows import HyperChangeRow
from optimizers.hyperparams import LEARNING_RATE
from runs import protocol
from runs.process.handlers import HANDLERS
from runs.process.run_loop import RunLoop
from runs.store.run_store import RunStore

# (kind, payload column as stored, words the refusal must contain)
MALFORMED = [
    ("set_hyper", "not json", ["set_hyper", "not a JSON object"]),
    ("set_hyper", "[1,2]", ["set_hyper", "JSON object", "list"]),
    ("set_hyper", "null", ["set_hyper", "JSON object", "NoneType"]),
    ("set_hyper", '"learning_rate"', ["JSON object", "str"]),
    ("set_hyper", '{"name": "learning_rate", "value": 0.01, "source": {"a": 1}}',
     ["field source", "string"]),
    ("set_hyper", '{"name": "learning_rate", "value": 0.01, "source": null}',
     ["field source", "string"]),
    ("set_hyper", '{"name": "learning_rate", "value": 0.01, "source": ""}', ["field source"]),
    ("set_hyper", '{"value": 0.01}', ["field name", "required"]),
    ("set_hyper", '{"name": "learning_rate"}', ["field value", "required"]),
    ("set_hyper", '{"name": ["learning_rate"], "value": 0.01}', ["field name"]),
    # the lab's range "(0, 10]" is the service's check (test_set_hyper_checks_the_value_once);
    # a row written past the service meets the optimizer's own guard, which names the field
    ("set_hyper", '{"name": "learning_rate", "value": {"x": 1}}',
     ["learning_rate", "refused", "finite number"]),
    ("set_hyper", '{"name": "learning_rate", "value": 0.01, "name": "momentum"}',
     ["duplicate key 'name'"]),
    ("set_hyper", '{"name": "momentum", "value": 0.5}', ["momentum"]),
    ("pause", "null", ["pause", "JSON object"]),
    ("stop", "[]", ["stop", "JSON object"]),
    ("resume", "not json", ["resume", "not a JSON object"]),
    ("autotune", '{"name": "learning_rate", "hyper_learning_rate": "fast"}',
     ["field hyper_learning_rate"]),
    ("autotune", '{"name": "learning_rate"}', ["field hyper_learning_rate", "required"]),
    ("response_slice", '{"name": "learning_rate", "horizon": "20"}', ["field horizon"]),
    ("response_slice", '{"name": "learning_rate", "points": 9.5}', ["field points"]),
    ("explode", "{}", ["kind='explode'", "set_hyper", "pause", "response_slice"]),
]


# ----- a fake engine: the optimizer surface the handlers use ------------------------------------
class FakeOptimizer:
    def __init__(self):
        self.values = {"learning_rate": 1e-3}

    def spec(self, name):
        if name != "learning_rate":
            raise KeyError(f"FakeOptimizer has no hyperparameter {name!r}; known: learning_rate")
        return LEARNING_RATE

    def hyper_values(self):
        return dict(self.values)

    def _set_hyper(self, name, value):  # the library's guard, as `optimizers.base` has it
        self.values[name] = float(self.spec(name).library_check(value))

    def get_config(self):
        return dict(self.values)


class FakeEngine:
    traces = 1

    def __init__(self):
        self.optimizer = FakeOptimizer()

    def hyper_variables(self):
        return [{"name": n, "value": v} for n, v in self.optimizer.values.items()]


@pytest.fixture()
def fake_run(store_location):
    store = RunStore(store_location)
    run_id = store.create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                               "seed": 0, "steps": 100})
    run = RunLoop(run_id, store, FakeEngine(), total=100, eval_every=10,
                  record=lambda s: True, histogram=lambda s: False, handlers=HANDLERS)
    run.step = 7
    yield store, run_id, run
    run.close()


def insert_raw(store: RunStore, run_id: int, kind, payload) -> int:
    """A command row written as a hostile or buggy page could: no validation at all."""
    with store._connect() as con:
        cur = con.execute("INSERT INTO commands (run_id, created, kind, payload)"
                          " VALUES (?,?,?,?)", (run_id, time.time(), kind, payload))
        return int(cur.lastrowid)


def statuses(store: RunStore, run_id: int) -> dict[int, tuple[str, str]]:
    frame = store.commands(run_id)
    return {int(r.id): (r.status, r.message) for r in frame.itertuples()}


# ----- in-process --------------------------------------------------------------------------------
def test_every_malformed_row_is_refused_naming_the_field_and_the_poll_goes_on(fake_run):
    store, run_id, run = fake_run
    ids = [insert_raw(store, run_id, kind, payload) for kind, payload, _ in MALFORMED]
    good = store.send_command(run_id, "set_hyper", {"name": "learning_rate", "value": 0.01})
    run.poll()  # one malformed row must not stop the rows after it
    rows = statuses(store, run_id)
    for command_id, (kind, payload, words) in zip(ids, MALFORMED):
        status, message = rows[command_id]
        assert status == "refused", (kind, payload, message)
        for word in words:
            assert word in message, (kind, payload, message)
    assert rows[good] == ("done", "")
    assert run.engine.optimizer.values["learning_rate"] == 0.01
    assert not run.paused and not run.stop_requested  # no refused pause/stop took effect
    run.flush(wait=True)
    changes = store.hyper_changes(run_id)
    assert changes[["step", "name", "old", "new", "source"]].values.tolist() == [
        [8, "learning_rate", 1e-3, 0.01, "user"]]


def test_well_formed_commands_act_and_extra_keys_are_ignored(fake_run):
    store, run_id, run = fake_run
    assert run.handle({"id": store.send_command(run_id, "pause", {"why": 1}),
                       "kind": "pause", "payload": '{"why": 1}'}) == "done"
    assert run.paused and store.run(run_id)["status"] == "paused"
    assert run.handle({"id": store.send_command(run_id, "resume"), "kind": "resume",
                       "payload": "{}"}) == "done"
    assert not run.paused
    command_id = store.send_command(run_id, "set_hyper", {"name": "learning_rate",
                                                          "value": 2, "source": "teacher"})
    assert run.handle({"id": command_id, "kind": "set_hyper", "payload": json.dumps(
        {"name": "learning_rate", "value": 2, "source": "teacher"})}) == "done"
    assert run.buffers["hyper_changes"] == [] and run.engine.optimizer.values == {
        "learning_rate": 2.0}
    run.flush(wait=True)
    assert store.hyper_changes(run_id)["source"].tolist() == ["teacher"]
    stop = store.send_command(run_id, "stop")
    assert run.handle({"id": stop, "kind": "stop", "payload": "{}"}) == "done"
    assert run.stop_requested and "after step 7" in run.stop_message


def test_hyper_commands_are_refused_on_a_plain_run(fake_run):
    store, run_id, run = fake_run
    for kind, payload in (("autotune", {"name": "learning_rate", "hyper_learning_rate": 1.0}),
                          ("response_slice", {"name": "learning_rate"})):
        command_id = store.send_command(run_id, kind, payload)
        assert run.handle({"id": command_id, "kind": kind,
                           "payload": json.dumps(payload)}) == "refused"
        assert "does not follow hyper-gradients" in statuses(store, run_id)[command_id][1]


def test_the_handlers_serve_every_kind_a_page_may_send():
    assert set(HANDLERS) == set(protocol.COMMAND_KINDS) == set(protocol.PAYLOADS)


def test_parse_names_the_kinds_and_the_row_types_are_named():
    with pytest.raises(protocol.Refused, match="known kinds are set_hyper, autotune"):
        protocol.parse(None, "{}")
    payload = protocol.parse("response_slice", '{"name": "beta_1", "horizon": null}')
    assert isinstance(payload, protocol.ResponseSlice) and payload.horizon is None
    assert HyperChangeRow(1, "lr", None, 0.1, "init")._asdict()["source"] == "init"


def test_a_missing_value_is_refused_naming_the_field_and_the_hyperparameter():
    with pytest.raises(protocol.Refused) as refused:
        protocol.parse("set_hyper", '{"name": "learning_rate"}')
    assert str(refused.value) == ("set_hyper refused: field value is required for hyperparameter "
                                  "'learning_rate' (fields: name, value, source)")
    with pytest.raises(protocol.Refused, match="field hyper_learning_rate is required for "
                                               "hyperparameter 'beta_1'"):
        protocol.parse("autotune", '{"name": "beta_1"}')
    with pytest.raises(protocol.Refused, match=r"field name is required \(fields"):
        protocol.parse("set_hyper", '{"value": 0.1}')


def test_set_hyper_checks_the_value_once_where_it_enters_the_service(fake_run):
    """The service refuses a value outside the lab's range (naming it) and queues nothing; the
    run process then trusts the payload (the optimizer keeps only the library's guard)."""
    from optimizers.hyperparams import InvalidHyperparameter
    from runs.service import control

    store, run_id, run = fake_run
    for value in ({"x": 1}, 50.0, 0.0, float("nan")):
        with pytest.raises(InvalidHyperparameter, match=r"learning_rate.*\(0, 10\]"):
            control.set_hyper(store, run_id, "learning_rate", value)
    with pytest.raises(KeyError, match="hyperparameter 'nesterov_x' refused"):
        control.set_hyper(store, run_id, "nesterov_x", 0.5)
    assert store.commands(run_id).empty
    command_id = control.set_hyper(store, run_id, "learning_rate", 2)
    assert json.loads(store.commands(run_id)["payload"].iloc[-1]) == {
        "name": "learning_rate", "value": 2.0, "source": "user"}
    run.poll()
    assert store.command_status(command_id) == "done"
    assert run.engine.optimizer.values["learning_rate"] == 2.0


def test_run_settings_are_checked_by_the_protocol_once_for_service_and_process(fake_run):
    from schedules.table import ScheduleError
    from runs.service import control

    store, run_id, _ = fake_run
    with pytest.raises(ValueError, match=r"decay=-1.0 refused: must be a float in \[0"):
        control.set_hyper(store, run_id, "decay", -1.0)
    with pytest.raises(ScheduleError, match="lr_schedule.class_name='os.system' refused"):
        control.set_hyper(store, run_id, "lr_schedule", {"class_name": "os.system"})
    with pytest.raises(protocol.Refused, match=r"decay=-1.0 refused: must be a float in \[0"):
        protocol.parse("set_hyper", {"name": "decay", "value": -1.0})
    assert protocol.parse("set_hyper", {"name": "decay", "value": 1}).value == 1.0


# ----- a real run process ------------------------------------------------------------------------
@pytest.mark.slow
def test_malformed_rows_in_a_real_run_are_refused_and_the_run_finishes(store):
    from runs.service import control, waiting
    from settings.run_config import RunConfig

    config = RunConfig(dataset="moons", model="logistic", steps=4000, eval_every=500)
    run_id = control.start_run(config, store)
    waiting.wait_for_step(store, run_id, 1, timeout_s=180)
    ids = [insert_raw(store, run_id, kind, payload) for kind, payload, _ in MALFORMED]
    good = store.send_command(run_id, "set_hyper", {"name": "learning_rate", "value": 0.01})
    for command_id, (kind, payload, words) in zip(ids, MALFORMED):
        row = waiting.wait_for_command(store, command_id, timeout_s=60)
        assert row["status"] == "refused", (kind, payload, row)
        assert all(word in row["message"] for word in words), (kind, payload, row)
    assert waiting.wait_for_command(store, good, timeout_s=60)["status"] == "done"
    run = waiting.wait_for_status(store, run_id, "finished", timeout_s=300)
    assert run["step"] == 4000, run["message"]
    assert run["optimizer_config"]["learning_rate"] == 0.01


def test_polling_through_a_held_connection_sees_every_new_command(store_location):
    """The run loop polls through one connection held for the whole run: each poll still sees
    the commands other connections committed since (no snapshot kept between reads), and a
    connection that broke falls back to a fresh one."""
    store = RunStore(store_location)
    run_id = store.create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                               "seed": 0, "steps": 10})
    held = store.open_connection()
    assert store.pending(run_id, held) == []
    first = store.send_command(run_id, "pause")
    assert [c["id"] for c in store.pending(run_id, held)] == [first]
    store.finish_command(first, "done", "")
    second = store.send_command(run_id, "resume")
    assert [c["id"] for c in store.pending(run_id, held)] == [second]
    held.close()  # a closed connection raises the driver's error: read afresh
    assert [c["kind"] for c in store.pending(run_id, held)] == ["resume"]


def test_command_status_follows_the_command(store_location):
    store = RunStore(store_location)
    run_id = store.create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                               "seed": 0, "steps": 10})
    command = store.send_command(run_id, "pause")
    assert store.command_status(command) == "pending"
    store.finish_command(command, "refused", "the run is paused")
    assert store.command_status(command) == "refused"
    assert store.command_status(command + 1000) is None


def test_two_servers_sending_the_same_command_queue_it_once(store_location):
    """`send_command_once` from several store objects at once (as from several web servers
    on one database): exactly one of them queues the command, the others get its id."""
    import threading

    stores = [RunStore(store_location) for _ in range(6)]
    run_id = stores[0].create_run({"optimizer": "adam", "dataset": "moons", "model": "mlp",
                                   "seed": 0, "steps": 10})
    start, results = threading.Barrier(len(stores)), []

    def send(store: RunStore) -> None:
        start.wait()
        results.append(store.send_command_once(run_id, "pause"))

    threads = [threading.Thread(target=send, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(queued for _, queued in results) == [False] * 5 + [True]
    assert {command_id for command_id, _ in results} == {
        int(i) for i in stores[0].commands(run_id)["id"]}
    assert len(stores[0].pending(run_id)) == 1
