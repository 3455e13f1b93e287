"""Starting and steering runs: what the pages and the CLI call, and the one validation of every
command before it is queued. No TensorFlow: the optimizer registry gives the specs without
building an optimizer (tests/test_tf_free_server.py).

A run is started with `start_run` in a run host: a warm TensorFlow process that trains many runs
side by side (`runs.process.run_host`, kept by the server with `keep_warm`), else in a cold
`python -m runs.process.worker` of its own (the pool and the launch are in `runs.service.pool`).
Everything else goes through the run store: `set_hyper`,
`pause`, `resume`, `step`, `set_speed`, `stop`, `autotune`, `response_slice` queue commands
(payloads of `runs.protocol`) the process polls about every 0.1 s; `runs.service.waiting`
polls the store for their outcome. `pause`, `resume`, `step`, `set_speed` and `stop` are
idempotent while pending: a repeat of a command still pending returns its id instead of
queueing a twin (`send_command_once`).

Every command, and `rename`, `delete`, `take_control`, first marks runs whose process is gone
(`pool.check_processes`) and passes the one ownership check `runs.service.ownership.authorize`
with the caller (`Caller`; `LOCAL` by default, for the CLI and tests; the pages always pass
their session's caller). A refusal raises `NotOwner`.
"""

from __future__ import annotations

import signal
from typing import Any

import pydantic

from optimizers import registry
from runs import protocol
from runs.protocol import ACTIVE_STATUSES, LIVE_STATUSES, QUEUED
from runs.service import executor, ownership, pool
from runs.service import challenge_guard
from runs.service.ownership import LOCAL, Caller, NotOwner
from runs.service.warm_pool import keep_warm
from runs.store import checkpoints
from runs.store.admission import MEMORY_BUDGET_ENV, estimate_mb, memory_budget_mb
from runs.store.processes import same_process_alive
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

# Bounds of the expensive request (a response slice trains `points` copies for `horizon`
# steps inside the run process, which does not train meanwhile).
MAX_PENDING_SLICES_PER_RUN = 2
MAX_PENDING_SLICES_PER_SESSION = 3
MAX_SLICE_HORIZON = 200
SLICE_POINTS = (3, 21)


def start_run(config: RunConfig, store: RunStore, name: str = "",
              on_tab_close: str = "finish", caller: Caller = LOCAL,
              steps_per_second: float | None = None) -> int:
    """Create the run in the store and start it as soon as the pool has a free place.

    The run is stored `queued`, owned by `caller` (no owner for `LOCAL`); `pool.dispatch` then
    starts it at once when fewer than `pool.pool_size()` runs are active and its estimated memory
    fits the budget, otherwise it waits for a run to end (see `RunStore.queue_positions`).
    A page's caller (not `LOCAL`: the pages live in the long-lived server) also makes this
    process keep run hosts (`keep_warm`), so the next runs start without a TensorFlow import;
    the CLI and tests call `keep_warm` themselves when they want them.

    Args:
        on_tab_close: `finish` or `stop` (see `tab_close_policy`); the worker only acts on
            it when a page touches the run's `viewer_heartbeat`.
        caller: the session starting the run (it becomes the run's owner).
        steps_per_second: the pace the run starts at (a `set_speed` queued with it, taken at
            its first command poll, before its first steps are done); None = full speed.

    Returns:
        The run id.

    Raises:
        ValueError: `on_tab_close`, the pool size, the executor (`runs.service.executor`) or
            the memory budget setting is invalid, the run's estimated memory (MB) alone
            exceeds the budget, or `steps_per_second` is
            outside [`protocol.MIN_SPEED`, `protocol.MAX_SPEED`] (nothing is stored then).
    """
    speed = _speed_payload(steps_per_second)
    pool.reap()
    if on_tab_close not in pool.TAB_CLOSE_POLICIES:
        raise ValueError(f"on_tab_close={on_tab_close!r} refused: must be one of "
                         f"{', '.join(pool.TAB_CLOSE_POLICIES)}")
    size = pool.pool_size()
    executor.settings()  # a bad executor setting is refused before the run is stored
    budget, need = memory_budget_mb(), estimate_mb(config.to_json_dict())
    if budget is not None and need > budget:
        raise ValueError(f"run refused: it needs ~{need:.0f} MB (hyper-gradients "
                         f"{len(config.hypergradients)}, reverse_horizon {config.reverse_horizon}"
                         f"), more than the whole memory budget {budget:.0f} MB "
                         f"({MEMORY_BUDGET_ENV}); follow fewer hyper-gradients or a shorter T")
    run_id = store.create_run(config.to_json_dict(), name=name, status="queued",
                              owner=None if caller.local else caller.owner)
    store.update_run(run_id, on_tab_close=on_tab_close)
    if steps_per_second is not None:  # pending before the process exists: its first poll
        store.send_command_once(run_id, "set_speed", speed)
    pool.dispatch(store, size)
    if not caller.local:
        keep_warm(store)
    return run_id


def _speed_payload(steps_per_second: float | None) -> dict[str, Any]:
    """The `set_speed` payload of this pace, checked by `protocol.SetSpeed`.

    Raises:
        ValueError: outside [`protocol.MIN_SPEED`, `protocol.MAX_SPEED`] (names the range).
    """
    payload = {"steps_per_second": None if steps_per_second is None else float(steps_per_second)}
    try:
        protocol.SetSpeed.model_validate(payload)
    except pydantic.ValidationError as error:
        raise ValueError(f"steps_per_second={steps_per_second!r} refused: must be in "
                         f"[{protocol.MIN_SPEED:g}, {protocol.MAX_SPEED:g}] steps per second, "
                         "or None for full speed") from error
    return payload


def _authorized(store: RunStore, run_id: int, caller: Caller, action: str) -> dict[str, Any]:
    """The run, read after runs whose process is gone were marked interrupted, when `caller`
    may do `action` to it (`ownership.authorize`)."""
    pool.check_processes(store)
    return ownership.authorize(store, run_id, caller, action)


def _active_run(store: RunStore, run_id: int, caller: Caller = LOCAL,
                action: str = "pause") -> dict[str, Any]:
    """The run when `caller` may do `action` (`ownership.authorize`) and it is active."""
    run = _authorized(store, run_id, caller, action)
    if run["status"] not in ACTIVE_STATUSES:
        raise ValueError(
            f"run_id={run_id} refused: the run is {run['status']}; commands need a run that is "
            f"{', '.join(ACTIVE_STATUSES)}"
        )
    return run


def set_hyper(store: RunStore, run_id: int, name: str, value: Any, source: str = "user",
              caller: Caller = LOCAL) -> int:
    """Queue a live hyperparameter change; returns the command id (see
    `runs.service.waiting.wait_for_command`).

    The one check of a hyperparameter's value against its spec: the run process trusts the
    queued payload (only the optimizer's own `_set_hyper` guard applies there). A run setting
    (`lr_schedule`, `decay`) is checked by `protocol.checked_run_setting`, the check
    `protocol.parse` also applies to every row the run process reads.

    Raises:
        NotOwner: `caller` does not own the run; `challenge_guard.FixedByChallenge` (a
            NotOwner): the run's class challenge fixes `name`.
        InvalidHyperparameter: `value` is refused by the optimizer's spec.
        KeyError: the run's optimizer has no hyperparameter `name`.
        ValueError: the run is not active; for `name` "lr_schedule" (`value` a serialized
            schedule or None = constant) a schedule refused by `optimizers.schedule_specs`
            (ScheduleError), for "decay" a value outside the settings table's range
            (`protocol.checked_run_setting`). Both are run settings the run process changes
            between two steps (`runs.process.handlers`).
    """
    run = _active_run(store, run_id, caller, "set_hyper")
    challenge_guard.check_change(store, run_id, name, caller)  # a class challenge's fixed ones
    config = run["config"]
    if name in protocol.SCHEDULE_NAMES:
        checked = protocol.checked_run_setting(name, value)
    else:
        specs = {s.name: s for s in registry.specs(config["optimizer"], config.get("options"))}
        if name not in specs:
            raise KeyError(
                f"hyperparameter {name!r} refused: {config['optimizer']} has {', '.join(specs)}"
            )
        checked = specs[name].validate(value)
    payload = protocol.SetHyper(name=name, value=checked, source=source)
    return store.send_command(run_id, "set_hyper", payload.model_dump())


def pause(store: RunStore, run_id: int, caller: Caller = LOCAL) -> int:
    """Queue `pause` (once: a `pause` still pending is not queued again); returns the command
    id (the pending one's on a repeat).

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not active.
    """
    _active_run(store, run_id, caller, "pause")
    return store.send_command_once(run_id, "pause")[0]


def resume(store: RunStore, run_id: int, caller: Caller = LOCAL) -> int:
    """Queue `resume` (once, as `pause`); returns the command id.

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not active.
    """
    _active_run(store, run_id, caller, "resume")
    return store.send_command_once(run_id, "resume")[0]


def step(store: RunStore, run_id: int, caller: Caller = LOCAL) -> int:
    """Queue `step`: a paused run trains exactly one more step and stays paused. At most one
    `step` is pending at a time (a repeat returns the pending one's id), so a double click
    cannot train two steps. Ownership as for `pause`.

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not paused.
    """
    run = _active_run(store, run_id, caller, "pause")
    if run["status"] != "paused":
        raise ValueError(f"step of run #{run_id} refused: the run is {run['status']}; Step "
                         "needs a paused run (Pause first)")
    return store.send_command_once(run_id, "step")[0]


def set_speed(store: RunStore, run_id: int, steps_per_second: float | None,
              caller: Caller = LOCAL) -> int:
    """Queue `set_speed`: train at most `steps_per_second` steps per second (in
    [`protocol.MIN_SPEED`, `protocol.MAX_SPEED`]), or at full speed (None). Ownership as for
    `pause`; an identical pending `set_speed` is not queued twice.

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not active, or the speed is out of range (names the range).
    """
    _active_run(store, run_id, caller, "pause")
    return store.send_command_once(run_id, "set_speed", _speed_payload(steps_per_second))[0]


def speed(store: RunStore, run_id: int) -> float | None:
    """The run's pace in steps per second from its last `set_speed` that was not refused (None
    = full speed, also when it never got one)."""
    payload = store.last_payload(run_id, "set_speed")
    value = None if payload is None else payload.get("steps_per_second")
    return None if value is None else float(value)


def stop(store: RunStore, run_id: int, caller: Caller = LOCAL) -> int | None:
    """Stop a run; returns the `stop` command id, or None when no process had to be asked.

    A queued run is cancelled (status `stopped`, no process was ever started). A run still
    `starting` (importing TensorFlow, building its model: several seconds) is marked `stopped`
    at once and its process is sent SIGTERM, so that a Stop right after Start is instant; the
    worker only marks a run running if it is still starting (`set_status(only_from=...)`).
    A stalled run (no heartbeat for more than `STALE_AFTER` s while its process lives, e.g.
    `kill -STOP`) cannot read a command: it is marked `stopped` and its process gets SIGKILL
    (a frozen process cannot run a SIGTERM handler; SQLite loses at most the batch in flight).
    A teacher's stop of another session's run is recorded (`run_events`).

    Raises:
        NotOwner: `caller` is neither the run's owner nor a teacher.
        ValueError: the run is neither queued nor active.
    """
    run = _authorized(store, run_id, caller, "stop")
    result = _stop(store, run)
    if ownership.via_teacher(run, caller):
        ownership.record(store, run_id, "teacher_stop", caller, f"status {run['status']}")
    return result


def _stop(store: RunStore, run: dict[str, Any]) -> int | None:
    run_id = run["id"]
    if run["status"] == QUEUED and store.set_status(
            run_id, "stopped", "cancelled while queued", only_from=(QUEUED,)):
        return None
    run = _active_run(store, run_id)  # authorized above; fresh status
    if run["status"] == "starting" and store.set_status(
            run_id, "stopped", "stopped before its first step", only_from=("starting",)):
        _signal(store, run, signal.SIGTERM)
        pool.reap()
        pool.dispatch(store)
        return None
    silent = store.stalled_for(run)
    if silent is not None and same_process_alive(run["pid"], run.get("pid_start")):
        shared = pool.shares_host(store, run)  # a frozen host with other runs is left alone
        fate = (f"its run {run['worker']} (pid {run['pid']}) holds other runs and was left"
                if shared else f"its process {run['pid']} was killed")
        if store.set_status(run_id, "stopped", f"stopped while stalled (no heartbeat for "
                            f"{silent:.0f} s): {fate}", only_from=ACTIVE_STATUSES):
            _signal(store, run, signal.SIGKILL)
            store.add_event(run_id, "stalled_stop", "", f"no heartbeat for {silent:.0f} s, "
                            + ("no signal" if shared else f"SIGKILL to pid {run['pid']}"))
            pool.reap()
            pool.dispatch(store)
            return None
    return store.send_command_once(run_id, "stop")[0]


def _signal(store: RunStore, run: dict[str, Any], signum: int) -> None:
    pool.signal_run(store, run, signum)  # a run host holding other runs is spared


def _followed(run: dict[str, Any], name: str) -> None:
    followed = run["config"].get("hypergradients") or []
    if name not in followed:
        raise KeyError(f"name={name!r} refused: run #{run['id']} follows "
                       f"{', '.join(followed) or 'no hyper-gradients'}")


def autotune(store: RunStore, run_id: int, name: str, hyper_learning_rate: float | None,
             caller: Caller = LOCAL) -> int:
    """Queue `autotune`: RTHO of the followed hyperparameter `name` on with this hyper learning
    rate, or off (`None`); returns the command id.

    Raises:
        NotOwner: `caller` does not own the run.
        KeyError: `name` is not followed by the run.
        ValueError: the run is not active, or the rate is not a positive finite number.
    """
    _followed(_active_run(store, run_id, caller, "autotune"), name)
    if hyper_learning_rate is not None:
        eta = float(hyper_learning_rate)
        if not (eta > 0 and eta < float("inf")):
            raise ValueError(f"hyper_learning_rate={hyper_learning_rate!r} refused: must be a "
                             "float in (0, inf)")
        hyper_learning_rate = eta
    return store.send_command(run_id, "autotune",
                              {"name": name, "hyper_learning_rate": hyper_learning_rate})


def response_slice(store: RunStore, run_id: int, name: str, horizon: int = 20,
                   points: int = 9, caller: Caller = LOCAL) -> int:
    """Queue `response_slice` (validation loss after `horizon` more steps vs `name`, around its
    current value); returns the command id, which is the rows' `request_id`.

    Bounded (each slice trains `points` copies for `horizon` steps while the run waits):
    `horizon` in [1, `MAX_SLICE_HORIZON`] steps, `points` in `SLICE_POINTS`, at most
    `MAX_PENDING_SLICES_PER_RUN` pending per run and `MAX_PENDING_SLICES_PER_SESSION` pending
    over all the caller's runs.

    Raises:
        NotOwner: `caller` does not own the run.
        KeyError: `name` is not followed by the run.
        ValueError: the run is not active, a bound is exceeded.
    """
    _followed(_active_run(store, run_id, caller, "response_slice"), name)
    horizon, points = int(horizon), int(points)
    if not 1 <= horizon <= MAX_SLICE_HORIZON:
        raise ValueError(f"horizon={horizon} refused: must be in [1, {MAX_SLICE_HORIZON}] steps")
    if not SLICE_POINTS[0] <= points <= SLICE_POINTS[1]:
        raise ValueError(f"points={points} refused: must be in [{SLICE_POINTS[0]}, "
                         f"{SLICE_POINTS[1]}]")
    of_run = store.pending_count("response_slice", run_id=run_id)
    of_owner = 0 if caller.local else store.pending_count("response_slice", owner=caller.owner)
    if of_run >= MAX_PENDING_SLICES_PER_RUN:
        raise ValueError(f"response_slice of run #{run_id} refused: {of_run} slices are "
                         f"already pending for this run (at most {MAX_PENDING_SLICES_PER_RUN}); "
                         "wait for them to finish")
    if of_owner >= MAX_PENDING_SLICES_PER_SESSION:
        raise ValueError(f"response_slice of run #{run_id} refused: this session has "
                         f"{of_owner} slices pending (at most {MAX_PENDING_SLICES_PER_SESSION}); "
                         "wait for them to finish")
    return store.send_command(run_id, "response_slice",
                              {"name": name, "horizon": horizon, "points": points})


# The horizon of a correctness check on a copy of a run (`hypergrad.run_check`, which holds the
# same range: this module stays TensorFlow-free).
CHECK_HORIZONS = (1, 20)


def check_hypergradients(store: RunStore, run_id: int, horizon: int = 5,
                         caller: Caller = LOCAL) -> int:
    """Queue `check_hypergradients`: forward = reverse = finite differences on a float64 copy
    of the run over its next `horizon` steps; the result lands in the run's
    `correctness_check`. Returns the command id.

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not active, `horizon` outside `CHECK_HORIZONS`, or a check of
            this run is already pending.
    """
    _active_run(store, run_id, caller, "check_hypergradients")
    low, high = CHECK_HORIZONS
    if isinstance(horizon, bool) or not isinstance(horizon, int) or not low <= horizon <= high:
        raise ValueError(f"horizon={horizon!r} refused: must be an integer in [{low}, {high}] "
                         "steps")
    if store.pending_count("check_hypergradients", run_id=run_id):
        raise ValueError(f"check_hypergradients of run #{run_id} refused: a check of this run "
                         "is already pending; wait for it")
    return store.send_command(run_id, "check_hypergradients", {"horizon": horizon})


def lr_range(store: RunStore, run_id: int, lr_min: float = protocol.lr_range.LR_MIN,
             lr_max: float = protocol.lr_range.LR_MAX, steps: int = protocol.lr_range.STEPS,
             start: str = "current", caller: Caller = LOCAL) -> int:
    """Queue `lr_range`: a learning-rate range test of a copy of the run (from its `current`
    state or its initial weights, `init`); returns the command id, which is the rows'
    `request_id` (`RunStore.lr_range`). One pending per run: the run waits while it sweeps.

    Raises:
        NotOwner: `caller` does not own the run.
        ValueError: the run is not active, a sweep `engine.lr_range.check` refuses, `start`
            is not `current` or `init`, or a range test of this run is already pending.
    """
    _active_run(store, run_id, caller, "lr_range")
    try:
        payload = protocol.LrRange(lr_min=lr_min, lr_max=lr_max, steps=steps, start=start)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{field}={first['input']!r} refused: {message}" if field
                         else message) from None
    if store.pending_count("lr_range", run_id=run_id):
        raise ValueError(f"lr_range of run #{run_id} refused: a range test is already pending "
                         "for this run; wait for it to finish")
    return store.send_command(run_id, "lr_range", payload.model_dump())


def rename(store: RunStore, run_id: int, name: str, caller: Caller = LOCAL) -> None:
    """Rename a run (owner or teacher; a teacher's rename is recorded).

    Raises:
        NotOwner: `caller` is neither the run's owner nor a teacher.
        KeyError: no such run.
        ValueError: `name` longer than `runs.store.run_store.MAX_NAME` characters.
    """
    run = _authorized(store, run_id, caller, "rename")
    store.rename_run(run_id, name)
    if ownership.via_teacher(run, caller):
        ownership.record(store, run_id, "teacher_rename", caller,
                         f"{run['name']!r} -> {str(name).strip()!r}")


def delete(store: RunStore, run_id: int, caller: Caller = LOCAL) -> None:
    """Delete a run and all its records (owner or teacher; a teacher's delete is recorded in
    `run_events`, which outlive the run).

    Raises:
        NotOwner: `caller` is neither the run's owner nor a teacher.
        KeyError: no such run.
        ValueError: the run is queued or active, or its process still lives (a stalled or
            ending run still writes rows).
    """
    run = _authorized(store, run_id, caller, "delete")
    if run["status"] in LIVE_STATUSES:
        raise ValueError(f"delete of run #{run_id} refused: the run is {run['status']}; stop "
                         "it first")
    if same_process_alive(run["pid"], run.get("pid_start")):
        raise ValueError(f"delete of run #{run_id} refused: its process {run['pid']} still "
                         "runs (it may still write records); try again in a few seconds")
    store.delete_run(run_id)
    checkpoints.of_run(store, run_id).discard()  # a deleted run cannot be continued
    if ownership.via_teacher(run, caller):
        ownership.record(store, run_id, "teacher_delete", caller,
                         f"{run['name']!r} ({run['status']})")


def take_control(store: RunStore, run_id: int, caller: Caller) -> str:
    """Make `caller` the owner of a run nobody answers for (see `runs.service.ownership`); the
    takeover is recorded. Returns why it was allowed ("already the owner" changes nothing).

    Raises:
        NotOwner: the run's owner session is still around, or another session took the run
            over at the same moment.
        KeyError: no such run.
    """
    run = _authorized(store, run_id, caller, "take_control")
    why = ownership.may_take_control(run, caller)
    if why == "already the owner" or caller.local:
        return why
    if not store.take_owner(run_id, caller.owner, run.get("owner")):
        raise NotOwner(f"take control of run #{run_id} refused: another session took it over "
                       "just now")
    ownership.record(store, run_id, "take_control", caller,
                     f"from {run.get('owner') or 'no owner'}: {why}")
    return why
