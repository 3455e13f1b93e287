"""The class board's tables of the run store: challenges and the runs that joined them.

`challenges(id, created, title, spec, status, owner, closed)` and
`challenge_runs(run_id, challenge_id, nickname, joined, pinned)` (declared in
`runs.store.schema.CHALLENGE_SCHEMA`, created by `RunStore` like every table). This module
only reads and writes rows; what a valid challenge is, who may do what and how a run is scored
live in `runs.service.challenges` and `runs.service.challenge_score`. No Streamlit, no
TensorFlow.
"""

from __future__ import annotations

import json
import time
from typing import Any
from collections.abc import Sequence

import pandas as pd

from runs.store.run_store import RunStore

OPEN, CLOSED = "open", "closed"


class ChallengeTables:
    """Rows of `challenges` and `challenge_runs` in one run store.

    Args:
        store: the run store (its connection, `immediate` transaction and `frame` reader).
    """

    def __init__(self, store: RunStore):
        self.store = store

    # ----- challenges ---------------------------------------------------------------------
    def create(self, title: str, spec: dict[str, Any], owner: str = "") -> int:
        """Insert an open challenge (`spec` already validated); returns its id."""
        with self.store.immediate() as con:
            cur = con.execute(
                "INSERT INTO challenges (created, title, spec, status, owner) VALUES (?,?,?,?,?)",
                (time.time(), title, json.dumps(spec), OPEN, owner))
            return int(cur.lastrowid or 0)  # an INSERT always sets it

    def get(self, challenge_id: int) -> dict[str, Any]:
        """One challenge: `id, created, title, spec` (decoded), `status, owner, closed`.

        Raises:
            KeyError: no challenge with this id (the message names it).
        """
        frame = self.store.frame("SELECT * FROM challenges WHERE id = ?", (int(challenge_id),))
        if frame.empty:
            raise KeyError(f"challenge={challenge_id} is not in the store {self.store.path}")
        row = frame.iloc[0].to_dict()
        row["id"] = int(row["id"])
        row["spec"] = json.loads(row["spec"])
        return row

    def all(self) -> pd.DataFrame:
        """Every challenge, newest first: `id, created, title, status, runs` (runs joined)."""
        return self.store.frame(
            "SELECT c.id, c.created, c.title, c.status, COUNT(r.run_id) AS runs FROM challenges c"
            " LEFT JOIN challenge_runs r ON r.challenge_id = c.id GROUP BY c.id ORDER BY c.id DESC",
            ())

    def close(self, challenge_id: int) -> bool:
        """Mark an open challenge closed (no run joins it any more); True when this call did."""
        with self.store.immediate() as con:
            return con.execute(
                "UPDATE challenges SET status = ?, closed = ? WHERE id = ? AND status = ?",
                (CLOSED, time.time(), int(challenge_id), OPEN)).rowcount == 1

    # ----- the runs of a challenge ----------------------------------------------------------
    def link(self, challenge_id: int, run_id: int, nickname: str) -> bool:
        """Record that `run_id` joined the challenge under `nickname`, only while the challenge
        is open: one INSERT ... WHERE EXISTS, so a run cannot join a challenge closed a moment
        before. True when linked; False when the challenge is closed or missing, or the run
        already joined one."""
        with self.store.immediate() as con:
            return con.execute(
                "INSERT OR IGNORE INTO challenge_runs (run_id, challenge_id, nickname, joined)"
                " SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM challenges WHERE id = ? AND"
                " status = ?)",
                (int(run_id), int(challenge_id), nickname, time.time(), int(challenge_id), OPEN)
            ).rowcount == 1

    def challenge_of(self, run_id: int) -> int | None:
        """The challenge a run joined, or None."""
        frame = self.store.frame("SELECT challenge_id FROM challenge_runs WHERE run_id = ?",
                                 (int(run_id),))
        return None if frame.empty else int(frame["challenge_id"].iloc[0])

    def runs(self, challenge_id: int) -> pd.DataFrame:
        """The challenge's runs that are still in the store, in the order they joined:
        `run_id, nickname, pinned` (bool), `joined`, and the run's `status, step, total_steps,
        optimizer, owner, config` (JSON text), `optimizer_config` (JSON text)."""
        frame = self.store.frame(
            "SELECT c.run_id, c.nickname, c.pinned, c.joined, r.status, r.step, r.total_steps,"
            " r.optimizer, r.owner, r.config, r.optimizer_config FROM challenge_runs c"
            " JOIN runs r ON r.id = c.run_id WHERE c.challenge_id = ? ORDER BY c.joined, c.run_id",
            (int(challenge_id),))
        frame["pinned"] = frame["pinned"].astype(bool)
        return frame

    def set_pinned(self, challenge_id: int, run_id: int, pinned: bool) -> bool:
        """Pin (or unpin) a run of the challenge; True when the run is one of its runs."""
        with self.store.immediate() as con:
            return con.execute(
                "UPDATE challenge_runs SET pinned = ? WHERE challenge_id = ? AND run_id = ?",
                (int(bool(pinned)), int(challenge_id), int(run_id))).rowcount == 1

    # ----- records of many runs at once (one query each, for a board refresh) ---------------
    def scalars(self, run_ids: Sequence[int], names: Sequence[str],
                every: int = 1) -> pd.DataFrame:
        """Long table `run_id, step, name, value` of these runs' scalars, by run then step.

        Args:
            every: keep steps that are multiples of it (and step <= 1), for the overlaid curves
                of long runs (validation steps are multiples of `eval_every`: pass 1 for them).
        """
        if not run_ids or not names:
            return pd.DataFrame({"run_id": [], "step": [], "name": [], "value": []})
        ids, marks = [int(i) for i in run_ids], ",".join("?" * len(names))
        where = f"run_id IN ({','.join('?' * len(ids))}) AND name IN ({marks})"
        params: list[Any] = [*ids, *names]
        if every > 1:
            where += " AND (step % ? = 0 OR step <= 1)"
            params.append(int(every))
        return self.store.frame(f"SELECT run_id, step, name, value FROM scalars WHERE {where}"
                                " ORDER BY run_id, step", params)

    def hyper_changes(self, run_ids: Sequence[int]) -> pd.DataFrame:
        """`run_id, step, name, new` of every hyperparameter change of these runs, in the order
        they took effect (the last row per run and name is the value it trains with now)."""
        if not run_ids:
            return pd.DataFrame({"run_id": [], "step": [], "name": [], "new": []})
        ids = [int(i) for i in run_ids]
        return self.store.frame(
            "SELECT run_id, step, name, new FROM hyper_changes WHERE run_id IN"
            f" ({','.join('?' * len(ids))}) ORDER BY run_id, step, rowid", ids)
