"""What one more resource variable costs an XLA-compiled train step: the price of a live
hyperparameter (`_set_hyper`) or of a per-variable scalar state that Keras keeps as a constant.

    PYTHONPATH=. python bench/bench_variable_cost.py [--rounds 300] [--extra 0,8,16,32]

Not a test. The bench's train step (`bench_optimizers.make_step`'s MLP 64-256-256-10, batch 128,
float32, legacy Keras Adam, `jit_compile=True`) also reads K extra scalar `tf.Variable`s (their
sum enters the gradients multiplied by 0.0, which XLA does not fold away: 0 * inf is NaN), and,
in the second table, writes each back (`assign`), as a per-variable rule state is. The K steps
run interleaved, the order rotating every round, so machine load hits all of them alike. Prints
the median step time per K (microseconds) and the cost per extra variable against K = 0.

Why: `bench_optimizers` puts a few of the lab's optimizers 2-4 % above their Keras namesakes
under XLA on this 1.4-1.9 ms step, with the same fusions in the optimized HLO and only more
entry parameters: the live hyperparameters Keras 3 bakes in as Python floats (ScheduleFreeAdamW
4, Adafactor 4), Nadam's momentum cache kept per variable in the rule's state (6 scalars read and
written, where Keras 2 keeps one non-slot variable), Adafactor's scalar placeholder slots of 1-D
variables (6 reads). Each variable passed to the compiled step is looked up, locked and read by
the XLA launch whatever the step does with it; this bench measures that per variable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import lab_env  # noqa: E402,F401  (Keras 2 before TensorFlow loads)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bench_optimizers import mlp  # noqa: E402


def make_step(extra: int, write: bool):
    """An XLA train step of a fresh MLP by legacy Adam that also reads `extra` scalar variables
    (and assigns each when `write`)."""
    model, opt = mlp(0), tf_keras.optimizers.legacy.Adam(1e-3)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    scalars = [tf.Variable(1.0 + i, dtype=tf.float32) for i in range(extra)]

    @tf.function(jit_compile=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        total = tf.constant(0.0)
        for scalar in scalars:
            total += scalar.read_value()
            if write:
                scalar.assign(scalar * 1.0000001)
        grads = [g * (1.0 + 0.0 * total) for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def measure(extras: list[int], write: bool, warmup: int, rounds: int) -> dict[int, float]:
    """Median wall seconds of one step per number of extra variables, interleaved."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(128, 64)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, size=128))
    steps = [make_step(k, write) for k in extras]
    for step in steps:
        for _ in range(warmup):
            step(x, y).numpy()
    times: list[list[float]] = [[] for _ in extras]
    for r in range(rounds):
        for i in range(len(extras)):
            k = (r + i) % len(extras)
            start = time.perf_counter()
            steps[k](x, y).numpy()  # .numpy() waits for the step to finish
            times[k].append(time.perf_counter() - start)
    return {extra: statistics.median(t) for extra, t in zip(extras, times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--extra", default="0,8,16,32",
                        help="comma-separated numbers of extra variables; 0 is the baseline")
    args = parser.parse_args()
    extras = sorted({int(k) for k in args.extra.split(",")} | {0})
    print(f"XLA train step, MLP 64-256-256-10, batch 128, legacy Adam; median of {args.rounds} "
          "interleaved rounds")
    for write in (False, True):
        medians = measure(extras, write, warmup=30, rounds=args.rounds)
        base = medians[0]
        what = "read and assigned" if write else "read"
        print(f"extra scalar variables {what}:")
        for extra, median in medians.items():
            per = f"{(median - base) * 1e6 / extra:6.2f} us per variable" if extra else "baseline"
            print(f"  {extra:3d}  {median * 1e6:8.0f} us  {median / base:6.3f}x  {per}",
                  flush=True)


if __name__ == "__main__":
    main()
