"""Continue an ended run from its last checkpoint: the one validation, and the requeue. No
TensorFlow, no Streamlit (the Runs page's Continue and `optimizer-lab train --continue ID`).

What may be continued: a run that is `interrupted` (its process died: a killed host, a server
restart), `stopped`, or `failed` because the store could not be written (a full or read-only
disk, `runs.store.files.StoreUnavailable`), whose process is gone, that does not follow
hyper-gradients (their tangents are not checkpointed) and that has a checkpoint
(`runs.store.checkpoints`) written for this very run row. Only the run's owner (or a local
caller) may continue it (`runs.service.ownership.authorize`, action `continue`). Anything else
is refused with a `ValueError` (`NotOwner` for ownership) naming the run and why.

The run goes on under the SAME id: its curves, its live changes and its links (the Train page,
a shared challenge board) stay those of one run, and the Runs page needs no stitching of two
rows. What happened is recorded with the run: a `continue` run event whose detail is
"continued from step k; n steps since the last checkpoint were lost" (`notes`), where n is the
last step the store recorded (`runs.step`) minus k. Steps trained after the last record batch
(at most `runs.process.run_loop.FLUSH_EVERY_S` of training) never reached the store and are
not counted: the store cannot know them.

Records after the checkpoint's step k that were committed before the interruption are DROPPED
(every record table, rows with step > k), in the same transaction that requeues the run: the
continued run trains steps k+1.. again and writes their rows itself, and keeping the old ones
would draw two values at one step, or a live change that the restored weights never saw.
A live change dropped that way is counted in the note ("m live changes after it were undone").
Commands still pending (never read by the ended process) are refused, naming the continue.

The requeued run waits in the queue as a new run does (`pool.dispatch`); its place is by id, so
a continued run goes before runs queued after it first started. A pace set with `set_speed` is
queued again so that it trains at the same pace. The process that takes it finds the continue
request (`runs.store.checkpoints`) and restores the checkpoint before its first step
(`runs.process.checkpoint.attach`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from engine.record_rows import ROW_TYPES
from runs.protocol import QUEUED
from runs.service import ownership, pool
from runs.service.ownership import LOCAL, Caller
from runs.store import checkpoint_files as files
from runs.store import checkpoints
from runs.store.checkpoint_files import FAILED_EVENT, CheckpointError
from runs.store.processes import same_process_alive
from runs.store.run_store import RunStore

# Record tables whose `step` is a step of a sweep on a copy of the run (a learning-rate range
# test), not of the run: a continued run keeps them.
SWEEP_TABLES = frozenset({"lr_range"})

CONTINUABLE = ("interrupted", "stopped", "failed")
EVENT = "continue"  # the `run_events` kind of a continue
_STORE_FAILURE = "StoreUnavailable"  # how `runs.process.worker` names a store failure


@dataclass(frozen=True)
class Continued:
    """What a continue did.

    Attributes:
        run_id: the run (the same id goes on).
        from_step: the checkpoint's step k (steps done when it was written).
        lost_steps: steps the run had reached beyond k (`runs.step` - k), trained again.
        dropped_changes: live hyperparameter changes after step k that were undone.
        note: the sentence the pages show ("continued from step k; n steps ... lost").
    """

    run_id: int
    from_step: int
    lost_steps: int
    dropped_changes: int
    note: str


def checkpoint_step(store: RunStore, run: dict[str, Any]) -> int | None:
    """The step of the run's checkpoint, or None when it has none that belongs to this run row
    (a checkpoint of a store whose ids were reused does not count)."""
    try:
        meta = checkpoints.of_run(store, run["id"]).read_meta()
    except CheckpointError:
        return None
    return int(meta["step"]) if meta.get("run_created") == run["created"] else None


def refusal(store: RunStore, run: dict[str, Any]) -> str:
    """Why `run` cannot be continued now ("" when it can); ownership is not checked here."""
    run_id, status = run["id"], run["status"]
    if status not in CONTINUABLE or (status == "failed"
                                     and _STORE_FAILURE not in (run.get("message") or "")):
        what = "failed (not because of the store)" if status == "failed" else status
        return (f"continue of run #{run_id} refused: the run is {what}; only an interrupted "
                "run, a stopped run or a run that failed because the store could not be "
                "written can be continued")
    if run.get("config", {}).get("hypergradients"):
        return (f"continue of run #{run_id} refused: it follows hyper-gradients, whose "
                "tangents are not checkpointed; start a new run")
    if same_process_alive(run.get("pid"), run.get("pid_start")):
        return (f"continue of run #{run_id} refused: its process {run['pid']} still runs; try "
                "again in a few seconds")
    if checkpoint_step(store, run) is None:
        return (f"continue of run #{run_id} refused: it has no checkpoint (it ended before "
                "its first one, or checkpoints were off: "
                f"{files.EVERY_ENV})")
    return ""


def note(from_step: int, lost_steps: int, dropped_changes: int = 0) -> str:
    """The sentence shown with a continued run."""
    text = (f"continued from step {from_step:,}; {lost_steps:,} "
            f"step{'' if lost_steps == 1 else 's'} since the last checkpoint "
            f"{'was' if lost_steps == 1 else 'were'} lost")
    if dropped_changes:
        text += (f" ({dropped_changes} live change{'' if dropped_changes == 1 else 's'} after "
                 "it undone)")
    return text


def notes(store: RunStore, run_id: int) -> list[str]:
    """The continue notes of a run, oldest first (`run_events` of kind `continue`)."""
    events = store.events(run_id)
    return [str(detail) for detail in events.loc[events["kind"] == EVENT, "detail"]]


def checkpoint_failures(store: RunStore, run_id: int) -> list[str]:
    """Why checkpoints of the run could not be written, oldest first (`checkpoint_failed` run
    events, one per distinct cause, written by the run process)."""
    events = store.events(run_id)
    return [str(detail) for detail in events.loc[events["kind"] == FAILED_EVENT, "detail"]]


def continue_run(store: RunStore, run_id: int, caller: Caller = LOCAL,
                 dispatch: bool = True) -> Continued:
    """Requeue an ended run to continue from its last checkpoint (see the module docstring).

    Args:
        store: the run store.
        run_id: the run.
        caller: who asks (`LOCAL` for the CLI and tests); must own the run.
        dispatch: start it at once when the pool has room (`pool.dispatch`); False leaves it
            queued for the next dispatch.

    Returns:
        What was done (`Continued`).

    Raises:
        KeyError: no such run.
        NotOwner: `caller` does not own the run.
        ValueError: the run cannot be continued (`refusal`), or it changed status meanwhile.
    """
    pool.check_processes(store)  # a run whose process died reads interrupted from here on
    run = ownership.authorize(store, run_id, caller, "continue")
    why = refusal(store, run)
    if why:
        raise ValueError(why)
    from_step = checkpoint_step(store, run) or 0
    lost = max(0, int(run["step"]) - from_step)
    place = checkpoints.of_run(store, run_id)
    place.write_request({"from_step": from_step, "requested": time.time()})
    try:
        with store.immediate() as con:
            dropped = con.execute(
                "SELECT COUNT(*) FROM hyper_changes WHERE run_id = ? AND step > ? AND "
                "source != 'init'", (run_id, from_step)).fetchone()[0]
            text = note(from_step, lost, dropped)
            changed = con.execute(
                "UPDATE runs SET status = ?, message = ?, updated = ?, step = ?, pid = NULL, "
                "pid_start = NULL, heartbeat = NULL, worker = '', taken_at = NULL "
                "WHERE id = ? AND status = ?",
                (QUEUED, text, time.time(), from_step, run_id, run["status"])).rowcount
            if changed != 1:
                raise ValueError(f"continue of run #{run_id} refused: its status changed "
                                 "meanwhile; look again")
            for table in ROW_TYPES:  # the starting values (`init`, step 1) always stay
                if table in SWEEP_TABLES:
                    continue  # their `step` counts a side sweep's steps, not the run's
                keep = " AND source != 'init'" if table == "hyper_changes" else ""
                con.execute(f"DELETE FROM {table} WHERE run_id = ? AND step > ?{keep}",
                            (run_id, from_step))
            con.execute("UPDATE commands SET status = 'refused', message = ? WHERE run_id = ? "
                        "AND status = 'pending'",
                        (f"the run ended before it read this command; {text}", run_id))
    except BaseException:
        place.drop_request()
        raise
    ownership.record(store, run_id, EVENT, caller, text)
    speed = store.last_payload(run_id, "set_speed")
    if speed is not None and speed.get("steps_per_second") is not None:
        store.send_command(run_id, "set_speed", {"steps_per_second": speed["steps_per_second"]})
    if dispatch:
        pool.dispatch(store)
    return Continued(run_id, from_step, lost, int(dropped), text)
