"""The correctness check on a user's own run: forward = reverse = finite differences on the
run's model, over a short horizon from its current state, in float64 on a copy.

`check_run(engine, horizon)` copies the run (the same model built in float64, its current
weights, the optimizer with its current hyperparameter values, schedule and `decay`, every slot
and `iterations`) and runs `hypergrad.correctness.compare` on the run's next `horizon` batches
(its own data order, read from a copy of the order, so the run's next batches are unchanged)
with E = the mean cross-entropy on the run's validation set. The run itself does not move.

Why the numbers may disagree on a ReLU model where the tanh toy agrees: forward and reverse
mode compute the same derivative and agree to round-off whatever the model (Franceschi et al.
2017, sec. 3); a finite difference is the slope only where the loss is smooth in the
hyperparameter, and a ReLU unit that switches on or off between lambda - h and lambda + h
makes it a jump (see `hypergrad.correctness`). Over a few steps with h = 1e-7 * lambda that
rarely happens; when it does, the row fails its finite-difference column only.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import pandas as pd

# The horizon a page may ask for (steps of the copy) and its default.
MIN_HORIZON, MAX_HORIZON, DEFAULT_HORIZON = 1, 20, 5


def check_run(engine: Any, horizon: int = DEFAULT_HORIZON) -> pd.DataFrame:
    """Forward, reverse and finite-difference hyper-gradients of a copy of a live run.

    Args:
        engine: the run's `engine.train_step.Engine` (its model, optimizer, data and order).
        horizon: steps of the copy, in [MIN_HORIZON, MAX_HORIZON].

    Returns:
        `hypergrad.correctness.compare`'s frame (one row per hyperparameter and schedule
        parameter); `attrs` add `step` (the run's step the copy starts after), `horizon`,
        `seconds` (wall time of the check) and `model`.

    Raises:
        ValueError: `horizon` outside its range, or the optimizer is not a pure rule (a
            wrapper or a fused-only class has no rule to differentiate).
    """
    import tensorflow as tf

    from engine.data import load_dataset
    from engine.models import build_model
    from hypergrad.correctness import compare
    from optimizers import registry
    from optimizers.keras_schedules import schedule_from_config

    if not isinstance(horizon, int) or not MIN_HORIZON <= horizon <= MAX_HORIZON:
        raise ValueError(f"horizon={horizon!r} refused: an integer in "
                         f"[{MIN_HORIZON}, {MAX_HORIZON}] steps")
    config = engine.config
    if not registry.is_rule(config.optimizer):
        raise ValueError(f"correctness check refused: {config.optimizer} is not a pure update "
                         "rule (nothing to differentiate)")
    began = time.perf_counter()
    data = load_dataset(config.dataset, "float64", config.label_noise)
    model = build_model(config.model, data, config.seed, "float64")
    model.set_weights([np.asarray(w, np.float64) for w in engine.model.get_weights()])
    source = engine.optimizer
    values = {name: value for name, value in source.hyper_values().items()
              if not isinstance(value, dict)}  # a schedule is rebuilt below
    opt = registry.create(config.optimizer, values, dict(config.options))
    schedule = engine.schedule_values() if hasattr(engine, "schedule_values") else None
    if schedule is not None:
        opt._set_hyper("learning_rate", schedule_from_config("lr_schedule", schedule))
    opt._initial_decay = float(getattr(engine, "decay", 0.0) or 0.0)
    variables = model.trainable_variables
    opt._create_all_weights(variables)
    for mine, theirs in zip(variables, engine.variables):
        for name in source.get_slot_names():
            opt.get_slot(mine, name).assign(
                tf.cast(source.get_slot(theirs, name), tf.float64))
    opt.iterations.assign(source.iterations)
    order = copy.deepcopy(engine.order)  # the run's next batches, its own order untouched
    batches = [np.asarray(order.next(), np.int32) for _ in range(horizon)]
    frame = compare(model, opt, tf.constant(data.x_train), tf.constant(data.y_train),
                    tf.constant(data.x_val), tf.constant(data.y_val), batches)
    frame.attrs.update(step=int(source.iterations.numpy()), horizon=horizon,
                       seconds=round(time.perf_counter() - began, 2), model=config.model)
    return frame


def as_record(frame: pd.DataFrame) -> dict[str, Any]:
    """The check as plain JSON for the run's `correctness_check` column: `rows` (one object per
    parameter with `COLUMNS`), `passed`, and the frame's `attrs`."""
    rows = [{k: (bool(v) if k == "passed" else v if isinstance(v, str) else float(v))
             for k, v in row.items()} for row in frame.to_dict(orient="records")]
    return {"rows": rows, "passed": bool(frame["passed"].all()) if len(frame) else False,
            **{k: v for k, v in frame.attrs.items()}}


__all__ = ["DEFAULT_HORIZON", "MAX_HORIZON", "MIN_HORIZON", "as_record", "check_run"]
