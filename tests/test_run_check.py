"""The correctness check on a user's own run: a float64 copy of the run from its current state
agrees forward = reverse = finite differences, and the run itself does not move."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from engine.train_step import Engine
from runs.process.handlers import HANDLERS
from runs.process.run_loop import RunLoop
from runs.service import control
from runs.store.processes import process_start
from runs.store.run_store import RunStore
from settings.run_config import RunConfig


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    config = RunConfig(optimizer="adam", dataset="moons", model="mlp", batch_size=32,
                       steps=200, eval_every=1000, hyperparameters={"learning_rate": 0.01})
    store = RunStore(tmp_path_factory.mktemp("check") / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    store.set_status(run_id, "running")
    # this process trains the run: alive, so a long check is never taken for a dead run
    store.update_run(run_id, pid=os.getpid(), pid_start=process_start(os.getpid()))
    engine = Engine(config, "/CPU:0")
    run = RunLoop(run_id, store, engine, total=config.steps, eval_every=config.eval_every,
                  record=lambda s: False, histogram=lambda s: False, handlers=HANDLERS)
    for _ in range(30):  # a state with non-trivial slots
        run.one_step()
    yield run, store, run_id
    run.close()


def test_the_check_on_a_copy_of_the_run_agrees_and_leaves_the_run_alone(live_run):
    run, store, run_id = live_run
    weights = [w.copy() for w in run.engine.model.get_weights()]
    m = run.engine.optimizer.get_slot(run.engine.variables[0], "m").numpy().copy()
    buffer, state = run.engine.order.buffer.copy(), run.engine.order.rng.get_state()[1].copy()
    command = control.check_hypergradients(store, run_id, horizon=3)
    (row,) = store.pending(run_id)
    assert json.loads(row["payload"]) == {"horizon": 3}
    assert run.handle(row) == "done", store.commands(run_id)["message"].tolist()
    result = store.run(run_id)["correctness_check"]
    assert result["step"] == 30 and result["horizon"] == 3 and result["model"] == "mlp"
    names = [r["hyperparameter"] for r in result["rows"]]
    assert names == ["learning_rate", "beta_1", "beta_2", "epsilon"]
    for r in result["rows"]:
        assert np.isfinite(r["forward"]) and r["forward"] != 0.0
        # forward and reverse mode are the same derivative: round-off only
        assert r["rel_err_forward_reverse"] <= 1e-8, r
        # the central difference on the ReLU model, 3 steps, h = 1e-7 lambda
        assert r["rel_err_forward_fd"] <= 1e-4, r
    assert result["passed"] is True
    # the run itself: weights, slots and its next batches untouched
    for before, after in zip(weights, run.engine.model.get_weights()):
        np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(
        m, run.engine.optimizer.get_slot(run.engine.variables[0], "m").numpy())
    np.testing.assert_array_equal(buffer, run.engine.order.buffer)
    np.testing.assert_array_equal(state, run.engine.order.rng.get_state()[1])
    assert command == row["id"]


def test_bad_checks_are_refused_naming_the_field(live_run):
    run, store, run_id = live_run
    for horizon in (0, 21, 2.5, True):
        with pytest.raises(ValueError, match=r"horizon=.* refused: must be an integer in "
                                             r"\[1, 20\] steps"):
            control.check_hypergradients(store, run_id, horizon=horizon)
    control.check_hypergradients(store, run_id, horizon=1)
    with pytest.raises(ValueError, match="already pending"):
        control.check_hypergradients(store, run_id, horizon=1)
    for row in store.pending(run_id):
        store.finish_command(row["id"], "refused", "test: not run")
