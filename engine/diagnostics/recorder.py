"""The diagnostics of one run, called by the run loop once after every step.

`Diagnostics(engine).rows(step, stats)` returns the `DiagnosticRow`s due at `step`:

* update ratio (`RunConfig.update_ratio`, every `update_ratio_every` steps and at step 1, of
  those whose slot statistics were recorded (`stats` given)): one row per variable
  (`engine.diagnostics.update_ratio`);
* sharpness (`sharpness`, every `sharpness_every` steps and at step 1): lambda_1(H) of the
  training loss on a fixed subset of the training set and its threshold; for Adam, AdamW and
  RMSprop also lambda_1(P^-1 H) and its threshold (`engine.diagnostics.sharpness`);
* noise scale (`noise_scale`, every `noise_scale_every` steps and at step 1): tr(Sigma),
  |G|^2 and B_simple from per-example gradients of a fresh random subset
  (`engine.diagnostics.noise_scale`);
* `step_seconds` with every sharpness or noise record: the median wall time between two calls
  without the diagnostics' own time (a paced run's pause is included: the step interval).

The compiled pieces are built on first use, so a run that records none pays nothing at start.
Rows carry the wall time each diagnostic took (`seconds`): the Train page's cost meter.
"""

from __future__ import annotations

import collections
import statistics
import time
from typing import Any

import numpy as np
import tensorflow as tf

from engine.diagnostics import catalog
from engine.diagnostics.hessian import LossHessian
from engine.diagnostics.noise_scale import (EXAMPLES, NoiseScaleMeter, PerExampleGradients,
                                            estimates)
from engine.diagnostics.sharpness import ITERATIONS, Sharpness, preconditioner
from engine.diagnostics.update_ratio import WeightNorms, update_ratios
from engine.record_rows import DiagnosticRow

# Examples of the fixed sharpness batch: the whole training set up to this many (digits: all
# 1,347, so full-batch gradient descent sees exactly the Hessian that is measured).
SHARPNESS_EXAMPLES = 2048
RECENT_STEPS = 50  # step intervals kept for the median


class Diagnostics:
    """What `engine` (an `engine.train_step.Engine`) records about its dynamics.

    Args:
        engine: the run's engine; its `config` says which diagnostics are on and how often.
        iterations: Lanczos iterations per eigenvalue.
        examples: per-example gradients per noise-scale estimate (m).
    """

    def __init__(self, engine: Any, iterations: int = ITERATIONS, examples: int = EXAMPLES):
        self.engine, self.iterations, self.examples = engine, iterations, examples
        config = engine.config
        self.ratio_every = config.update_ratio_every if config.update_ratio == "on" else 0
        self.sharpness_every = config.sharpness_every if config.sharpness == "on" else 0
        self.noise_every = config.noise_scale_every if config.noise_scale == "on" else 0
        self._norms: WeightNorms | None = None
        self._sharpness: Sharpness | None = None
        self._gradients: PerExampleGradients | None = None
        self.meter = NoiseScaleMeter()
        self.intervals: collections.deque[float] = collections.deque(maxlen=RECENT_STEPS)
        self._last_end: float | None = None

    @property
    def active(self) -> bool:
        """True when any diagnostic is on."""
        return bool(self.ratio_every or self.sharpness_every or self.noise_every)

    def rows(self, step: int, stats: np.ndarray | None) -> list[DiagnosticRow]:
        """The rows due after 1-based step `step`; `stats`: the step's slot statistics
        (float [n_series, 3]) when it recorded them, else None."""
        began = time.perf_counter()
        if self._last_end is not None:
            self.intervals.append(began - self._last_end)
        out: list[DiagnosticRow] = []
        if self.ratio_every and stats is not None and (step == 1 or step % self.ratio_every == 0):
            out += self.update_ratio_rows(step, stats)
        timed = False
        if self.sharpness_every and (step == 1 or step % self.sharpness_every == 0):
            out += self.sharpness_rows(step)
            timed = True
        if self.noise_every and (step == 1 or step % self.noise_every == 0):
            out += self.noise_rows(step)
            timed = True
        if timed and self.intervals:
            out.append(DiagnosticRow(step, catalog.STEP_SECONDS, "",
                                     statistics.median(self.intervals), 0.0))
        self._last_end = time.perf_counter()
        return out

    # ----- each diagnostic ------------------------------------------------------------------
    def update_ratio_rows(self, step: int, stats: np.ndarray) -> list[DiagnosticRow]:
        began = time.perf_counter()
        engine = self.engine
        if self._norms is None:
            with tf.device(engine.device):
                self._norms = WeightNorms(engine.variables)
        with tf.device(engine.device):
            norms = self._norms()
        ratios = update_ratios(engine.series, stats, self._norms.labels, norms)
        seconds = time.perf_counter() - began
        return [DiagnosticRow(step, catalog.UPDATE_RATIO, variable, value,
                              seconds if index == 0 else 0.0)
                for index, (variable, value) in enumerate(ratios.items())]

    def sharpness_batch(self) -> tuple[tf.Tensor, tf.Tensor]:
        """The fixed batch the sharpness is measured on: the first `SHARPNESS_EXAMPLES`
        examples of a permutation of the training set seeded by the run's seed."""
        engine = self.engine
        n = int(engine.x_train.shape[0])
        order = np.random.RandomState(engine.config.seed).permutation(n)
        indices = tf.constant(np.sort(order[:SHARPNESS_EXAMPLES]).astype(np.int32))
        return tf.gather(engine.x_train, indices), tf.gather(engine.y_train, indices)

    def sharpness_rows(self, step: int) -> list[DiagnosticRow]:
        from engine.train_step import cross_entropy  # the run's own loss

        engine, config = self.engine, self.engine.config
        began = time.perf_counter()
        with tf.device(engine.device):
            if self._sharpness is None:
                x, y = self.sharpness_batch()
                self._sharpness = Sharpness(LossHessian(engine.model, engine.variables, x, y,
                                                        cross_entropy), self.iterations)
            plain = self._sharpness.plain()
            middle = time.perf_counter()
            precondition = preconditioner(config.optimizer, engine.optimizer, engine.variables,
                                          config.options)
            preconditioned = (self._sharpness.preconditioned(precondition)
                              if precondition is not None else None)
        end = time.perf_counter()
        lr = float(engine.effective_learning_rate())
        hypers = _hyper_numbers(engine.optimizer)
        out = [DiagnosticRow(step, catalog.SHARPNESS, "", plain, middle - began)]
        threshold = catalog.sharpness_threshold(config.optimizer, hypers, config.options, lr)
        if threshold is not None:
            out.append(DiagnosticRow(step, catalog.SHARPNESS_THRESHOLD, "", threshold, 0.0))
        if preconditioned is not None:
            out.append(DiagnosticRow(step, catalog.PRECONDITIONED, "", preconditioned,
                                     end - middle))
            limit = catalog.preconditioned_threshold(config.optimizer, hypers, lr)
            if limit is not None:
                out.append(DiagnosticRow(step, catalog.PRECONDITIONED_THRESHOLD, "", limit, 0.0))
        return out

    def noise_rows(self, step: int) -> list[DiagnosticRow]:
        engine = self.engine
        began = time.perf_counter()
        n = int(engine.x_train.shape[0])
        m = min(self.examples, n)
        with tf.device(engine.device):
            if self._gradients is None:
                self._gradients = PerExampleGradients(engine.model, engine.variables,
                                                      engine.x_train, engine.y_train, m)
            # a fresh subset per record, reproducible from (seed, step), apart from the batches
            rng = np.random.RandomState((engine.config.seed * 1_000_003 + step) % 2**32)
            sum_sq, mean_sq = self._gradients.norms(rng.choice(n, m, replace=False))
        trace, norm_sq = estimates(sum_sq, mean_sq, m)
        scale = self.meter.add(trace, norm_sq)
        out = [DiagnosticRow(step, catalog.GRADIENT_NOISE, "", trace, time.perf_counter() - began),
               DiagnosticRow(step, catalog.GRADIENT_NORM_SQ, "", norm_sq, 0.0)]
        if scale is not None:
            out.append(DiagnosticRow(step, catalog.NOISE_SCALE, "", scale, 0.0))
        return out


def _hyper_numbers(optimizer: Any) -> dict[str, float]:
    """The optimizer's numeric hyperparameters as floats (a schedule-valued one left out)."""
    out = {}
    for name, value in getattr(optimizer, "hyper_values", dict)().items():
        if isinstance(value, (int, float)):
            out[name] = float(value)
    return out


def for_engine(engine: Any) -> Diagnostics | None:
    """The run's `Diagnostics`, or None when its config switches every diagnostic off (or the
    engine is a stand-in without a `RunConfig` and variables, as in the run loop's tests)."""
    config = getattr(engine, "config", None)
    if not hasattr(config, "update_ratio") or not hasattr(engine, "variables"):
        return None
    diagnostics = Diagnostics(engine)
    return diagnostics if diagnostics.active else None
