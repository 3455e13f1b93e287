"""A challenge's board as tables: one row per run (its nickname, its hyperparameters as they
are now, its score and rank) and the runs' curves. Read from the store in a few queries (one
per table for all runs, whatever their number), so a live board refresh costs the same for 5
runs as for 50. No Streamlit, no TensorFlow.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np
import pandas as pd

from runs.service import challenge_score
from runs.service.challenges import ChallengeSpec
from runs.store.challenges import ChallengeTables
from runs.store.run_store import RunStore

CURVE_POINTS = 200  # about this many train-loss points per run on the overlaid chart
RUN_COLUMNS = ("rank", "nickname", "run_id", "optimizer", "score", "val_loss", "val_accuracy",
               "step", "total_steps", "status", "pinned")


class Board(NamedTuple):
    """Attributes:
        runs: one row per run, joined order: `RUN_COLUMNS` plus one float column per free
            hyperparameter (`hypers`; NaN when the run's optimizer has none of that name) with
            the value the run trains with now; `owner` (owner id of the session).
        curves: long table `run_id, step, name, value` of `train_loss` (about `CURVE_POINTS`
            steps per run) and every `val_loss`/`val_accuracy` row.
        hypers: the challenge's free hyperparameter names (column names in `runs`).
    """

    runs: pd.DataFrame
    curves: pd.DataFrame
    hypers: list[str]


def curve_every(total_steps: int, points: int = CURVE_POINTS) -> int:
    """The step width keeping about `points` steps of a `total_steps` run: 1, 2, 5, 10, 20, ...
    (multiples of the recording strides, which are powers of ten)."""
    width = 1
    while total_steps / width > points:
        width = width * 5 // 2 if str(width).startswith("2") else width * 2
    return width


def live_hypers(runs: pd.DataFrame, changes: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Per run (index: run id), the value of each of `names` it trains with now: the start
    value of its config, replaced by its last `hyper_changes` row of that name (`init`, a
    student's change, a teacher's). NaN where the run's optimizer has no such hyperparameter.

    Args:
        runs: `run_id` and `config` (the run's config JSON text).
        changes: `run_id, step, name, new`, in the order they took effect.
    """
    values = pd.DataFrame(np.nan, index=runs["run_id"].astype(int).to_list(),
                          columns=list(names), dtype=float)
    for run_id, config in zip(runs["run_id"], runs["config"]):
        start = json.loads(config).get("hyperparameters", {})
        for name in names:
            if name in start:
                values.loc[int(run_id), name] = float(start[name])
    if not changes.empty:
        last = changes[changes["name"].isin(names)].groupby(["run_id", "name"])["new"].last()
        for (run_id, name), value in last.items():
            if int(run_id) in values.index:
                values.loc[int(run_id), name] = float(value)
    return values


def board(store: RunStore, challenge_id: int, spec: ChallengeSpec) -> Board:
    """The board of a challenge, read now.

    Raises:
        KeyError: no such challenge (from the caller's `load_spec`).
    """
    tables = ChallengeTables(store)
    runs = tables.runs(challenge_id)
    ids = [int(i) for i in runs["run_id"]]
    hypers = list(spec.free)
    validation = tables.scalars(ids, ("val_loss", "val_accuracy"))
    every = curve_every(int(spec.config().steps))
    train = tables.scalars(ids, ("train_loss",), every=every)
    curves = pd.concat([train, validation], ignore_index=True)
    values = live_hypers(runs, tables.hyper_changes(ids), hypers)
    score = challenge_score.scores(spec.goal, validation, spec.goal_step, spec.goal_accuracy)
    frame = runs.set_index(pd.Index(runs["run_id"].astype(int)))
    frame = frame.assign(score=score, val_loss=challenge_score.latest(validation, "val_loss"),
                         val_accuracy=challenge_score.latest(validation, "val_accuracy"))
    frame["rank"] = challenge_score.ranks(frame["score"])
    frame = frame.join(values)
    frame.index.name = None  # the run id is also a column
    frame = frame.sort_values(["rank", "run_id"], na_position="last")
    columns = [*RUN_COLUMNS, *hypers, "owner"]
    out = frame.reset_index(drop=True).reindex(columns=list(dict.fromkeys(columns)))
    return Board(out, curves, hypers)
