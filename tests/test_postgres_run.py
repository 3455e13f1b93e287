"""A real run process on a PostgreSQL store: the worker is given the store's URL, opens its own
pool, polls its commands through a held autocommit connection and writes its records in one
transaction per batch, exactly as on SQLite (the SQLite twin of every step is covered by
tests/test_commands.py, tests/test_pool.py and the engine tests)."""

from __future__ import annotations

import pytest

from runs.protocol import FINAL_STATUSES
from runs.service import control, pool, waiting
from settings.run_config import RunConfig


@pytest.mark.parametrize("store_location", ["postgresql"], indirect=True)
def test_a_run_trains_and_obeys_its_commands_on_postgresql(any_store):
    store = any_store
    config = RunConfig(dataset="moons", model="logistic", eval_every=50, steps=1_000_000)
    run_id = control.start_run(config, store)
    try:
        waiting.wait_for_step(store, run_id, 2, timeout_s=180)
        changed = control.set_hyper(store, run_id, "learning_rate", 0.02)
        assert waiting.wait_for_command(store, changed, timeout_s=60)["status"] == "done"
        assert waiting.wait_for_command(store, control.pause(store, run_id),
                                        timeout_s=60)["status"] == "done"
        assert waiting.wait_for_status(store, run_id, "paused", timeout_s=60)
        control.resume(store, run_id)
        assert waiting.wait_for_status(store, run_id, "running", timeout_s=60)
    finally:
        control.stop(store, run_id)
        run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=120)
        pool.reap()
    assert run["status"] == "stopped", run["message"]
    assert run["step"] >= 2 and run["worker"] == "cold"
    changes = store.hyper_changes(run_id)
    user = changes[changes["source"] == "user"]
    assert user[["name", "new"]].values.tolist() == [["learning_rate", 0.02]]
    assert int(user["step"].iloc[0]) >= 2  # took effect after the step it was sent at
    scalars = store.scalars(run_id, names=["train_loss"])
    assert len(scalars) >= 2 and scalars["step"].is_monotonic_increasing
    kinds = store.commands(run_id)[["kind", "status"]].values.tolist()
    assert kinds[:3] == [["set_hyper", "done"], ["pause", "done"], ["resume", "done"]]
