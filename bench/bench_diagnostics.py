"""Benchmark: the cost of each training-dynamics diagnostic per step, against the plain step.

    PYTHONPATH=. python bench/bench_diagnostics.py [--rounds N] [--optimizer adam]

On the default model (digits MLP 64-256-256-10, batch 128, float32, graph mode), in one process
and side by side (rounds; the order of the measurements rotates every round):

* plain step: the engine's compiled train step recording statistics (the recorded steps of a
  run: the level the update ratio rides on), ms per step, median of `STEPS` steps;
* update ratio: `Diagnostics.update_ratio_rows` (one compiled norm per variable plus the rows),
  paid on every recorded step;
* sharpness: `Diagnostics.sharpness_rows` (Lanczos, `ITERATIONS` Hessian-vector products on the
  fixed sharpness batch; with Adam also P^-1 H: twice that);
* noise scale: `Diagnostics.noise_rows` (`EXAMPLES` per-example gradients).

Printed per diagnostic: ms per call, the ratio call / plain step, and the K (steps between
calls) that keeps the amortised cost <= 10 % of the plain step: K >= ratio / 0.10.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEPS = 200
BUDGET = 0.10  # the lab's target: a diagnostic costs at most 10 % of the step time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--optimizer", default="adam")
    args = parser.parse_args()

    import math

    from engine.diagnostics.recorder import Diagnostics
    from engine.train_step import Engine
    from settings.run_config import RunConfig

    config = RunConfig(optimizer=args.optimizer, sharpness="on", noise_scale="on")
    engine = Engine(config, "/CPU:0")
    diagnostics = Diagnostics(engine)
    stats = engine.step(record=True)[1].numpy()  # every level's first call before timing
    engine.step(record=False)
    diagnostics.update_ratio_rows(1, stats)
    diagnostics.sharpness_rows(1)
    diagnostics.noise_rows(1)

    def plain() -> float:
        began = time.perf_counter()
        for _ in range(STEPS):
            out = engine.step(record=True)
        out[0].numpy()
        return (time.perf_counter() - began) / STEPS

    def timed(call, repeats: int) -> float:
        began = time.perf_counter()
        for _ in range(repeats):
            call()
        return (time.perf_counter() - began) / repeats

    measures = {
        "plain step": plain,
        "update ratio": lambda: timed(lambda: diagnostics.update_ratio_rows(2, stats), 50),
        "sharpness": lambda: timed(lambda: diagnostics.sharpness_rows(2), 1),
        "noise scale": lambda: timed(lambda: diagnostics.noise_rows(2), 5),
    }
    results: dict[str, list[float]] = {name: [] for name in measures}
    ratios: dict[str, list[float]] = {name: [] for name in measures}
    names = list(measures)
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        seconds = {name: measures[name]() for name in order}
        for name in names:
            results[name].append(seconds[name])
            ratios[name].append(seconds[name] / seconds["plain step"])
    print(f"digits MLP, batch 128, {args.optimizer}, {args.rounds} rounds (median):")
    for name in names:
        ms = 1e3 * statistics.median(results[name])
        ratio = statistics.median(ratios[name])
        k = "" if name == "plain step" else f"  K for <= 10 %: {math.ceil(ratio / BUDGET)}"
        print(f"  {name:13s} {ms:9.2f} ms/call  {ratio:8.2f}x plain step{k}")


if __name__ == "__main__":
    main()
