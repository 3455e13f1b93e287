"""The allow-listed learning-rate schedules' curves in NumPy: what `_decayed_lr` returns at each
iteration (`schedule_curve`), the Train page's preview (`preview_points`) and the steps where a
schedule changes regime (`schedule_marks`), for the loss chart's boundary lines.

TensorFlow-free (the server draws these); the formulas are the tf_keras schedule classes'
(listed once in the `schedules` package docstring), tested against those classes to 1e-12
(`tests/test_schedule_figures.py`). The differentiable TensorFlow twins are
`schedules.differentiable`.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

import numpy as np


def schedule_curve(data: Mapping[str, Any] | None, iterations: np.ndarray,
                   learning_rate: float = 0.01, decay: float = 0.0) -> np.ndarray:
    """The learning rate `_decayed_lr` gives at each optimizer iteration, in NumPy (float64).

    Formulas: the `schedules` package docstring (tf_keras 2.21's classes), `t` the iteration
    count (`optimizer.iterations`, 0 at the first step).
    Then the legacy `decay` (Keras OptimizerV2): lr / (1 + decay * t).

    Args:
        data: a validated schedule (`validate_schedule`; its `start_step` k shifts it: the
            schedule at max(t - k, 0)), or None for the constant `learning_rate`.
        iterations: int or float array [n] of iteration counts >= 0.
        learning_rate: the constant rate used when `data` is None.
        decay: legacy time-based decay >= 0.

    Returns:
        float64 array [n] of learning rates.
    """
    t = np.asarray(iterations, dtype=np.float64)
    if data is None:
        lr = np.full_like(t, float(learning_rate))
    else:  # a schedule started at iteration k sees max(t - k, 0) (`schedules.table`)
        shifted = np.maximum(t - float(data.get("start_step", 0)), 0.0)
        lr = _CURVES[data["class_name"]](data["config"], shifted)
    return lr / (1.0 + decay * t) if decay > 0 else lr


def _exponential(c, t):
    p = t / c["decay_steps"]
    return c["initial_learning_rate"] * c["decay_rate"] ** (np.floor(p) if c["staircase"] else p)


def _inverse_time(c, t):
    p = t / c["decay_steps"]
    return c["initial_learning_rate"] / (1 + c["decay_rate"] * (np.floor(p) if c["staircase"]
                                                                 else p))


def _piecewise(c, t):
    # searchsorted(side="left") counts boundaries < t: values[0] while t <= boundaries[0]
    return np.asarray(c["values"], np.float64)[np.searchsorted(c["boundaries"], t, side="left")]


def _polynomial(c, t):
    steps: Any = float(c["decay_steps"])  # an array of per-step cycle lengths when cycling
    if c["cycle"]:
        steps = steps * np.where(t == 0, 1.0, np.ceil(t / steps))
    else:
        t = np.minimum(t, steps)
    lr0, end = c["initial_learning_rate"], c["end_learning_rate"]
    return (lr0 - end) * (1 - t / steps) ** c["power"] + end


def _cosine_part(t, steps, lr_from, alpha):
    return lr_from * ((1 - alpha) * 0.5 * (1 + np.cos(np.pi * t / steps)) + alpha)


def _cosine(c, t):
    steps, lr0 = float(c["decay_steps"]), c["initial_learning_rate"]
    if c["warmup_target"] is None:
        return _cosine_part(np.minimum(t, steps), steps, lr0, c["alpha"])
    warm, target = float(c["warmup_steps"]), c["warmup_target"]
    t = np.minimum(t, steps + warm)
    with np.errstate(divide="ignore", invalid="ignore"):  # W = 0: no warm-up branch is taken
        warming = (target - lr0) * (t / warm) + lr0
    return np.where(t < warm, warming, _cosine_part(t - warm, steps, target, c["alpha"]))


def _restart_index(c, t):
    fraction, t_mul = t / c["first_decay_steps"], c["t_mul"]
    if t_mul == 1.0:
        i = np.floor(fraction)
        return i, fraction - i
    i = np.floor(np.log(1 - fraction * (1 - t_mul)) / np.log(t_mul))
    done = (1 - t_mul ** i) / (1 - t_mul)
    return i, (fraction - done) / t_mul ** i


def _restarts(c, t):
    i, fraction = _restart_index(c, t)
    cosine = 0.5 * c["m_mul"] ** i * (1 + np.cos(np.pi * fraction))
    return c["initial_learning_rate"] * ((1 - c["alpha"]) * cosine + c["alpha"])


_CURVES = {"ExponentialDecay": _exponential, "InverseTimeDecay": _inverse_time,
           "PiecewiseConstantDecay": _piecewise, "PolynomialDecay": _polynomial,
           "CosineDecay": _cosine, "CosineDecayRestarts": _restarts}


def preview_points(data: Mapping[str, Any] | None, total_steps: int, learning_rate: float = 0.01,
                   decay: float = 0.0, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(run steps int64 [<= points + marks], learning rates float64) for a preview chart: about
    `points` steps evenly over 1..`total_steps`, plus each regime change and the step before
    it (so jumps stay sharp). Step t uses iterations t - 1 (`schedule_curve`)."""
    total = max(int(total_steps), 1)
    steps = np.unique(np.linspace(1, total, min(points, total)).round().astype(np.int64))
    extra = [s for mark, _ in schedule_marks(data, total) for s in (mark - 1, mark)]
    steps = np.unique(np.concatenate([steps, np.asarray(extra, np.int64)]))
    steps = steps[(steps >= 1) & (steps <= total)]
    return steps, schedule_curve(data, steps - 1, learning_rate, decay)


def schedule_marks(data: Mapping[str, Any] | None, total_steps: int,
                   max_marks: int = 50) -> list[tuple[int, str]]:
    """`(run step, label)` where the schedule changes regime, within 1..`total_steps`.

    The run step is the first step that uses the new regime (step = iteration + 1):
    PiecewiseConstantDecay boundaries (new value once t > b: step b + 2), CosineDecayRestarts
    restarts, staircase steps of Exponential/InverseTimeDecay, CosineDecay's warm-up end.
    At most `max_marks` (the first ones). [] for None and for smooth schedules.
    """
    if not data:
        return []
    offset = int(data.get("start_step", 0))
    if offset:  # the same marks, shifted to where the started schedule reaches them
        return [(s + offset, label) for s, label in schedule_marks(
            {k: v for k, v in data.items() if k != "start_step"}, total_steps - offset,
            max_marks)]
    c, name = data["config"], data["class_name"]
    marks: list[tuple[int, str]] = []
    if name == "PiecewiseConstantDecay":
        marks = [(int(b) + 2, f"boundary {b}") for b in c["boundaries"]]
    elif name in ("ExponentialDecay", "InverseTimeDecay") and c["staircase"]:
        marks = [(k * c["decay_steps"] + 1, "staircase") for k in
                 range(1, min(max_marks, total_steps // c["decay_steps"]) + 1)]
    elif name == "CosineDecay" and c["warmup_target"] is not None and c["warmup_steps"] > 0:
        marks = [(c["warmup_steps"] + 1, "warm-up end")]
    elif name == "CosineDecayRestarts":
        start, period = 0.0, float(c["first_decay_steps"])
        while len(marks) < max_marks:
            start += period
            period *= c["t_mul"]
            if start + 1 > total_steps:
                break
            marks.append((int(round(start)) + 1, "restart"))
    return [(s, label) for s, label in marks if 1 <= s <= total_steps][:max_marks]


__all__ = ["preview_points", "schedule_curve", "schedule_marks"]
