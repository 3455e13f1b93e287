"""The loop of one run: train, record, poll commands, beat (see `runs.process.run_session`).

The loop is steppable: `RunLoop.advance()` does what is due now - a command poll, at most one
step with its records, a flush - and returns the run's end or None; `RunLoop.next_wake()` says
when it next has something to do (at once, at its pace, or at its next poll while paused).
`RunLoop.loop()` calls them for a run alone in its process (`runs.process.worker`); a run host
interleaves the `advance` of many runs in one thread (`runs.process.host_scheduler`), so a run
trains the same steps either way.

Per step (1-based `step`): one compiled train step; the loss joins a running mean; on
`recording.should_record(step)` steps (and the last) the mean train loss and the packed slot
statistics are buffered, on `recording.should_histogram(step)` steps the histograms;
`val_loss` / `val_accuracy` every `eval_every` steps, at the last step and at step 0 (before
training). Buffers hold the named rows of `engine.record_rows` and are flushed with ONE
`store.append` about every `FLUSH_EVERY_S` (which also refreshes the heartbeat), by a writer
thread. Commands are polled about every `POLL_EVERY_S` (`RunStore.pending`), parsed with
`runs.protocol.parse` and carried out by the handler of their kind (`handlers`, given to the
loop: `runs.process.handlers.HANDLERS` in a run process). While paused the process keeps polling
and beats at least every `HEARTBEAT_S`; a `step` command trains exactly one step of a paused run
(flushed at once, still paused). A `set_speed` command paces the loop: at most
`steps_per_second` steps per second, sleeping (and polling) between steps; None is full speed.

Every run also buffers, on every recorded step, the effective learning rate that step used
(`recording.EFFECTIVE_LR` scalar rows, read with `Engine.effective_learning_rate` just before
the step: the schedule and `decay` applied, or the constant rate); schedule-valued `hyper_changes` rows are expanded into their numbers
(`recording.hyper_change_rows`) before they reach the store.

A run whose config follows hyper-gradients trains through `hypergrad.stepper.HyperStepper` and
also buffers `hypergradients` rows every `hypergradient_every` steps (and at step 1; reverse mode
every `reverse_every` steps when `reverse_horizon` > 0), auto-tune changes every
`autotune_every` steps and the cost meter (`runs.hypergradient_meta`, about every
`META_EVERY_S`).

After every step, `engine.diagnostics.recorder.Diagnostics.rows` (built from the config when
any diagnostic is on) adds the training-dynamics rows due then (update ratio, sharpness, noise
scale) to the `diagnostics` buffer.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

from engine import recording
from engine.models import variable_label
from engine.record_rows import VAL_LOSS_AT_VARIABLES, ScalarRow
from engine.diagnostics import recorder as diagnostics_recorder
from optimizers.hyper_kinds import hyper_kinds_table
from optimizers.routing import ROUTES_KEY
from runs.process import landscape_hook
from runs.protocol import Refused, parse
from runs.store.connection import database_errors
from runs.store.run_store import RunStore

FLUSH_EVERY_S = 0.25
POLL_EVERY_S = 0.1
HEARTBEAT_S = 1.0
META_EVERY_S = 2.0
# A run with `on_tab_close = stop` stops once its browser session has not been seen for this
# long. Generous because browsers throttle the timers of hidden tabs to about once a minute.
TAB_CLOSED_AFTER_S = 150.0
TAB_CHECK_EVERY_S = 5.0



class Diverged(Exception):
    """The run diverged; the message names the step and the quantity."""


def _hyper_kinds(opt, engine) -> list[dict[str, Any]]:
    """`hyper_kinds_table` rows (in the run's dtype) for the Config tab; a teaching table that
    fails (e.g. a float16 run, or a plugin's unusual `_hyper`) must not stop the run: it
    records the error instead."""
    try:
        return hyper_kinds_table(opt, engine.config.dtype)
    except Exception as error:  # noqa: BLE001 - shown on the Config tab, the run goes on
        return [{"name": "(table unavailable)", "kind": f"{type(error).__name__}: {error}"}]


def _slot_routes(opt, variables) -> dict[str, Any]:
    """{ROUTES_KEY: {variable label: step}} for an optimizer that routes variables to different
    steps (Muon's `route_of`: "muon" or "adamw"), for the Slots view; else {}."""
    route_of = getattr(opt, "route_of", None)
    if route_of is None:
        return {}
    return {ROUTES_KEY: {variable_label(v): route_of(v) for v in variables}}


# A command handler: (run loop, command id, parsed payload) -> None, or raises `Refused`.
Handler = Callable[["RunLoop", int, Any], None]


class RunLoop:
    """State of one run loop (see the module docstring).

    Args:
        run_id, store: the run and the store it records into and takes commands from.
        engine: the run's `engine.train_step.Engine` (or a stand-in with its surface).
        total: steps to train; eval_every: validation every this many steps.
        record, histogram: step -> whether that step records statistics / histograms.
        handlers: {command kind: handler} (`runs.process.handlers.HANDLERS`); a kind without
            a handler is refused.
        hyper: a `hypergrad.stepper.HyperStepper` when the run follows hyper-gradients.
    """

    def __init__(self, run_id: int, store: RunStore, engine, total: int, eval_every: int,
                 record: Callable[[int], bool], histogram: Callable[[int], bool],
                 handlers: Mapping[str, Handler], hyper=None):
        self.run_id, self.store, self.engine = run_id, store, engine
        self.handlers = handlers
        self.hyper = hyper  # a HyperStepper when the run follows hyper-gradients
        self.stepper = hyper if hyper is not None else engine
        self.last_meta = 0.0
        self.total, self.eval_every = total, eval_every
        self.record, self.histogram = record, histogram
        self.step = 0
        self.meter = recording.LossMeter()
        self.buffers: dict[str, list] = {k: [] for k in ("scalars", "slot_stats", "histograms",
                                                         "hyper_changes", "hypergradients",
                                                         "response_slices", "lr_range",
                                                         "landscape")}
        self.paused = self.stop_requested = False
        self.single_steps = 0  # `step` commands not yet carried out (only while paused)
        self.steps_per_second: float | None = None  # `set_speed`; None = full speed
        self.stop_message = ""
        self.last_flush = self.last_poll = self.last_tab_check = time.monotonic()
        self.saved_traces = -1
        self.started: float | None = None  # monotonic time of the first `advance`
        self.step_started: float | None = None  # monotonic time the last step began (pace)
        self.max_wall_s: float | None = None  # `stopped` after this much training (seconds)
        self.last_lr: float | None = None  # the last recorded effective learning rate
        # Record batches are written by a writer thread (SQLite releases the GIL), so the
        # training thread does not wait for the disk; `flush(wait=True)` drains the queue.
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._writer = threading.Thread(target=self._write_loop, name="store-writer",
                                        daemon=True)
        self._writer.start()
        self._poll_con: Any = None  # opened by the first poll
        self.after_first_step: Callable[[], None] | None = None  # e.g. lower the priority
        self.after_step: Callable[[], None] | None = None  # e.g. a checkpoint every few s
        self.diagnostics = diagnostics_recorder.for_engine(engine)  # None: all off
        self.landscape = landscape_hook.for_run(self)  # None unless `path_landscape` is set

    # ----- store ------------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                if self._error is None:
                    self.store.append(self.run_id, **batch)
            except BaseException as error:  # noqa: BLE001 - re-raised by the next flush
                self._error = error
            finally:
                self._queue.task_done()

    def flush(self, wait: bool = False) -> None:
        """Hand the buffered records (one `store.append`) to the writer; `wait` drains it."""
        if self._error is not None:
            raise self._error
        self.buffers["hyper_changes"] = recording.hyper_change_rows(self.buffers["hyper_changes"])
        self._queue.put({**self.buffers, "step": self.step})
        self.buffers = {k: [] for k in self.buffers}
        if self.stepper.traces != self.saved_traces:
            self.saved_traces = self.stepper.traces
            self.store.update_run(self.run_id, traces=self.stepper.traces)
        self.last_flush = time.monotonic()
        if wait:
            self._queue.join()
            if self._error is not None:
                raise self._error

    def close(self) -> None:
        """Drain and end the writer thread; close the polling connection."""
        self._queue.put(None)
        self._writer.join(timeout=60)
        if self._poll_con is not None:
            self._poll_con.close()
            self._poll_con = None

    def save_meta(self) -> None:
        """The hyper-gradient cost meter and auto-tune state into `runs.hypergradient_meta`."""
        if self.hyper is not None:
            self.store.update_run(self.run_id, hypergradient_meta=self.hyper.costs())
            self.last_meta = time.monotonic()

    def save_optimizer(self) -> None:
        opt = self.engine.optimizer
        config = _jsonable(opt.get_config())
        config.update(_slot_routes(opt, getattr(self.engine, "variables", [])))
        self.store.update_run(self.run_id, optimizer_config=config,
                              hyper_variables=self.engine.hyper_variables(),
                              hyper_kinds=_hyper_kinds(opt, self.engine))

    # ----- commands -----------------------------------------------------------------------
    def poll(self) -> None:
        self.last_poll = time.monotonic()
        if self._poll_con is None:  # held for the run's life: polls read in microseconds
            try:
                self._poll_con = self.store.open_connection()
            except database_errors():
                pass  # `RunStore.pending` opens its own and raises the store's error
        for command in self.store.pending(self.run_id, self._poll_con):
            self.handle(command)
        if self.last_poll - self.last_tab_check >= TAB_CHECK_EVERY_S:
            self.last_tab_check = self.last_poll
            self.check_viewer()

    def handle(self, command: dict[str, Any]) -> str:
        """Parse and carry out one command row; mark it `done` or `refused` (with the reason)
        at the next step, the first that sees its effect.

        Args:
            command: `id, kind, payload` (payload as stored, or already decoded).

        Returns:
            The command's new status, `done` or `refused`.
        """
        next_step = self.step + 1
        try:
            payload = parse(command["kind"], command["payload"])
            handler = self.handlers.get(command["kind"])
            if handler is None:
                raise Refused(f"{command['kind']} refused: this run process has no handler "
                              f"for it (it handles {', '.join(self.handlers)})")
            handler(self, command["id"], payload)
        except Refused as refused:
            self.store.finish_command(command["id"], "refused", str(refused.args[0]),
                                      next_step)
            return "refused"
        self.store.finish_command(command["id"], "done", "", next_step)
        return "done"

    def check_viewer(self) -> None:
        """Stop when the run's policy is `on_tab_close = stop` and its browser session has not
        touched `viewer_heartbeat` for `TAB_CLOSED_AFTER_S` seconds (never seen = no page owns
        it, e.g. a CLI run: keep going)."""
        row = self.store.run(self.run_id)
        seen = row.get("viewer_heartbeat")
        if row.get("on_tab_close") == "stop" and seen and time.time() - seen > TAB_CLOSED_AFTER_S:
            self.stop_requested = True
            self.stop_message = (f"stopped after step {self.step}: its browser session closed "
                                 f"(OPTIMIZER_LAB_ON_TAB_CLOSE=stop, not seen for "
                                 f"{time.time() - seen:.0f} s)")

    def next_wake(self) -> float:
        """The monotonic time (s) at which `advance` has something to do: at once at full
        speed, on a stop, the end or a `step` command; at the next step time of a paced run
        (`set_speed`: `1 / steps_per_second` after the previous step began); else (paused) at
        the next command poll. Never later than the next poll, so commands are read within
        `POLL_EVERY_S`."""
        poll_at = self.last_poll + POLL_EVERY_S
        if self.stop_requested or self.step >= self.total:
            return time.monotonic()
        if self.paused:
            return time.monotonic() if self.single_steps else poll_at
        return min(poll_at, self._step_at())

    def _step_at(self) -> float:
        """The monotonic time from which the next unpaused step may run (its pace)."""
        if self.steps_per_second is None or self.step_started is None:
            return 0.0
        return self.step_started + 1.0 / self.steps_per_second

    # ----- training -------------------------------------------------------------------------
    def evaluate(self, step: int) -> None:
        loss, accuracy = self.engine.evaluate()
        if not math.isfinite(loss):
            raise Diverged(f"diverged at step {step}: val_loss is not finite ({loss})")
        self.buffers["scalars"] += [ScalarRow(step, "val_loss", loss),
                                    ScalarRow(step, "val_accuracy", accuracy)]
        if getattr(self.engine, "has_eval_point", lambda: False)():
            # schedule-free: `val_loss` is at the average x; y is where gradients are taken
            self.buffers["scalars"].append(
                ScalarRow(step, VAL_LOSS_AT_VARIABLES, self.engine.evaluate_at_variables()))

    def one_step(self) -> None:
        step = self.step + 1
        hist = self.histogram(step) or step == self.total
        record = hist or self.record(step) or step == self.total
        lr = self.effective_lr() if record else None  # before the step: the rate it uses
        loss, stats, hists = self.stepper.step(record, hist)
        loss = float(loss)
        if not math.isfinite(loss):
            raise Diverged(f"diverged at step {step}: train_loss is not finite ({loss})")
        self.meter.add(loss)
        stats = stats.numpy()  # on every step: the recorded stats or the finiteness guard
        # mean and std are finite exactly when every element is (the norm may saturate at
        # float32's max for huge finite values: `recording.tensor_stats`)
        bad = np.flatnonzero(~np.isfinite(stats[:, 1:]).all(axis=1))
        if bad.size:
            variable, slot = self.engine.series[bad[0]]
            detail = (f"norm={stats[bad[0], 0]:.3g}, mean={stats[bad[0], 1]:.3g}, "
                      f"std={stats[bad[0], 2]:.3g}" if record else "holds NaN or inf")
            raise Diverged(f"diverged at step {step}: {slot} of {variable} is not finite "
                            f"({detail})")
        if record:
            if lr is not None:
                self.buffers["scalars"].append(ScalarRow(step, recording.EFFECTIVE_LR, lr))
                self.last_lr = lr
            self.buffers["scalars"].append(ScalarRow(step, "train_loss", self.meter.take()))
            self.buffers["slot_stats"] += recording.stats_rows(step, self.engine.series, stats)
            if hist:
                self.buffers["histograms"] += recording.histogram_rows(
                    step, self.engine.series, hists.numpy())
        if self.diagnostics is not None:  # sharpness, update ratio, noise scale when due
            self.buffers.setdefault("diagnostics", []).extend(
                self.diagnostics.rows(step, stats if record else None))
        self.step = step
        if self.landscape is not None:
            self.landscape.on_step(step)
        if step % self.eval_every == 0 or step == self.total:
            self.evaluate(step)
        if self.hyper is not None:
            self.hyper_records(step)
        if step == 1:
            self.flush()
            self.save_optimizer()
            self.save_meta()
            if self.after_first_step is not None:
                self.after_first_step()
        if self.after_step is not None:
            self.after_step()

    def effective_lr(self) -> float | None:
        """The learning rate the next step uses (`_decayed_lr`), recorded for every run so the
        learning-rate chart shows what the step used, with or without a schedule; None for an
        engine without one learning rate."""
        engine = self.engine
        if not hasattr(engine, "effective_learning_rate"):
            return None
        try:
            return engine.effective_learning_rate()
        except KeyError:  # an optimizer without a `learning_rate` hyperparameter
            return None

    def hyper_records(self, step: int) -> None:
        """Hyper-gradient rows, reverse mode and auto-tune due at `step` (see the docstring)."""
        config, hyper = self.engine.config, self.hyper
        reverse = config.reverse_horizon > 0 and step % config.reverse_every == 0
        if step == 1 or step % config.hypergradient_every == 0 or step == self.total or reverse:
            rows = hyper.hypergradient_rows(step, with_reverse=reverse)
            bad = next((r for r in rows if not math.isfinite(r.exact)), None)
            if bad is not None:
                raise Diverged(f"diverged at step {step}: the hyper-gradient of {bad.name} is "
                                f"not finite ({bad.exact})")
            self.buffers["hypergradients"] += rows
        if hyper.autotune_etas and step % config.autotune_every == 0 and step < self.total:
            changes = hyper.autotune(step)
            if changes:
                self.buffers["hyper_changes"] += changes
                self.save_optimizer()
        if time.monotonic() - self.last_meta >= META_EVERY_S:
            self.save_meta()

    def advance(self) -> tuple[str, str] | None:
        """Do what is due now, at most one step: poll commands (every `POLL_EVERY_S`), then, when
        the run is neither paused (a `step` command excepted) nor waiting for its pace
        (`next_wake`), one step (`one_step`) and the flush when `FLUSH_EVERY_S` has passed.

        This is the unit a run host interleaves (`runs.process.host_scheduler`); `loop` calls it
        for a run alone in its process, so both train exactly the same steps.

        Returns:
            None while the run goes on; the final (status, message) once it ended: `finished`
            after `total` steps, `stopped` on a stop command or after `max_wall_s` (set by
            `loop` or the caller) of training.

        Raises:
            Diverged: a non-finite loss, validation loss or slot statistic.
        """
        if self.step >= self.total:
            return "finished", f"finished {self.total} steps"
        now = time.monotonic()
        if self.started is None:
            self.started = now
        if now - self.last_poll >= POLL_EVERY_S:
            self.poll()
        if self.stop_requested:
            return "stopped", self.stop_message
        if self.max_wall_s is not None and now - self.started > self.max_wall_s:
            return "stopped", (f"stopped after step {self.step}: max_wall_s={self.max_wall_s} "
                               "reached")
        if self.paused and not self.single_steps:
            return None  # `next_wake` says when to poll again
        if not self.paused and now < self._step_at():
            return None  # paced: not yet
        single = self.paused  # a `step` command on a paused run
        self.step_started = now
        self.one_step()
        if single:
            self.single_steps -= 1
            self.flush(wait=True)  # the step's rows are readable when the status says so
            self.store.set_status(self.run_id, "paused",
                                  f"paused before step {self.step + 1} (stepped to step "
                                  f"{self.step})")
        elif time.monotonic() - self.last_flush >= FLUSH_EVERY_S:
            self.flush()
        return None

    def loop(self, max_wall_s: float | None) -> tuple[str, str]:
        """Train to the end (or a stop) alone in this thread, sleeping until `next_wake`
        between calls of `advance` (paced or paused: the `Heartbeat` beats meanwhile);
        returns the final (status, message)."""
        self.max_wall_s = max_wall_s
        while True:
            end = self.advance()
            if end is not None:
                return end
            left = self.next_wake() - time.monotonic()
            if left > 0:
                time.sleep(left)


class Heartbeat:
    """Writes `runs.heartbeat` every `HEARTBEAT_S` from its own thread for the whole life of
    the run, so that a process busy for long in its main thread (importing TensorFlow on a
    loaded machine, building the model, an XLA compile) is not taken for dead by the pages
    (`RunStore.mark_interrupted` after `STALE_AFTER` s of silence)."""

    def __init__(self, store: RunStore, run_id: int):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(store, run_id),
                                        name="heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, store: RunStore, run_id: int) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                store.append(run_id)  # an empty batch: only the heartbeat
            except Exception:  # noqa: BLE001 - a busy store: beat again next time
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _jsonable(value: Any) -> Any:
    """`value` with NumPy scalars turned into Python numbers and unknown objects into repr."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return repr(value)
