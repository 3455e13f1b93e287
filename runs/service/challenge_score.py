"""Scores and ranks of a challenge's runs, from their validation records. Pure pandas.

Goals (`runs.service.challenges.GOALS`):

* `val_loss_at_step`: the score is the validation loss (mean cross-entropy, nats) recorded at
  step N exactly; lower is better. A run has no score until it has validated at step N (the
  run loop validates every `eval_every` steps and at its last step, so N is one of those).
* `steps_to_accuracy`: the score is the first validation step at which validation accuracy
  (a fraction) is >= X; fewer is better. A run that never reached X has no score. Its
  resolution is `eval_every` steps (accuracy is only measured there).

Ranks are 1-based and shared by equal scores (pandas `rank(method="min")`: 1, 2, 2, 4); runs
without a score have no rank and come last.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def scores(goal: str, validation: pd.DataFrame, goal_step: int | None = None,
           goal_accuracy: float | None = None) -> pd.Series:
    """The score of every run that has one.

    Args:
        goal: `val_loss_at_step` or `steps_to_accuracy`.
        validation: long table `run_id, step, name, value` holding (at least) the runs'
            `val_loss` rows (first goal) or `val_accuracy` rows (second goal).
        goal_step: N of the first goal. goal_accuracy: X of the second (a fraction).

    Returns:
        float Series indexed by run id (named `score`): nats for the first goal, steps for
        the second. Runs without a score are absent.

    Raises:
        ValueError: an unknown goal, or its parameter missing.
    """
    if goal == "val_loss_at_step":
        if goal_step is None:
            raise ValueError("goal_step=None refused: the goal val_loss_at_step needs a step")
        rows = validation[(validation["name"] == "val_loss") & (validation["step"] == goal_step)]
        out = rows.groupby("run_id")["value"].last()
    elif goal == "steps_to_accuracy":
        if goal_accuracy is None:
            raise ValueError("goal_accuracy=None refused: the goal steps_to_accuracy needs a "
                             "fraction in (0, 1]")
        rows = validation[(validation["name"] == "val_accuracy")
                          & (validation["value"] >= goal_accuracy)]
        out = rows.groupby("run_id")["step"].min().astype(float)
    else:
        raise ValueError(f"goal={goal!r} refused: must be val_loss_at_step or "
                         "steps_to_accuracy")
    out = out[np.isfinite(out.to_numpy(dtype=float))]
    out.index = out.index.astype(int)
    return out.rename("score")


def ranks(score: pd.Series) -> pd.Series:
    """1-based ranks of `score` (lower is better for both goals), ties sharing the best rank;
    NaN scores get no rank (a float Series, NaN there)."""
    return score.rank(method="min", ascending=True)


def latest(validation: pd.DataFrame, name: str) -> pd.Series:
    """The last recorded value of scalar `name` per run (indexed by run id)."""
    rows = validation[validation["name"] == name].sort_values(["run_id", "step"])
    out = rows.groupby("run_id")["value"].last()
    out.index = out.index.astype(int)
    return out.rename(name)
