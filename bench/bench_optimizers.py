"""Step-time benchmark: the lab's pure-rule optimizers vs the Keras built-ins they replace.

Not a test. For each case, builds two identical MLPs (64-256-256-10, float32), one trained by the
lab's class and one by its Keras reference, and times their `tf.function` train steps interleaved
(ours, keras, keras, ours, ...) on the same random batch of 128, so machine noise hits both alike.
Every case runs with schedule+decay off (float learning rate) and on (an `ExponentialDecay`
learning rate plus the legacy `decay=1e-4` where the reference accepts it), in graph mode
(`tf.function`, no XLA) and with `jit_compile=True` (XLA) for both. One table is printed: median
step time of each (ms), the median of the per-pair ratios ours/keras (wall time) and the same
for process CPU time (robust when other processes load the machine). Targets (issue 12):
<= 1.05 graph, <= 1.00 XLA.

References: `tf_keras.optimizers.legacy.*` (fused `ResourceApply*` kernels) for SGD, Adam,
RMSprop, Adagrad; AdamW vs `tf_keras.optimizers.AdamW` (the non-legacy Keras 2 optimizer,
`jit_compile=False`; it takes no `decay`, so "on" is the schedule only, for both); DiffGrad vs
legacy Adam (it does Adam's work plus a sigmoid friction and a third slot, so its ratio is
informative, not a target).

    PYTHONPATH=. python bench/bench_optimizers.py [--quick] [--only adam,sgd] [--modes graph,xla]
"""

from __future__ import annotations

import argparse
import statistics
import time

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import numpy as np
import tensorflow as tf
import tf_keras

from optimizers.adagrad import Adagrad
from optimizers.adam import Adam
from optimizers.adamw import AdamW
from optimizers.diffgrad import DiffGrad
from optimizers.rmsprop import RMSprop
from optimizers.sgd import SGD

LEGACY = tf_keras.optimizers.legacy


def _lr(on: bool, value: float):
    if not on:
        return value
    return tf_keras.optimizers.schedules.ExponentialDecay(value, decay_steps=100, decay_rate=0.9)


def _decay(on: bool) -> dict:
    return {"decay": 1e-4} if on else {}


# label -> (ours(on), reference(on)); `on` = schedule + decay
CASES = {
    "sgd": (lambda on: SGD(_lr(on, 0.01), **_decay(on)),
            lambda on: LEGACY.SGD(_lr(on, 0.01), **_decay(on))),
    "sgd m=0.9": (lambda on: SGD(_lr(on, 0.01), momentum=0.9, **_decay(on)),
                  lambda on: LEGACY.SGD(_lr(on, 0.01), momentum=0.9, **_decay(on))),
    "sgd nesterov": (lambda on: SGD(_lr(on, 0.01), 0.9, nesterov=True, **_decay(on)),
                     lambda on: LEGACY.SGD(_lr(on, 0.01), 0.9, nesterov=True, **_decay(on))),
    "adam": (lambda on: Adam(_lr(on, 1e-3), **_decay(on)),
             lambda on: LEGACY.Adam(_lr(on, 1e-3), **_decay(on))),
    "amsgrad": (lambda on: Adam(_lr(on, 1e-3), amsgrad=True, **_decay(on)),
                lambda on: LEGACY.Adam(_lr(on, 1e-3), amsgrad=True, **_decay(on))),
    "rmsprop": (lambda on: RMSprop(_lr(on, 1e-3), **_decay(on)),
                lambda on: LEGACY.RMSprop(_lr(on, 1e-3), **_decay(on))),
    "rmsprop ctr": (lambda on: RMSprop(_lr(on, 1e-3), centered=True, **_decay(on)),
                    lambda on: LEGACY.RMSprop(_lr(on, 1e-3), centered=True, **_decay(on))),
    "rmsprop m=0.9": (lambda on: RMSprop(_lr(on, 1e-3), momentum=0.9, **_decay(on)),
                      lambda on: LEGACY.RMSprop(_lr(on, 1e-3), momentum=0.9, **_decay(on))),
    "rmsprop ctr m": (
        lambda on: RMSprop(_lr(on, 1e-3), momentum=0.9, centered=True, **_decay(on)),
        lambda on: LEGACY.RMSprop(_lr(on, 1e-3), momentum=0.9, centered=True, **_decay(on))),
    "adagrad": (lambda on: Adagrad(_lr(on, 1e-3), **_decay(on)),
                lambda on: LEGACY.Adagrad(_lr(on, 1e-3), **_decay(on))),
    "adamw*": (lambda on: AdamW(_lr(on, 1e-3)),
               lambda on: tf_keras.optimizers.AdamW(_lr(on, 1e-3), jit_compile=False)),
    "diffgrad~adam": (lambda on: DiffGrad(_lr(on, 1e-3), **_decay(on)),
                      lambda on: LEGACY.Adam(_lr(on, 1e-3), **_decay(on))),
}


def mlp(seed: int) -> tf_keras.Model:
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([
        tf_keras.layers.Dense(256, activation="relu"),
        tf_keras.layers.Dense(256, activation="relu"),
        tf_keras.layers.Dense(10),
    ])
    model.build((None, 64))
    return model


def make_step(model, opt, jit: bool):
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=jit)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def timed(step, x, y) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one step."""
    start, start_cpu = time.perf_counter(), time.process_time()
    step(x, y).numpy()  # .numpy() waits for the step to finish
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench(ours_opt, keras_opt, jit: bool, warmup: int, rounds: int) -> tuple[float, ...]:
    """`rounds` interleaved pairs of steps after `warmup`: (median wall seconds of ours, of
    keras, median of the per-pair wall ratios ours/keras, median of the per-pair CPU-time
    ratios). Per-pair ratios are what survives a loaded machine: both steps of a pair see the
    same load; CPU time does not count the time spent waiting for a core."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(128, 64)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, size=128))
    ours = make_step(mlp(0), ours_opt, jit)
    keras = make_step(mlp(0), keras_opt, jit)
    for _ in range(warmup):
        timed(ours, x, y), timed(keras, x, y)
    times_ours, times_keras = [], []
    for i in range(rounds):
        pair = (ours, times_ours), (keras, times_keras)
        for step, sink in (pair if i % 2 == 0 else pair[::-1]):  # alternate who goes first
            sink.append(timed(step, x, y))
    wall = [(o[0], k[0]) for o, k in zip(times_ours, times_keras)]
    cpu = [(o[1], k[1]) for o, k in zip(times_ours, times_keras)]
    return (statistics.median(o for o, _ in wall), statistics.median(k for _, k in wall),
            statistics.median(o / k for o, k in wall),
            statistics.median(o / max(k, 1e-9) for o, k in cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--only", default="", help="comma-separated case labels (default: all)")
    parser.add_argument("--modes", default="graph,xla", help="graph, xla or both")
    args = parser.parse_args()
    warmup, rounds = (10, 60) if args.quick else (30, 300)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    cases = {k: v for k, v in CASES.items() if not only or k in only}
    print(f"MLP 64-256-256-10, batch 128, float32, median of {rounds} interleaved steps; "
          "targets <= 1.05 graph, <= 1.00 xla")
    print(f"{'optimizer':14s} {'sched+decay':11s} {'mode':5s} {'ours ms':>8s} {'keras ms':>9s} "
          f"{'ours/keras':>10s} {'cpu ratio':>9s}")
    for mode in [m.strip() for m in args.modes.split(",")]:
        for label, (make_ours, make_keras) in cases.items():
            for on in (False, True):
                row = f"{label:14s} {('on' if on else 'off'):11s} {mode:5s}"
                try:
                    ours, keras, ratio, cpu_ratio = bench(
                        make_ours(on), make_keras(on), mode == "xla", warmup, rounds)
                except tf.errors.InvalidArgumentError:  # a fused kernel XLA cannot compile
                    ours = bench(make_ours(on), make_ours(on), True, warmup, rounds)[0]
                    print(f"{row} {ours * 1e3:8.3f} {'n/a':>9s} {'n/a':>10s}  "
                          "(the Keras kernel has no XLA lowering)", flush=True)
                    continue
                print(f"{row} {ours * 1e3:8.3f} {keras * 1e3:9.3f} {ratio:9.3f}x "
                      f"{cpu_ratio:8.3f}x", flush=True)


if __name__ == "__main__":
    main()
