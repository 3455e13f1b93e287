"""Checkpoints of a run inside its run process: capture every few seconds, restore on Continue.

A checkpoint holds everything the next steps of the run depend on, so that a run continued from
its checkpoint at step k ends equal to the same run never interrupted
(tests/test_checkpoints.py):

* the value of every variable a step can change (`engine.prepared._state`): the model's weights,
  and the optimizer's (and a wrapper's inner optimizer's) slots, `iterations` and
  hyperparameter variables, as NumPy arrays of their own dtype and shape;
* the hyperparameter values as numbers (`hyper_values()`) and the learning-rate schedule and
  `decay` (`Engine.schedule_values`, `Engine.decay`): restoring replays them through
  `_set_hyper` / `Engine.set_schedule` first, because part of that state is Python (a fused
  optimizer's momentum regime, the schedule's class) that a variable assign cannot bring back
  and that the compiled step bakes in (a replay that changes it retraces, as the live change
  did);
* the data position: the state of the run's batch order (`engine.train_step.BatchOrder`: the
  Mersenne Twister state of its `RandomState`, and the indices of the current epoch not yet
  used). It is the only randomness after the model is built: initialisers are seeded, the
  models have no dropout, the split and the label noise use fixed seeds (`engine.data`);
* the run loop's state: the step, the running mean of train losses since the last recorded
  step (`LossMeter`) and the last recorded learning rate.

The format is `runs.store.checkpoint_files` (NumPy `.npz`; why not `tf.train.Checkpoint` is
said there); where a checkpoint is kept (files beside a SQLite store, a row of a PostgreSQL
store) is `runs.store.checkpoints`. `Checkpointer` writes one about every
`checkpoint_files.every_s()` seconds from the run loop's `after_step` hook, right after a
drained flush: every record up to the checkpoint's step is in the store when the checkpoint
exists. A write that fails (full or read-only disk) keeps the previous checkpoint, is logged
and recorded as a `checkpoint_failed` run event once per distinct reason, and the run trains
on. A run that follows hyper-gradients is not checkpointed: its forward-mode tangents and
reverse-mode windows are not part of this state (Continue refuses it, naming why).

Cost, the default run (digits MLP, ~85k parameters, Adam, float32; 2-core machine shared with
other test runs, load 27-51): 1.04 MB per checkpoint; capture (variables to NumPy) 2-9 ms,
write + fsync + rename 6-55 ms, a whole `save` (with the drained flush) 10-80 ms, min-median
over 30 saves. Every 5 s that is 0.2-1.6 % of the run's time; most of it is the `fsync`, which
makes the checkpoint survive a machine crash, not only a killed process
(tests/test_checkpoints.py `test_checkpoint_cost_and_a_full_disk` holds the median under 0.25 s).
"""

from __future__ import annotations

import json
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.prepared import _state as engine_variables
from optimizers.base import trace_signature
from runs.store import checkpoint_files as files
from runs.store import checkpoints
from runs.store.checkpoint_files import FAILED_EVENT, CheckpointError

if TYPE_CHECKING:
    from runs.process.run_loop import RunLoop

_ORDER_KEYS = "order_keys"  # uint32 [624]: the Mersenne Twister key of the batch order's RNG
_ORDER_BUFFER = "order_buffer"  # int32 [<= n_train]: indices of the epoch not yet batched


def _variable_key(index: int) -> str:
    return f"variable_{index:04d}"


def _log(message: str) -> None:
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:  # the log sits in the data directory, which may be the full disk
        pass


def _plain(value: Any) -> Any:
    """`value` after a JSON round trip (what a checkpoint's `meta` holds)."""
    return json.loads(json.dumps(value))


def capture(run: RunLoop, run_created: float) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The checkpoint of `run` now (between two steps): (arrays, meta) for
    `checkpoints.of_run(...).write`.

    Args:
        run: the run loop; `run.step` steps are done.
        run_created: the run's `created` time (Unix s): ties the checkpoint to this run row.
    """
    engine = run.engine
    variables = engine_variables(engine)
    arrays = {_variable_key(i): v.numpy() for i, v in enumerate(variables)}
    kind, keys, position, has_gauss, cached = engine.order.rng.get_state()
    arrays[_ORDER_KEYS] = np.asarray(keys, np.uint32)
    arrays[_ORDER_BUFFER] = np.asarray(engine.order.buffer, np.int32)
    hypers = {name: value for name, value in engine.optimizer.hyper_values().items()
              if isinstance(value, (int, float)) and not isinstance(value, bool)}
    meta = {
        "format": files.FORMAT,
        "run_id": run.run_id,
        "run_created": run_created,
        "step": run.step,
        "iterations": int(engine.optimizer.iterations.numpy()),
        "config": engine.config.to_json_dict(),
        "variables": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name}
                      for v in variables],
        "hypers": hypers,
        "schedule": engine.schedule_values(),
        "decay": engine.decay,
        "order": {"kind": kind, "position": int(position), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached)},
        "meter": {"total": run.meter.total, "count": run.meter.count},
        "last_lr": run.last_lr,
        "traces": engine.traces,
        "written": time.time(),
    }
    return arrays, meta


def restore(run: RunLoop, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Put `run` (a fresh engine and loop, before its first step) in the state of a checkpoint.

    Order matters: the schedule and the hyperparameters are replayed first (they may rebuild the
    compiled step, and a schedule change may replace the `learning_rate` object), then every
    variable is assigned its saved value bit for bit, then the batch order and the loop state.

    Raises:
        CheckpointError: the checkpoint belongs to another config, or its variables do not
            match the engine's (count, shape or dtype; the message names the variable).
    """
    engine = run.engine
    if meta["config"] != _plain(engine.config.to_json_dict()):
        raise CheckpointError(f"the checkpoint of run {run.run_id} was written for another "
                              "config; it cannot be restored into this run")
    if meta["schedule"] != _plain(engine.schedule_values()) or meta["decay"] != engine.decay:
        engine.set_schedule(meta["schedule"], meta["decay"], None)
    optimizer = engine.optimizer
    signature, current = trace_signature(optimizer), optimizer.hyper_values()
    for name, value in meta["hypers"].items():
        if current.get(name) != value:
            optimizer._set_hyper(name, value)  # Python state (e.g. a momentum regime) follows
    if trace_signature(optimizer) != signature and hasattr(engine, "retrace"):
        engine.retrace()  # as the live change that led here did
    variables = engine_variables(engine)
    saved = meta["variables"]
    if len(saved) != len(variables):
        raise CheckpointError(f"the checkpoint of run {run.run_id} holds {len(saved)} "
                              f"variables, the run's engine has {len(variables)}")
    for index, (variable, info) in enumerate(zip(variables, saved)):
        value = arrays[_variable_key(index)]
        if list(value.shape) != list(variable.shape) or value.dtype != variable.dtype.as_numpy_dtype:
            raise CheckpointError(
                f"variable {index} of the checkpoint of run {run.run_id} ({info['name']}, "
                f"{value.dtype} {list(value.shape)}) does not fit the engine's {variable.name} "
                f"({variable.dtype.name} {list(variable.shape)})")
    for index, variable in enumerate(variables):
        variable.assign(arrays[_variable_key(index)])
    order = meta["order"]
    engine.order.rng.set_state((order["kind"], arrays[_ORDER_KEYS], order["position"],
                                order["has_gauss"], order["cached_gaussian"]))
    engine.order.buffer = np.array(arrays[_ORDER_BUFFER], np.int32)
    run.step = int(meta["step"])
    run.meter.total, run.meter.count = float(meta["meter"]["total"]), int(meta["meter"]["count"])
    run.last_lr = meta["last_lr"]


class Checkpointer:
    """Writes `run`'s checkpoint about every `every_s` seconds (see the module docstring).

    Args:
        run: the run loop (its store says where the checkpoint goes, `checkpoints.of_run`).
        every_s: seconds between two checkpoints.
        run_created: the run's `created` time (stored in each checkpoint).

    Attributes:
        saved_step: the step of the last checkpoint written by this process (None: none yet).
        last_cost_s: seconds the last write took (flush drain excluded); bytes: its size.
        failure: the reason the last write failed ("" after a success).
    """

    def __init__(self, run: RunLoop, every_s: float, run_created: float):
        self.run, self.every_s, self.run_created = run, every_s, run_created
        self.place = checkpoints.of_run(run.store, run.run_id)
        self.last = time.monotonic()
        self.saved_step: int | None = None
        self.last_cost_s, self.bytes = 0.0, 0
        self.failure = self.cause = ""

    def maybe_save(self) -> None:
        """`save` when `every_s` seconds passed since the last one (the run loop's hook)."""
        if time.monotonic() - self.last >= self.every_s:
            self.save()

    def save(self) -> bool:
        """Drain the record writer, then write the checkpoint of the current step; True when
        written. A failed write is reported (`failure`, the run's log, a `checkpoint_failed`
        run event once per reason) and the previous checkpoint stays.

        Raises:
            runs.store.files.StoreUnavailable: the drained flush could not write the store (the
                run fails as it would at its next flush).
        """
        run = self.run
        self.last = time.monotonic()
        run.flush(wait=True)  # every record up to this step is committed before the checkpoint
        started = time.perf_counter()
        arrays, meta = capture(run, self.run_created)
        try:
            size = self.place.write(arrays, meta)
        except OSError as error:
            self._report(str(error), f"the checkpoint at step {run.step} was not written "
                         f"({error}); " + (f"the checkpoint at step {self.saved_step} is kept"
                                           if self.saved_step is not None
                                           else "the previous checkpoint is kept"))
            return False
        self.last_cost_s, self.bytes = time.perf_counter() - started, size
        self.saved_step = run.step
        if self.failure:
            _log(f"run {run.run_id}: checkpoints are written again (step {run.step})")
            self.failure = self.cause = ""
        return True

    def _report(self, cause: str, reason: str) -> None:
        repeated = cause == self.cause
        self.failure, self.cause = reason, cause
        if repeated:  # the same cause every few seconds: logged and recorded once
            return
        _log(f"run {self.run.run_id}: {reason}")
        try:
            self.run.store.add_event(self.run.run_id, FAILED_EVENT, "", reason[:500])
        except Exception:  # noqa: BLE001 - the store may sit on the same full disk
            pass


_ATTACHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # RunLoop -> Checkpointer


def attach(run: RunLoop) -> Checkpointer | None:
    """The hook a run process calls once, after building the run and before its first step:

    1. when the run was continued (`runs.service.continuing` left a continue request), restore
       its checkpoint (`restore`), drop the start rows the loop buffered (the initial values
       and the step-0 validation are in the store from the run's first life) and remove the
       request;
    2. unless the run follows hyper-gradients or checkpoints are off, install a `Checkpointer`
       as the loop's `after_step` hook.

    Returns:
        The checkpointer, or None.

    Raises:
        CheckpointError: a continue request whose checkpoint is missing or does not fit the
            run (the run then fails with this message; its records are untouched).
    """
    store, run_id = run.store, run.run_id
    created = float(store.run(run_id)["created"])
    place = checkpoints.of_run(store, run_id)
    request = place.read_request()
    if request is not None:
        if run.hyper is not None:
            raise CheckpointError(f"run {run_id} follows hyper-gradients, whose state is not "
                                  "checkpointed: it cannot be continued")
        meta, arrays = place.read()
        if meta.get("run_created") != created or meta["step"] != request.get("from_step"):
            raise CheckpointError(f"the checkpoint of run {run_id} (step {meta['step']}) is not "
                                  f"the one Continue chose (step {request.get('from_step')})")
        restore(run, meta, arrays)
        run.buffers = {name: [] for name in run.buffers}
        place.drop_request()
        _log(f"run {run_id} continues from its checkpoint at step {run.step}")
        if run.after_first_step is not None:  # its first step was long ago
            run.after_first_step()
    try:
        every = files.every_s()
    except ValueError as error:
        _log(f"run {run_id}: {error}; checkpoints every {files.DEFAULT_EVERY_S:g} s")
        every = files.DEFAULT_EVERY_S
    if run.hyper is not None or every is None:
        return None
    checkpointer = Checkpointer(run, every, created)
    run.after_step = checkpointer.maybe_save
    _ATTACHED[run] = checkpointer
    return checkpointer


def at_end(run: RunLoop, status: str) -> None:
    """The hook a run process calls when the run ended with `status` (records flushed): a
    `stopped` run writes a last checkpoint (Continue resumes exactly where it stopped); a
    `finished` or `diverged` run's checkpoints are removed (nothing to continue)."""
    checkpointer = _ATTACHED.pop(run, None)
    if status == "stopped" and checkpointer is not None:
        checkpointer.save()
    elif status in ("finished", "diverged"):
        checkpoints.of_run(run.store, run.run_id).discard()
