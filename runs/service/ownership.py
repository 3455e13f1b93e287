"""Who may do what to a run: the ONE check every command of the run service goes through
(`authorize`). No Streamlit, no TensorFlow.

The policy:

* Everyone may SEE every run (the runs list, curves, comparisons).
* Only the run's owner - the browser session that started it, identified by its `Caller.owner`
  id stored in `runs.owner` at `start_run` - may steer it (`set_hyper`, `pause`, `resume`,
  `stop`, `autotune`, `response_slice`, `continue` an ended run from its checkpoint) or
  `rename` / `delete` it.
* After a reload the same browser regains its runs by itself (its token cookie,
  `components.session_runs`); another browser cannot take a run over.
* `take_control` makes the caller the owner only of a run that nobody can answer for: a run
  with no owner (started from the CLI, or stored before owners were recorded), or - only when
  the fallback `OPTIMIZER_LAB_TAKEOVER_AFTER_S` is set, for browsers that refuse the cookie -
  a queued or active run whose owner session has been silent (no page heartbeat,
  `viewer_heartbeat`) for longer than that many seconds (150 = the tab-close margin is a fair
  value). The takeover is recorded (`run_events`). An open session's run is never taken over.
* A teacher (a session that entered `OPTIMIZER_LAB_TEACHER_SECRET`; off when unset) may also
  `stop`, `rename` and `delete` any run; each such action is recorded with the run.
* A local caller (`LOCAL`: the CLI, tests, anything running Python on the server, which could
  edit the store file anyway) passes every check.

A refusal raises `NotOwner` (a ValueError) naming the run, the action and the rule.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from typing import Any

from runs.protocol import LIVE_STATUSES
from runs.store.run_store import RunStore

STEER_ACTIONS = ("set_hyper", "pause", "resume", "stop", "autotune", "response_slice",
                 "check_hypergradients", "continue", "lr_range")
ACTIONS = STEER_ACTIONS + ("rename", "delete", "take_control")
TEACHER_ACTIONS = ("stop", "rename", "delete")
TEACHER_SECRET_ENV = "OPTIMIZER_LAB_TEACHER_SECRET"
# The fallback (off by default): seconds of owner silence after which a live run may be taken
# over; the suggested value is the run loop's tab-close margin
# `runs.process.run_loop.TAB_CLOSED_AFTER_S`.
TAKEOVER_ENV = "OPTIMIZER_LAB_TAKEOVER_AFTER_S"
SUGGESTED_TAKEOVER_AFTER_S = 150.0


class NotOwner(ValueError):
    """A command refused because the caller does not own the run (see the module policy)."""


@dataclass(frozen=True)
class Caller:
    """Who sends a command.

    Attributes:
        session: the browser's (or session's) secret token; only its hash (`owner`) is stored.
        teacher_secret: what the session entered as the teacher secret ("" = none).
        local: a process on the server itself (CLI, tests): passes every check.
    """

    session: str
    teacher_secret: str = ""
    local: bool = False

    @property
    def owner(self) -> str:
        """The owner id stored with the runs this caller starts: sha256 of the token, 32 hex
        (the store never holds the token itself, so reading the store does not let one act as
        another session)."""
        return hashlib.sha256(self.session.encode()).hexdigest()[:32]

    @property
    def is_teacher(self) -> bool:
        """True when `OPTIMIZER_LAB_TEACHER_SECRET` is set and this caller entered it."""
        return teacher_secret_matches(self.teacher_secret)


LOCAL = Caller("local", local=True)


def teacher_secret_matches(entered: str) -> bool:
    """Constant-time comparison with `OPTIMIZER_LAB_TEACHER_SECRET` (False when it is unset
    or empty: the teacher role is off by default)."""
    secret = os.environ.get(TEACHER_SECRET_ENV, "")
    return bool(secret) and bool(entered) and hmac.compare_digest(
        entered.encode(), secret.encode())


def takeover_after_s() -> float | None:
    """Seconds of owner silence after which another session may take a live run over
    (`OPTIMIZER_LAB_TAKEOVER_AFTER_S`), or None: owned runs are never taken over (default).

    Raises:
        ValueError: the variable is set but is not a number of seconds >= 30.
    """
    raw = os.environ.get(TAKEOVER_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not (30 <= seconds < float("inf")):
        raise ValueError(f"{TAKEOVER_ENV}={raw!r} refused: must be a number of seconds >= 30 "
                         f"(e.g. {SUGGESTED_TAKEOVER_AFTER_S:.0f}), or unset for never")
    return seconds


def owner_silent_for(run: dict[str, Any], now: float | None = None) -> float:
    """Seconds since the owner's session was last seen on this run (`viewer_heartbeat`, or the
    run's creation when never seen)."""
    now = time.time() if now is None else now
    return now - (run.get("viewer_heartbeat") or run["created"])


def may_take_control(run: dict[str, Any], caller: Caller, now: float | None = None) -> str:
    """Why `caller` may take the run over ("" when it may not; see the module policy)."""
    if caller.local:
        return "local caller"
    owner = run.get("owner")
    if owner == caller.owner:
        return "already the owner"
    if owner is None:
        return "the run had no owner"
    silent, after = owner_silent_for(run, now), takeover_after_s()
    if after is not None and run["status"] in LIVE_STATUSES and silent > after:
        return f"the owner session was silent for {silent:.0f} s"
    return ""


def authorize(store: RunStore, run_id: int, caller: Caller, action: str) -> dict[str, Any]:
    """The one ownership check: return the run when `caller` may do `action` to it.

    Args:
        store: the run store.
        run_id: the run.
        caller: who asks (`Caller`; `LOCAL` for the CLI and tests).
        action: one of `ACTIONS`.

    Returns:
        The run (`store.run`).

    Raises:
        KeyError: no such run.
        ValueError: an unknown `action`.
        NotOwner: the caller may not (message names the run, the action and the rule).
    """
    if action not in ACTIONS:
        raise ValueError(f"action={action!r} refused: must be one of {', '.join(ACTIONS)}")
    run = store.run(run_id)
    if caller.local:
        return run
    owner = run.get("owner")
    if action == "take_control":
        if may_take_control(run, caller):
            return run
        after = takeover_after_s()
        raise NotOwner(
            f"take control of run #{run_id} refused: it belongs to another browser session "
            f"(seen {owner_silent_for(run):.0f} s ago); only a run with no owner can be taken "
            "over" + ("" if after is None else f", or a queued or active one whose owner has "
                      f"been silent for more than {after:.0f} s ({TAKEOVER_ENV})"))
    if owner is not None and owner == caller.owner:
        return run
    if action in TEACHER_ACTIONS and caller.is_teacher:
        return run
    whose = "no browser session (started from the command line or before owners were " \
            "recorded): press Take control first" if owner is None else \
            "another browser session"
    raise NotOwner(f"{action} of run #{run_id} refused: the run belongs to {whose}; only the "
                   "session that started a run may steer, rename or delete it (everyone may "
                   "view it)")


def via_teacher(run: dict[str, Any], caller: Caller) -> bool:
    """True when an authorized action on `run` was allowed only by the teacher role (it is
    then recorded with the run, see `record`)."""
    return (not caller.local and run.get("owner") != caller.owner and caller.is_teacher)


def record(store: RunStore, run_id: int, kind: str, caller: Caller, detail: str = "") -> None:
    """Append a `run_events` row (`kind`, the caller's owner id as actor, `detail`)."""
    store.add_event(run_id, kind, "local" if caller.local else caller.owner, detail)
