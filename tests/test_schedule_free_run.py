"""A schedule-free run is validated at its average x (the paper's answer) and also at y, where
its gradients are taken: both series are recorded, and each equals a direct evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from components import figures
from engine.record_rows import VAL_LOSS_AT_VARIABLES
from engine.train_step import Engine, cross_entropy
from runs.process.handlers import HANDLERS
from runs.process.run_loop import RunLoop
from runs.store.run_store import RunStore
from settings.run_config import RunConfig


def test_a_schedule_free_run_records_the_loss_at_x_and_at_y(tmp_path):
    config = RunConfig(optimizer="schedule_free_adamw", dataset="moons", model="logistic",
                       batch_size=32, steps=40, eval_every=20,
                       hyperparameters={"learning_rate": 0.05})
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.create_run(config.to_json_dict())
    engine = Engine(config, "/CPU:0")
    run = RunLoop(run_id, store, engine, total=config.steps, eval_every=config.eval_every,
                  record=lambda s: False, histogram=lambda s: False, handlers=HANDLERS)
    try:
        for _ in range(config.steps):
            run.one_step()
        run.flush(wait=True)
        scalars = store.scalars(run_id)
        at_x = scalars[scalars["name"] == "val_loss"].set_index("step")["value"]
        at_y = scalars[scalars["name"] == VAL_LOSS_AT_VARIABLES].set_index("step")["value"]
        assert list(at_x.index) == list(at_y.index) == [20, 40]
        # at y: the variables themselves
        direct_y = float(cross_entropy(engine.y_val, engine.model(engine.x_val)))
        assert at_y[40] == pytest.approx(direct_y, rel=1e-6)
        # at x = (y - (1 - beta_1) z) / beta_1, the optimizer's own answer
        xs = engine.optimizer.eval_weights(engine.variables)
        saved = [v.numpy() for v in engine.variables]
        for var, x in zip(engine.variables, xs):
            var.assign(x)
        direct_x = float(cross_entropy(engine.y_val, engine.model(engine.x_val)))
        for var, value in zip(engine.variables, saved):
            var.assign(value)
        assert at_x[40] == pytest.approx(direct_x, rel=1e-6)
        assert abs(at_x[40] - at_y[40]) > 1e-6  # two different points
        np.testing.assert_array_equal(saved[0], engine.variables[0].numpy())  # y restored
        names = [t.name for t in figures.loss_figure(scalars).data]
        assert "val loss at x (the answer)" in names
        assert "val loss at y (the gradients' point)" in names
    finally:
        run.close()
