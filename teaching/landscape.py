"""The 2-D landscape: classic test functions and registry optimizers racing on them.

`LandscapeRunner` holds one position variable (shape [2], float32) and one optimizer instance of
the registry (the very classes the Train page uses) per racer, and one compiled function that
runs *all* racers for N steps in a single XLA-compiled `tf.while_loop`: each iteration computes
every racer's gradient with a `GradientTape` and calls its `apply_gradients`. A new start point,
step count or hyperparameter value is fed without retracing (variables and `_set_hyper`
assignments), so a redraw costs one compiled call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import tensorflow as tf

from optimizers import registry
from optimizers.base import trace_signature

Fn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


@dataclass(frozen=True)
class TestFunction:
    """A 2-D test function f(x, y), element-wise on tensors of any shape (float32).

    Attributes:
        name: key in `FUNCTIONS`; fn: the function; minima: its global minimiser(s) (x, y);
        f_min: the minimum value; start: default start point; x_range, y_range: plot window;
        log_contour: draw contours of log10(1 + f - f_min) (steep valleys); reference: source.
    """

    name: str
    fn: Fn
    minima: tuple[tuple[float, float], ...]
    f_min: float
    start: tuple[float, float]
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    log_contour: bool
    reference: str


def rosenbrock(x, y):
    return (1.0 - x) ** 2 + 100.0 * (y - x**2) ** 2


def beale(x, y):
    return ((1.5 - x + x * y) ** 2 + (2.25 - x + x * y**2) ** 2 + (2.625 - x + x * y**3) ** 2)


def saddle(x, y):
    """x^2 - y^2 + y^4/4 + 1: a saddle point at (0, 0), minima f = 0 at (0, +-sqrt 2)."""
    return x**2 - y**2 + 0.25 * y**4 + 1.0


def ill_conditioned(x, y):
    """0.5 (x^2 + 100 y^2): condition number 100."""
    return 0.5 * (x**2 + 100.0 * y**2)


def rastrigin(x, y):
    two_pi = 2.0 * math.pi
    return 20.0 + x**2 - 10.0 * tf.cos(two_pi * x) + y**2 - 10.0 * tf.cos(two_pi * y)


FUNCTIONS: dict[str, TestFunction] = {
    f.name: f for f in (
        TestFunction("rosenbrock", rosenbrock, ((1.0, 1.0),), 0.0, (-1.5, 2.0), (-2.0, 2.0),
                     (-1.0, 3.0), True, "Rosenbrock 1960, The Computer Journal 3(3)"),
        TestFunction("beale", beale, ((3.0, 0.5),), 0.0, (1.0, 1.4), (-4.5, 4.5), (-4.5, 4.5),
                     True, "Beale 1958; Jamil & Yang 2013, arXiv:1308.4008, f10"),
        TestFunction("saddle", saddle, ((0.0, math.sqrt(2.0)), (0.0, -math.sqrt(2.0))), 0.0,
                     (-1.5, 1e-3), (-2.0, 2.0), (-2.0, 2.0), False,
                     "Dauphin et al. 2014, arXiv:1406.2572 (saddle points in high dimensions)"),
        TestFunction("ill_conditioned", ill_conditioned, ((0.0, 0.0),), 0.0, (-4.0, 1.0),
                     (-5.0, 5.0), (-1.5, 1.5), True, "quadratic with condition number 100"),
        TestFunction("rastrigin", rastrigin, ((0.0, 0.0),), 0.0, (-2.3, 2.6), (-5.12, 5.12),
                     (-5.12, 5.12), False, "Rastrigin 1974; Jamil & Yang 2013, arXiv:1308.4008"),
    )
}
# Learning rates that move visibly within a few hundred steps (the registry defaults are tuned
# for neural networks); the page starts from these and the tuner searches around them.
LANDSCAPE_LR = {"sgd": 1e-3, "adagrad": 0.5, "accumulation": 0.05}
DEFAULT_LR = 0.05
TUNE_GRID = tuple(float(v) for v in np.logspace(-4, 0, 13))


def landscape_lr(optimizer: str) -> float:
    """The learning rate the landscape page starts `optimizer` from."""
    return LANDSCAPE_LR.get(optimizer, DEFAULT_LR)


def get_function(name: str) -> TestFunction:
    """Raises KeyError naming the known functions."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"function={name!r} is unknown; known: {', '.join(FUNCTIONS)}") from None


def grid(name: str, n: int = 80) -> pd.DataFrame:
    """f on an n x n grid of the function's window: columns x, y, z (and `level`, the value the
    contour plot draws: log10(1 + f - f_min) when `log_contour`, else f)."""
    func = get_function(name)
    xs = np.linspace(*func.x_range, n, dtype=np.float32)
    ys = np.linspace(*func.y_range, n, dtype=np.float32)
    xx, yy = np.meshgrid(xs, ys)
    z = func.fn(tf.constant(xx), tf.constant(yy)).numpy().astype(np.float64)
    level = np.log10(1.0 + z - func.f_min) if func.log_contour else z
    return pd.DataFrame({"x": xx.ravel(), "y": yy.ravel(), "z": z.ravel(), "level": level.ravel()})


@dataclass(frozen=True)
class Racer:
    """One optimizer on the landscape: `label` (unique), registry `optimizer` name, `options`."""

    label: str
    optimizer: str
    options: tuple[tuple[str, Any], ...] = ()


class LandscapeRunner:
    """All racers on one test function, compiled once.

    Args:
        function: a `FUNCTIONS` key.
        racers: the optimizers (labels must be unique).
        jit_compile: compile the N-step loop with XLA (default True; False for debugging).

    Raises:
        KeyError, ValueError: unknown function or optimizer, duplicate labels, bad options.
    """

    def __init__(self, function: str, racers: Sequence[Racer], jit_compile: bool = True):
        labels = [r.label for r in racers]
        if len(set(labels)) != len(labels):
            raise ValueError(f"racer labels must be unique, got {labels}")
        self.function = get_function(function)
        self.racers = list(racers)
        self.optimizers = [registry.create(r.optimizer, {}, dict(r.options)) for r in racers]
        start = tf.constant(self.function.start, tf.float32)
        self.positions = [tf.Variable(start, name=f"xy_{i}") for i in range(len(racers))]
        for opt, var in zip(self.optimizers, self.positions):
            opt._create_all_weights([var])  # slots and hyper variables before tracing
        self._initial_slots = [
            [(opt.get_slot(var, n), opt.get_slot(var, n).numpy()) for n in opt.get_slot_names()]
            for opt, var in zip(self.optimizers, self.positions)
        ]
        self.traces = 0
        self._jit_compile = jit_compile
        self._signatures = [trace_signature(opt) for opt in self.optimizers]
        self._run = tf.function(self._loop, jit_compile=jit_compile, reduce_retracing=True)

    # ----- state --------------------------------------------------------------------------
    def set_hypers(self, label: str, hypers: dict[str, float]) -> None:
        """`_set_hyper` every given hyperparameter of racer `label` (no retrace, except for a
        change the loop baked in: see `run_arrays`)."""
        opt = self.optimizers[[r.label for r in self.racers].index(label)]
        for name, value in hypers.items():
            opt._set_hyper(name, value)

    def reset(self, start: tuple[float, float]) -> None:
        """Every racer back to `start`, slots to their initial values, iterations to 0."""
        for opt, var, slots in zip(self.optimizers, self.positions, self._initial_slots):
            var.assign(np.asarray(start, np.float32))
            for slot, initial in slots:
                slot.assign(initial)
            opt.iterations.assign(0)

    # ----- the compiled loop -------------------------------------------------------------------
    def _loop(self, steps):
        self.traces += 1
        f = self.function.fn
        xs = tf.TensorArray(tf.float32, size=steps + 1)
        xs = xs.write(0, tf.stack([v.read_value() for v in self.positions]))
        for i in tf.range(steps):
            for opt, var in zip(self.optimizers, self.positions):
                with tf.GradientTape() as tape:
                    loss = f(var[0], var[1])
                opt.apply_gradients([(tape.gradient(loss, var), var)])
            xs = xs.write(i + 1, tf.stack([v.read_value() for v in self.positions]))
        path = xs.stack()  # [steps + 1, racers, 2]
        return path, f(path[..., 0], path[..., 1])

    def run_arrays(self, start: tuple[float, float], steps: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions [steps + 1, racers, 2] and losses [steps + 1, racers] from `start`.

        A hyperparameter change the compiled loop baked in (SGD's or RMSprop's momentum
        crossing 0 selects another update: `trace_signature`) compiles the loop again first;
        every other change is a variable the compiled loop reads."""
        signatures = [trace_signature(opt) for opt in self.optimizers]
        if signatures != self._signatures:
            self._signatures = signatures
            self._run = tf.function(self._loop, jit_compile=self._jit_compile,
                                    reduce_retracing=True)
        self.reset(start)
        path, loss = self._run(tf.constant(int(steps), tf.int32))
        return path.numpy(), loss.numpy()

    def run(self, start: tuple[float, float], steps: int) -> pd.DataFrame:
        """Trajectories as a long DataFrame: optimizer (label), step (0..steps), x, y, loss."""
        path, loss = self.run_arrays(start, steps)
        return trajectories_frame([r.label for r in self.racers], path, loss)

    # ----- tuning ----------------------------------------------------------------------------
    def tune_learning_rates(self, start: tuple[float, float], steps: int,
                            grid_values: Sequence[float] = TUNE_GRID) -> pd.DataFrame:
        """Log-grid search of each racer's learning rate; sets the best one on each racer.

        Every grid value is tried for all racers at once (one compiled run per value; values
        outside a racer's allowed range are skipped for it). Score = mean loss over the last
        10% of the steps (NaN or inf counts as +inf), lower is better.

        Returns:
            DataFrame: optimizer (label), learning_rate, score, best (bool).
        """
        rows = []
        tail = max(1, steps // 10)
        for lr in grid_values:
            active = []
            for racer, opt in zip(self.racers, self.optimizers):
                if opt.spec("learning_rate").contains(lr):
                    opt._set_hyper("learning_rate", lr)
                    active.append(racer.label)
            _, loss = self.run_arrays(start, steps)
            for j, racer in enumerate(self.racers):
                if racer.label in active:
                    score = float(np.mean(loss[-tail:, j]))
                    rows.append({"optimizer": racer.label, "learning_rate": lr,
                                 "score": score if math.isfinite(score) else math.inf})
        table = pd.DataFrame(rows)
        table["best"] = False
        for label, group in table.groupby("optimizer", sort=False):
            best = group["score"].idxmin()
            table.loc[best, "best"] = True
            self.set_hypers(label, {"learning_rate": float(table.loc[best, "learning_rate"])})
        return table


def trajectories_frame(labels: Sequence[str], path: np.ndarray, loss: np.ndarray) -> pd.DataFrame:
    """Long table (optimizer, step, x, y, loss) from arrays [steps + 1, racers, (2)]."""
    steps = path.shape[0]
    return pd.DataFrame({
        "optimizer": np.repeat(np.asarray(labels, dtype=object), steps),
        "step": np.tile(np.arange(steps), len(labels)),
        "x": path[:, :, 0].T.ravel().astype(np.float64),
        "y": path[:, :, 1].T.ravel().astype(np.float64),
        "loss": loss.T.ravel().astype(np.float64),
    })


__all__ = ["FUNCTIONS", "LandscapeRunner", "Racer", "TestFunction", "TUNE_GRID", "get_function",
           "grid", "landscape_lr", "trajectories_frame"]
