"""The learning-rate range test's numbers: the swept rates and the analysis of the losses.

Smith (2017, "Cyclical Learning Rates for Training Neural Networks", arXiv:1506.01186, §3.3):
train for a few hundred steps while the learning rate grows, plot the loss against the rate and
read two points off the curve. Here the rate grows exponentially (geometric steps, as fastai's
`lr_find`), step k = 1..n using

    lr_k = lr_min * (lr_max / lr_min) ** ((k - 1) / (n - 1))

and the sweep stops early once the loss is not finite or above `STOP_FACTOR` times its lowest
value so far. `analyse` then finds

* the smoothed loss: an exponential moving average with bias correction,
  s_k = (beta s_{k-1} + (1 - beta) l_k) / (1 - beta**k) in its debiased form (Kingma & Ba
  2015's correction; the smoothing fastai's `lr_find` plots);
* the steepest descent: the rate where d(smoothed loss)/d(ln lr) is most negative, before the
  smoothed loss's minimum (a common pick for training, Smith 2017 §3.3; fastai's `steep`);
* the divergence point: the stability limit 2 / lambda implied by how fast the loss blows up.
  On a quadratic with top curvature lambda, gradient descent multiplies the top mode by
  |1 - lr lambda| per step (diverging for lr > 2 / lambda, e.g. Cohen et al. 2021,
  arXiv:2103.00065, §2), so the loss grows by rho**2 = (lr lambda - 1)**2 per step once that mode
  dominates. Over the last `GROWTH_WINDOW` steps before the blow-up the measured growth gives
  lambda = (1 + rho) / lr (lr: the geometric mean rate of those steps), and the divergence point
  is 2 / lambda. Reading the point off the loss curve instead (its minimum, or where it
  passes 4x the minimum) lands far from 2 / lambda on a noisy quadratic: the noise floor
  rises with lr (minimum too early) and the blow-up needs several steps to show (too late).

Pure NumPy: no TensorFlow, so the pages and the CLI import it (the sweep itself is in
`engine.lr_range_sweep`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

LR_MIN, LR_MAX = 1e-5, 10.0  # the default sweep: 6 decades
STEPS = 200  # "a few hundred steps"
LR_BOUNDS = (1e-8, 1e3)  # what a sweep may ask for (either end)
STEP_BOUNDS = (10, 1000)
SMOOTHING = 0.9  # beta of the moving average (about a 10-step window)
STOP_FACTOR = 100.0  # the sweep stops once the loss exceeds this x its lowest value so far
GROWTH_WINDOW = 3  # steps before the blow-up whose growth rate gives the divergence point


def rates(lr_min: float = LR_MIN, lr_max: float = LR_MAX, steps: int = STEPS) -> np.ndarray:
    """float64 [steps] learning rates growing geometrically from `lr_min` to `lr_max`.

    Raises:
        ValueError: a rate outside `LR_BOUNDS`, lr_min >= lr_max, or steps outside
            `STEP_BOUNDS` (the message names the field and the range).
    """
    check(lr_min, lr_max, steps)
    return lr_min * (lr_max / lr_min) ** (np.arange(steps) / (steps - 1))


def check(lr_min: float, lr_max: float, steps: int) -> None:
    """Refuse a sweep the lab does not run (see `rates`)."""
    low, high = LR_BOUNDS
    for name, value in (("lr_min", lr_min), ("lr_max", lr_max)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                low <= value <= high):
            raise ValueError(f"{name}={value!r} refused: must be a float in [{low:g}, {high:g}]")
    if not lr_min < lr_max:
        raise ValueError(f"lr_max={lr_max!r} refused: must be larger than lr_min={lr_min!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not (
            STEP_BOUNDS[0] <= steps <= STEP_BOUNDS[1]):
        raise ValueError(f"steps={steps!r} refused: must be an integer in "
                         f"[{STEP_BOUNDS[0]}, {STEP_BOUNDS[1]}]")


def should_stop(losses: Sequence[float]) -> bool:
    """True when the last loss is not finite or above `STOP_FACTOR` x the lowest so far."""
    last = losses[-1]
    return not math.isfinite(last) or last > STOP_FACTOR * min(losses)


def smooth(losses: Sequence[float] | np.ndarray, beta: float = SMOOTHING) -> np.ndarray:
    """float64 [n]: the debiased exponential moving average of `losses` (see the docstring);
    a non-finite loss stays non-finite from there on."""
    out, average = np.empty(len(losses)), 0.0
    for k, loss in enumerate(losses, start=1):
        average = beta * average + (1.0 - beta) * float(loss)
        out[k - 1] = average / (1.0 - beta ** k)
    return out


@dataclass(frozen=True)
class RangeResult:
    """What `analyse` reads off a sweep (learning rates; None when the sweep does not show it).

    Attributes:
        steepest: rate of the steepest descent of the smoothed loss.
        minimum: rate of the smoothed loss's minimum.
        divergence: the stability limit 2 / curvature implied by the blow-up (see the module
            docstring); None when the loss never blew up (raise lr_max).
        blowup: the rate at which the loss first exceeded `STOP_FACTOR` x its minimum (or was not
            finite).
        curvature: the curvature lambda (1 / learning-rate units) the growth implies.
    """

    steepest: float | None
    minimum: float | None
    divergence: float | None
    blowup: float | None
    curvature: float | None


def analyse(learning_rates: Sequence[float], losses: Sequence[float | None],
            beta: float = SMOOTHING) -> RangeResult:
    """Read the steepest descent and the divergence point off a sweep.

    Args:
        learning_rates: float [n], increasing (the rates of steps 1..n).
        losses: float [n] in nats, the loss after each step (None or NaN: not finite).
        beta: the smoothing of `smooth`.

    Returns:
        A `RangeResult`; every field None for fewer than 3 finite losses.
    """
    lrs = np.asarray(learning_rates, dtype=float)
    values = np.array([np.nan if v is None else float(v) for v in losses], dtype=float)
    finite = np.isfinite(values)
    n_ok = int(np.argmin(finite)) if not finite.all() else len(values)  # first bad one
    if n_ok < 3:
        return RangeResult(None, None, None, None, None)
    good, good_lrs = values[:n_ok], lrs[:n_ok]
    running = np.minimum.accumulate(good)
    over = np.flatnonzero(good > STOP_FACTOR * running)
    blow = int(over[0]) if over.size else (n_ok if n_ok < len(values) else None)
    end = blow if blow is not None else n_ok  # the curve before the blow-up
    smoothed = smooth(good[:max(end, 3)], beta)
    low = int(np.argmin(smoothed))
    slope = np.gradient(smoothed, np.log(good_lrs[:len(smoothed)]))
    # the first few averages still carry the start's weight: the steepest point is looked for
    # after them (fastai's `lr_find` skips the start of the curve too)
    skip = min(3, low)
    steepest = (float(good_lrs[skip + int(np.argmin(slope[skip:low + 1]))]) if low > 0
                else None)
    divergence = curvature = None
    blowup = None if blow is None else float(lrs[blow])
    if blow is not None:
        last = min(blow, n_ok - 1)  # the last finite loss at or before the blow-up
        first = max(0, last - GROWTH_WINDOW)
        if last > first and good[first] > 0:
            rho = (good[last] / good[first]) ** (1.0 / (2 * (last - first)))
            # the updates between the two losses used the rates of steps first+1..last
            lr = float(np.exp(np.mean(np.log(good_lrs[first + 1:last + 1]))))
            curvature = float((1.0 + rho) / lr)
            divergence = 2.0 / curvature
    return RangeResult(steepest, float(good_lrs[low]), divergence, blowup, curvature)
