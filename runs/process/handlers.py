"""The run process's command handlers: `HANDLERS = {kind: handler(run, command_id, payload)}`.

The run loop (`runs.process.run_loop.RunLoop`) parses each pending row with `runs.protocol.parse`
and calls the handler of its kind with the parsed payload; a handler either acts on the run (the
command is then `done` at the next step, the first step that sees its effect) or raises
`Refused` for what only the run knows (e.g. `learning_rate` while a schedule replaces it, a
retrace while the run follows hyper-gradients) or what the library itself refuses. The value
of a hyperparameter was checked against its spec where the command entered the service
(`runs.service.control`); here only the optimizer's own `_set_hyper` guard applies.

* `set_hyper` of a hyperparameter: an assign to its `tf.Variable`, no retrace; except a change
  of the optimizer's `trace_signature()` (SGD/RMSprop momentum crossing 0 switches the fused
  path's regime, Python state like `self.t_cur = 5`): the step is rebuilt between two steps and
  a `step traces` row records the retrace.
* `set_hyper` of `lr_schedule` / `decay`: new numbers of the same schedule class and structure
  are variable assigns that take effect at the next step with no retrace (`lr_schedule.<name>`
  rows); another class, constant <-> schedule, or a new `decay` (a plain attribute, not
  `_set_hyper`) rebuilds the step function between two steps, which costs one retrace, recorded
  as a `step traces` row (old -> new count; the source says which change).
* `set_speed`: the run loop sleeps between steps so that it trains at most this many steps per
  second.
* `lr_range`: a learning-rate range test of a deep copy of the run (`engine.lr_range_sweep`),
  in this process, where the weights are; the run waits meanwhile and does not move. Its
  `lr_range` rows are flushed as the sweep goes (progress for the page).

Runs in the run process only (TensorFlow); never imports Streamlit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.record_rows import HyperChangeRow
from optimizers.hyperparams import InvalidHyperparameter
from runs.protocol import (SCHEDULE_NAMES, SLICE_HORIZON, SLICE_POINTS, Autotune,
                           CheckHypergradients, LrRange, NoPayload, Refused, ResponseSlice,
                           SetHyper, SetSpeed)

if TYPE_CHECKING:
    from runs.process.run_loop import Handler, RunLoop

TRACES_ROW = "step traces"  # hyper_changes row of a change that recompiled the step


def _message(error: BaseException) -> str:
    return str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)


def _set_hyper(run: RunLoop, command_id: int, payload: SetHyper) -> None:
    from optimizers.base import trace_signature  # TensorFlow: this is the run process

    if payload.name in SCHEDULE_NAMES:
        _set_schedule(run, payload)
        return
    opt = run.engine.optimizer
    if payload.name == "learning_rate" and getattr(run.engine, "live_schedule", None) is not None:
        raise Refused("set_hyper learning_rate refused: this run's learning rate is a "
                      f"{run.engine.live_schedule.class_name} schedule; change its parameters "
                      "or pick constant (set_schedule)")
    try:
        old = opt.hyper_values()[payload.name]
        signature = trace_signature(opt)
        opt._set_hyper(payload.name, payload.value)  # the library's own guard
    except (InvalidHyperparameter, KeyError) as error:
        raise Refused(_message(error)) from None
    new = opt.hyper_values()[payload.name]
    step = run.step + 1
    run.buffers["hyper_changes"].append(
        HyperChangeRow(step, payload.name, old, new, payload.source))
    # A change the compiled step cannot see through a tf.Variable (e.g. SGD/RMSprop momentum
    # crossing 0 switches the fused path's Python-chosen regime): rebuild the step between
    # two steps and count the retrace. A hyper-gradient run steps through the pure rule (by
    # value), which needs none.
    if trace_signature(opt) != signature and run.hyper is None and hasattr(run.engine, "retrace"):
        traces = run.engine.traces
        run.engine.retrace()
        run.buffers["hyper_changes"].append(HyperChangeRow(
            step, TRACES_ROW, traces, run.engine.traces,
            f"{payload.source}: {payload.name} regime (retrace)"[:64]))
    run.flush(wait=True)  # the row is readable once the command reads `done`
    run.save_optimizer()


def _set_schedule(run: RunLoop, payload: SetHyper) -> None:
    """`set_hyper` of `lr_schedule` or `decay` (see the module docstring); the value was
    checked by `runs.protocol.parse`."""
    from engine import recording  # TensorFlow: this is the run process

    engine = run.engine
    if not hasattr(engine, "set_schedule"):
        raise Refused(f"set_hyper {payload.name} refused: this engine has no live schedule")
    schedule, decay = engine.schedule_values(), engine.decay
    if payload.name == "lr_schedule":  # checked by `runs.protocol.parse`
        schedule = payload.value
        if schedule is not None and schedule.get("start_step") == "now":
            # "from now": the schedule's clock starts at the iteration the next step uses
            schedule = {**schedule, "start_step": run.step}
    else:
        decay = payload.value
    live = engine.live_schedule
    assign = decay == engine.decay and (
        (schedule is None and live is None)
        or (schedule is not None and live is not None and live.same_structure(schedule)))
    if not assign and run.hyper is not None:
        raise Refused("set_schedule refused: this change rebuilds the step (a retrace) and the "
                      "run follows hyper-gradients, whose tangents hold the old schedule; change "
                      "numbers of the same schedule only, or start a new run")
    before = recording.schedule_parameter_values(engine.schedule_values())
    traces = engine.traces
    try:
        kind, changes = engine.set_schedule(schedule, decay, None)
    except (InvalidHyperparameter, ValueError) as error:
        raise Refused(_message(error)) from None
    step, source = run.step + 1, payload.source
    after = recording.schedule_parameter_values(engine.schedule_values())
    rows = [HyperChangeRow(step, name, before.get(name), value, source)
            for name, value in after.items() if before.get(name) != value]
    if "decay" in changes:
        old_decay, new_decay = changes["decay"]
        rows.append(HyperChangeRow(step, "decay", old_decay, new_decay, source))
    if kind == "retrace":
        old, new = changes.get("lr_schedule", ("", ""))
        what = f"{old} -> {new}" if old != new else f"decay {engine.decay:g}"
        rows.append(HyperChangeRow(step, TRACES_ROW, traces, engine.traces,
                                   f"{source}: {what} (retrace)"[:64]))
    run.buffers["hyper_changes"] += rows
    run.flush(wait=True)  # the rows (and the new trace count) are readable once `done`
    run.save_optimizer()


def _hyper_stepper(run: RunLoop, kind: str):
    if run.hyper is None:
        raise Refused(f"{kind} refused: this run does not follow hyper-gradients "
                      "(config.hypergradients is empty)")
    return run.hyper


def _autotune(run: RunLoop, command_id: int, payload: Autotune) -> None:
    hyper = _hyper_stepper(run, "autotune")
    try:
        hyper.set_autotune(payload.name, payload.hyper_learning_rate)
    except (KeyError, ValueError) as error:
        raise Refused(_message(error)) from None
    run.save_meta()


def _response_slice(run: RunLoop, command_id: int, payload: ResponseSlice) -> None:
    hyper = _hyper_stepper(run, "response_slice")
    try:
        rows = hyper.response_slice(
            command_id, run.step, payload.name,
            horizon=SLICE_HORIZON if payload.horizon is None else payload.horizon,
            points=SLICE_POINTS if payload.points is None else payload.points)
    except (KeyError, ValueError, InvalidHyperparameter) as error:
        raise Refused(_message(error)) from None
    run.buffers["response_slices"] += rows
    run.flush(wait=True)  # the rows are readable once the command reads `done`


def _check_hypergradients(run: RunLoop, command_id: int, payload: CheckHypergradients) -> None:
    """The correctness check on a float64 copy of this run (`hypergrad.run_check`); the run
    waits for it (seconds) and does not move. The result goes to `runs.correctness_check`."""
    from hypergrad.run_check import as_record, check_run

    try:
        frame = check_run(run.engine, payload.horizon)
    except (ValueError, KeyError, TypeError) as error:
        raise Refused(f"check_hypergradients refused: {_message(error)}") from None
    run.store.update_run(run.run_id, correctness_check=as_record(frame))


def _pause(run: RunLoop, command_id: int, payload: NoPayload) -> None:
    run.paused = True
    run.single_steps = 0
    run.flush(wait=True)
    run.store.set_status(run.run_id, "paused", f"paused before step {run.step + 1}")


def _resume(run: RunLoop, command_id: int, payload: NoPayload) -> None:
    if run.paused:
        run.paused = False
        run.single_steps = 0
        run.store.set_status(run.run_id, "running")


def _stop(run: RunLoop, command_id: int, payload: NoPayload) -> None:
    run.stop_requested = True
    run.stop_message = f"stopped by the user after step {run.step}"


def _step(run: RunLoop, command_id: int, payload: NoPayload) -> None:
    if not run.paused:
        raise Refused("step refused: the run is not paused (Pause first; Step trains exactly "
                      "one step of a paused run)")
    run.single_steps += 1


def _set_speed(run: RunLoop, command_id: int, payload: SetSpeed) -> None:
    run.steps_per_second = payload.steps_per_second


def _lr_range(run: RunLoop, command_id: int, payload: LrRange) -> None:
    from engine import lr_range, lr_range_sweep  # TensorFlow: this is the run process

    engine = run.engine
    if not hasattr(engine, "model"):
        raise Refused("lr_range refused: this engine has no model to copy")
    try:
        state = (lr_range_sweep.copy_of_engine(engine) if payload.start == "current"
                 else lr_range_sweep.fresh_state(engine.config, engine.device))
    except ValueError as error:
        raise Refused(_message(error)) from None

    def emit(rows: list) -> None:
        run.buffers["lr_range"] += rows
        run.flush()

    lr_range_sweep.sweep(*lr_range_sweep.state_functions(state),
                         lr_range.rates(float(payload.lr_min), float(payload.lr_max),
                                        payload.steps),
                         request_id=command_id, emit=emit)
    run.flush(wait=True)  # every row is readable once the command reads `done`


# {command kind: handler}; `runs.protocol.PAYLOADS` declares the same kinds (tested)
HANDLERS: dict[str, Handler] = {
    "set_hyper": _set_hyper,
    "autotune": _autotune,
    "response_slice": _response_slice,
    "pause": _pause,
    "resume": _resume,
    "stop": _stop,
    "step": _step,
    "set_speed": _set_speed,
    "check_hypergradients": _check_hypergradients,
    "lr_range": _lr_range,
}
