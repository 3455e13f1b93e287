"""Hyper-gradients inside a live run: the train step of a run that follows hyper-gradients.

`HyperStepper` wraps an `Engine` whose config has `hypergradients` (followed names): the run
then trains through `ForwardModeTrainer.step` (same `BatchOrder`, same pure rule as the
engine's `apply_gradients`, dense updates) instead of the engine's compiled step, and this
object adds what the run records about hyper-gradients:

* `step(record, with_histograms)` has the contract of `Engine.step`: (loss, stats, hists), the
  slot statistics / histograms computed by compiled functions that read the variables and slots
  after the step and a copy of the variables taken before it (the `update` series), so the
  Slots tab shows the same series as a plain run.
* `hypergradient_rows(step, with_reverse)`: forward-mode exact and one-step dE/dlambda at the
  current weights, plus (when `with_reverse`) the truncated reverse-mode value over the window
  of the last T (state, batch) pairs kept in a deque (Franceschi et al. 2017, sec. 3.1).
* `autotune(step)`: RTHO (sec. 4) - lambda <- rtho_step(spec, lambda, dE/dlambda, eta), written
  ONLY through `optimizer._set_hyper`, returns `hyper_changes` rows with source `auto-tune`.
* `response_slice(...)`: E(w after `horizon` more steps) for values around the current one,
  from the current state and on the next batches of the batch order (the run does not move),
  with the reverse-mode hyper-gradient of that same function at the centre (the tangent line).
* `costs()`: the cost meter (plain compiled step vs hyper step, tangent and window bytes).

Followed names may be `lr_schedule.<param>` (a float parameter of the run's learning-rate
schedule, `hypergrad.parameters`): recorded, auto-tuned (the schedule's variable is assigned)
and sliced like any hyperparameter.

The reverse window uses the hyperparameters in effect when it is evaluated: if they changed
inside the window (auto-tune, user) the value is that of a constant-lambda window.
"""

from __future__ import annotations

import collections
import copy
import math
import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from engine.compiled import compiled
from engine import recording
from engine.record_rows import HyperChangeRow, HypergradientRow, ResponseSliceRow
from hypergrad.rtho import project, rtho_step
from hypergrad.forward import ForwardModeTrainer
from hypergrad.parameters import ParameterPlan
from hypergrad.reverse import (
    State,
    read_state,
    reverse_hypergradient,
    validation_loss_after,
)

if TYPE_CHECKING:
    from engine.train_step import Engine
    from optimizers.hyperparams import HyperSpec

# The forward-mode step carries k tangents per weight: XLA's fusion pays for its compile there
# (measured 2.0x the plain step's cost with XLA against 4.7x without: hypergrad/forward.py).
FORWARD_JIT_COMPILE = True

PLAIN_TIMING_STEPS = 20  # plain compiled steps timed (then undone) for the cost meter
SLICE_POINTS = 9
SLICE_HORIZON = 20
MAX_SLICE_HORIZON = 200
MAX_SLICE_POINTS = 25
LINEAR_SLICE_FRACTION = 0.1  # a linear hyperparameter's slice spans +-10% of its range
LOG_SLICE_FACTOR = 2.0  # a log-scale one's spans x/÷ 2


def slice_values(spec: HyperSpec, value: float, points: int = SLICE_POINTS) -> list[float]:
    """`points` values around `value` (log-spaced x/÷ 2 for log-scale specs, +-10% of the range
    for linear ones), projected into the allowed range, sorted, duplicates dropped, and
    `value` itself always included."""
    points = max(3, int(points))
    if spec.log_scale and value > 0:
        raw = value * LOG_SLICE_FACTOR ** np.linspace(-1.0, 1.0, points)
    else:
        width = spec.high - spec.low if math.isfinite(spec.high - spec.low) else 1.0
        raw = value + LINEAR_SLICE_FRACTION * width * np.linspace(-1.0, 1.0, points)
    values = {float(project(spec, float(v))) for v in raw} | {float(value)}
    return sorted(values)


class HyperStepper:
    """The train step and the hyper-gradient records of a run with `config.hypergradients`.

    Args:
        engine: the run's `Engine` (model, optimizer, data, batch order); its compiled plain
            step is timed for the cost meter and then undone (weights, slots, iterations and the
            batch order restored).
        measure_plain: time the plain step (skip in tests that do not need it).
    """

    def __init__(self, engine: Engine, measure_plain: bool = True):
        config = engine.config
        self.engine, self.config = engine, config
        self.model, self.opt = engine.model, engine.optimizer
        self.followed = list(config.hypergradients)
        self.autotune_etas: dict[str, float] = dict(config.autotune)
        self.order = engine.order
        self.series = engine.series
        self.plain_step_ms = self._time_plain_step() if measure_plain else float("nan")
        with tf.device(engine.device):
            self.trainer = ForwardModeTrainer(
                self.model, self.opt, self.followed, engine.x_train, engine.y_train,
                engine.x_val, engine.y_val, jit_compile=FORWARD_JIT_COMPILE,
            )
            variables = self.trainer.variables
            self._snapshot = compiled(lambda: [tf.identity(v) for v in variables])
            self._stats = compiled(
                lambda before: recording.packed_stats(variables, self.opt, before))
            self._hists = compiled(
                lambda before: recording.packed_histograms(variables, self.opt, before))
        n = len(self.series)
        self._no_stats = tf.zeros([n, 3], tf.float32)
        self._no_hists = tf.zeros([n, 2 + recording.BINS], tf.float32)
        # (state before the step, its batch indices) for the last T steps
        self.window: collections.deque[tuple[State, np.ndarray]] = collections.deque(
            maxlen=max(config.reverse_horizon, 1))
        self.state_bytes = read_state(self.model, self.opt).nbytes()
        self.step_times: collections.deque[float] = collections.deque(maxlen=200)  # seconds
        self.steps_taken = 0
        self.last_exact: dict[str, float] = {}
        self.last_exact_step = -1

    @property
    def plan(self) -> ParameterPlan:
        """The run's parameters (hyperparameters and `lr_schedule.<param>` names)."""
        return self.trainer.plan

    def value_of(self, name: str) -> float:
        """The current value of parameter `name` as a readable float (the shortest decimal of a
        float32 variable: 0.01, not 0.009999999776482582)."""
        if name in self.plan.hyper_names:
            return self.opt.hyper_values()[name]
        var = self.plan.schedule_variables[name]
        value = var.numpy()
        return float(str(np.float32(value))) if var.dtype == tf.float32 else float(value)

    @property
    def traces(self) -> int:
        """Traces of the forward-mode train step (1 in a healthy run)."""
        return self.trainer.traces

    # ----- cost meter ------------------------------------------------------------------------
    def _time_plain_step(self) -> float:
        """Median ms of the engine's compiled plain step over `PLAIN_TIMING_STEPS` steps, then
        the state and the batch order are put back exactly as they were."""
        engine = self.engine
        state = read_state(self.model, self.opt)
        order = copy.deepcopy(engine.order)
        times = []
        for i in range(PLAIN_TIMING_STEPS + 3):
            began = time.perf_counter()
            loss, _, _ = engine.step(record=False)
            float(loss)
            if i >= 3:  # the first calls compile (XLA)
                times.append(time.perf_counter() - began)
        for var, value in zip(engine.variables, state.weights):
            var.assign(value)
        names = self.opt.slot_names_for_rule()
        for var, slots in zip(engine.variables, state.slots):
            for name in names:
                self.opt.get_slot(var, name).assign(slots[name])
        self.opt.iterations.assign(state.step)
        engine.order = order
        return 1e3 * statistics.median(times)

    def costs(self) -> dict[str, Any]:
        """The cost meter: ms per plain step, ms per hyper step (median of the recent steps),
        their ratio, tangent bytes and the reverse window's bytes (T states)."""
        hyper = 1e3 * statistics.median(self.step_times) if self.step_times else float("nan")
        plain = self.plain_step_ms
        ratio = hyper / plain if plain > 0 and math.isfinite(plain * hyper) else float("nan")

        def clean(x: float) -> float | None:
            return round(x, 4) if math.isfinite(x) else None

        return {
            "followed": self.followed,
            "autotune": dict(self.autotune_etas),
            "plain_step_ms": clean(plain),
            "hyper_step_ms": clean(hyper),
            "ratio": clean(ratio),
            "tangent_bytes": self.trainer.tangent_bytes,
            "state_bytes": self.state_bytes,
            "window_bytes": self.state_bytes * self.config.reverse_horizon,
            "reverse_horizon": self.config.reverse_horizon,
        }

    # ----- the train step ---------------------------------------------------------------------
    def step(self, record: bool = True, with_histograms: bool = False
             ) -> tuple[float, tf.Tensor, tf.Tensor]:
        """One forward-mode training step on the next batch; the contract of `Engine.step`."""
        indices = self.order.next()
        if self.config.reverse_horizon > 0:
            self.window.append((read_state(self.model, self.opt), indices))
        before = self._snapshot() if (record or with_histograms) else None
        began = time.perf_counter()
        loss_value = float(self.trainer.step(indices))  # float() waits for the step
        self.steps_taken += 1
        if self.steps_taken > 2:  # the first calls trace and compile: not in the meter
            self.step_times.append(time.perf_counter() - began)
        stats = self._stats(before) if before is not None else self._no_stats
        hists = self._hists(before) if with_histograms else self._no_hists
        return loss_value, stats, hists

    # ----- hyper-gradients --------------------------------------------------------------------
    def hypergradient_rows(self, step: int, with_reverse: bool = False) -> list[HypergradientRow]:
        """`hypergradients` rows of every followed name at the current state (`reverse` is
        None unless `with_reverse`)."""
        val_loss, exact, one_step = self.trainer.hypergradients()
        self.last_exact, self.last_exact_step = exact, step
        reverse: dict[str, float] = {}
        if with_reverse and self.window:
            reverse = self.reverse()
        return [HypergradientRow(step, n, exact[n], one_step[n], reverse.get(n), val_loss)
                for n in self.followed]

    def reverse(self) -> dict[str, float]:
        """Truncated reverse-mode dE/dlambda over the stored window (at most T steps)."""
        engine = self.engine
        start = self.window[0][0]
        batches = [(tf.gather(engine.x_train, i), tf.gather(engine.y_train, i))
                   for _, i in self.window]
        with tf.device(engine.device):
            return reverse_hypergradient(self.model, self.opt, start, batches, self.followed,
                                         engine.x_val, engine.y_val, plan=self.plan)

    def autotune(self, step: int) -> list[HyperChangeRow]:
        """One RTHO update of every auto-tuned name (a hyperparameter through `_set_hyper` only,
        a schedule parameter by assigning the schedule's variable: `ParameterPlan.set_value`);
        returns the `hyper_changes` rows (at `step + 1`, source `auto-tune`) of the values that
        moved (they take effect at the next step)."""
        if not self.autotune_etas:
            return []
        if self.last_exact_step != step:
            self.hypergradient_rows(step)
        rows = []
        for name, eta in self.autotune_etas.items():
            spec = self.plan.spec(name)
            old = self.value_of(name)
            new = rtho_step(spec, old, self.last_exact[name], eta)
            if new == old:
                continue
            self.plan.set_value(name, new)
            value = self.value_of(name)
            if value != old:
                rows.append(HyperChangeRow(step + 1, name, old, value, "auto-tune"))
        return rows

    def set_autotune(self, name: str, eta: float | None) -> None:
        """Switch auto-tune of `name` on with hyper learning rate `eta`, or off (`None`).

        Raises:
            KeyError: `name` is not followed.
            ValueError: `eta` is not a positive finite number.
        """
        if name not in self.followed:
            raise KeyError(f"name={name!r} refused: auto-tune needs a followed hyperparameter "
                           f"({', '.join(self.followed)})")
        if eta is None:
            self.autotune_etas.pop(name, None)
            return
        eta = float(eta)
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"hyper_learning_rate={eta!r} refused: must be a float in (0, inf)")
        self.autotune_etas[name] = eta

    # ----- response slices --------------------------------------------------------------------
    def response_slice(self, request_id: int, step: int, name: str,
                       horizon: int = SLICE_HORIZON,
                       points: int = SLICE_POINTS) -> list[ResponseSliceRow]:
        """`response_slices` rows of
        E(w after `horizon` steps from now)(lambda) for `slice_values` around the current value,
        on the next `horizon` batches of the batch order (the run's order is not advanced), and
        the reverse-mode dE/dlambda of that same function at the current value (centre row).

        Raises:
            KeyError: `name` is not a parameter (hyperparameter or `lr_schedule.<param>`).
            ValueError: `horizon` or `points` out of range.
        """
        spec = self.plan.spec(name)
        horizon, points = int(horizon), int(points)
        if not 1 <= horizon <= MAX_SLICE_HORIZON:
            raise ValueError(f"horizon={horizon} refused: must be an int in 1..{MAX_SLICE_HORIZON}")
        if not 3 <= points <= MAX_SLICE_POINTS:
            raise ValueError(f"points={points} refused: must be an int in 3..{MAX_SLICE_POINTS}")
        engine = self.engine
        order = copy.deepcopy(self.order)
        indices = [order.next() for _ in range(horizon)]
        batches = [(tf.gather(engine.x_train, i), tf.gather(engine.y_train, i)) for i in indices]
        start = read_state(self.model, self.opt)
        dtype = start.weights[0].dtype
        base = self.plan.constant_values()
        center = float(base[name].numpy())
        rows = []
        with tf.device(engine.device):
            for value in slice_values(spec, center, points):
                hypers = dict(base)
                hypers[name] = tf.constant(value, dtype)
                loss = validation_loss_after(self.model, self.opt, start, batches, hypers,
                                             engine.x_val, engine.y_val, plan=self.plan)
                rows.append(ResponseSliceRow(request_id, step, name, value, loss, None,
                                             int(value == center)))
            grad = reverse_hypergradient(self.model, self.opt, start, batches, [name],
                                         engine.x_val, engine.y_val, plan=self.plan)[name]
        return [row._replace(hypergradient=grad) if row.center else row for row in rows]
