"""Cost of the learning-rate range test and of the landscape along the path, side by side with
the plain train step they are measured against.

Not a test. On the Train page's default model (digits MLP 64-256-256-10, Adam, batch 128,
float32), interleaved so that machine load hits every measurement alike, medians of `--repeats`:

* plain step: `Engine.step(record=False)` (the run loop's step between records);
* sweep step: one step of the range test's copy (`engine.lr_range_sweep.state_functions`,
  a `_set_hyper` assign and the step), and the whole default sweep (copy + 200 steps);
* path point: one projection + the loss at the real weights (`PathLandscape.path_row`), and its
  share per step in a 10,000-step run (one point every `path_every(10_000)` = 20 steps);
* grid row: 21 losses of the 21x21 grid (one per step over the run's first 21 steps);
* line: the 25 losses of the start->end interpolation (at each quarter of the run).

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=. python bench/bench_lr_range.py [--repeats 30]

The numbers shown in the pages' cost meters are `engine.diagnostic_costs.MEASURED`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
from engine import lr_range, lr_range_sweep
from engine.path_landscape import PathLandscape
from engine.train_step import Engine
from runs.process.landscape_hook import path_every
from settings.run_config import RunConfig


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    config = RunConfig(optimizer="adam", dataset="digits", model="mlp", batch_size=128)
    engine = Engine(config, "/CPU:0")
    for _ in range(5):
        engine.step(False)
    state = lr_range_sweep.copy_of_engine(engine)
    train_step, _, set_rate = lr_range_sweep.state_functions(state)
    set_rate(1e-4)
    train_step()
    landscape = PathLandscape(engine.model, config.model, engine.dataset, config.seed,
                              config.dtype, engine.x_train, engine.y_train, 1)
    landscape.path_row(0)
    plain, sweep, path, grid, line = [], [], [], [], []
    for _ in range(args.repeats):
        plain.append(timed(lambda: engine.step(False)))
        sweep.append(timed(lambda: (set_rate(1e-4), train_step())))
        path.append(timed(lambda: landscape.path_row(1)))
        landscape.pending = [(0, 0)] * landscape.points
        grid.append(timed(lambda: landscape.grid_rows(landscape.points)))
        if len(line) < 5:
            line.append(timed(lambda: landscape.line_rows(1)))
    whole = timed(lambda: lr_range_sweep.sweep(
        *lr_range_sweep.state_functions(lr_range_sweep.copy_of_engine(engine)),
        lr_range.rates(1e-5, 1e-4, lr_range.STEPS)))  # small rates: all 200 steps run
    step = statistics.median(plain)
    every = path_every(10_000)
    rows = [
        ("plain train step", step, 1.0),
        ("range-test step", statistics.median(sweep), statistics.median(sweep) / step),
        ("range test, 200 steps (+ copy)", whole, whole / step),
        ("path point", statistics.median(path), statistics.median(path) / step),
        (f"path point per step (1 in {every})", statistics.median(path) / every,
         statistics.median(path) / every / step),
        ("grid row (21 losses)", statistics.median(grid), statistics.median(grid) / step),
        ("line (25 losses)", statistics.median(line), statistics.median(line) / step),
    ]
    print(f"{'what':<36} {'ms':>9} {'x plain step':>13}")
    for name, seconds, ratio in rows:
        print(f"{name:<36} {seconds * 1e3:9.2f} {ratio:13.2f}")


if __name__ == "__main__":
    main()
