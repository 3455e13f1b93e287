"""Step-time benchmark: the lab's optimizers (fused path and pure rule) vs the Keras built-ins.

Not a test. For each case, builds three identical MLPs (64-256-256-10, float32), trained by the
lab's class on its fused path (`fused=True`, the default: Keras's kernels where the configuration
has one), by the lab's class on its pure rule (`fused=False`) and by the Keras reference, and
times their `tf.function` train steps interleaved (the order rotating every round) on the same
random batch of 128, so machine noise hits all three alike.
Every case runs with schedule+decay off (float learning rate) and on (an `ExponentialDecay`
learning rate plus the legacy `decay=1e-4` where the reference accepts it), in graph mode
(`tf.function`, no XLA) and with `jit_compile=True` (XLA) for both. One table is printed: median
step time of each (ms), the medians of the per-round ratios fused/keras and pure/keras (wall
time) and fused/keras in process CPU time (robust when other processes load the machine). Targets:
<= 1.05 graph, <= 1.02 XLA.

References: `tf_keras.optimizers.legacy.*` (fused `ResourceApply*` kernels) for SGD, Adam,
RMSprop, Adagrad; AdamW vs `tf_keras.optimizers.AdamW` (the non-legacy Keras 2 optimizer,
`jit_compile=False`; it takes no `decay`, so "on" is the schedule only, for both); DiffGrad vs
legacy Adam (it does Adam's work plus a sigmoid friction and a third slot, so its ratio is
informative, not a target); "adam eps const" is the lab's Adam with epsilon a constant of the
traced step (Keras 2's plain float) instead of a `_set_hyper` variable: its ratio beside
"adam"'s is the live epsilon's cost. Adadelta, Adamax, Ftrl and Nadam against their legacy
namesakes; Lion, Lamb, Adafactor, Muon and ScheduleFreeAdamW ("k3") against the Keras 3
`keras.optimizers` built-ins (no fused kernel exists for them: fused = pure); in these rows
all three contestants train a Keras 3 MLP of the same shape and start, the lab's optimizers
updating the `tf.Variable`s behind its variables, so only the optimizers differ. Each mode
starts with a control row, "keras x3": the legacy Keras Adam in all three places, whose ratios
show the bench's own noise floor on this machine (measured here: 0.97-1.04 graph, 0.99-1.01
XLA).

    PYTHONPATH=. python bench/bench_optimizers.py [--quick] [--only adam,sgd] [--modes graph,xla]
"""

from __future__ import annotations

import argparse
import statistics
import time

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import keras
import numpy as np
import tensorflow as tf
import tf_keras

from optimizers.adadelta import Adadelta
from optimizers.adafactor import Adafactor
from optimizers.adagrad import Adagrad
from optimizers.adam import Adam
from optimizers.adamax import Adamax
from optimizers.adamw import AdamW
from optimizers.diffgrad import DiffGrad
from optimizers.ftrl import Ftrl
from optimizers.lamb import Lamb
from optimizers.lion import Lion
from optimizers.muon import Muon
from optimizers.nadam import Nadam
from optimizers.rmsprop import RMSprop
from optimizers.schedule_free import ScheduleFreeAdamW
from optimizers.sgd import SGD

LEGACY = tf_keras.optimizers.legacy


def _lr(on: bool, value: float):
    if not on:
        return value
    return tf_keras.optimizers.schedules.ExponentialDecay(value, decay_steps=100, decay_rate=0.9)


def _decay(on: bool) -> dict:
    return {"decay": 1e-4} if on else {}


def _lr3(on: bool, value: float):
    """A Keras 3 reference's learning rate: Keras 3's own ExponentialDecay when `on` (Keras 3
    optimizers take no legacy `decay`, so "on" is the schedule only, for both)."""
    if not on:
        return value
    return keras.optimizers.schedules.ExponentialDecay(value, decay_steps=100, decay_rate=0.9)


class AdamBakedEpsilon(Adam):
    """The lab's Adam with epsilon a constant of the traced step (Keras 2's plain float), not
    a `_set_hyper` variable: the bench's measure of what the live epsilon costs."""

    def hyper_tensors(self, dtype):
        hypers = super().hyper_tensors(dtype)
        hypers["epsilon"] = tf.constant(1e-7, dtype)
        return hypers


# label -> (ours(on, fused), reference(on)); `on` = schedule + decay
CASES = {
    "sgd": (lambda on, f: SGD(_lr(on, 0.01), **_decay(on), fused=f),
            lambda on: LEGACY.SGD(_lr(on, 0.01), **_decay(on))),
    "sgd m=0.9": (lambda on, f: SGD(_lr(on, 0.01), momentum=0.9, **_decay(on), fused=f),
                  lambda on: LEGACY.SGD(_lr(on, 0.01), momentum=0.9, **_decay(on))),
    "sgd nesterov": (lambda on, f: SGD(_lr(on, 0.01), 0.9, nesterov=True, **_decay(on), fused=f),
                     lambda on: LEGACY.SGD(_lr(on, 0.01), 0.9, nesterov=True, **_decay(on))),
    "adam": (lambda on, f: Adam(_lr(on, 1e-3), **_decay(on), fused=f),
             lambda on: LEGACY.Adam(_lr(on, 1e-3), **_decay(on))),
    "amsgrad": (lambda on, f: Adam(_lr(on, 1e-3), amsgrad=True, **_decay(on), fused=f),
                lambda on: LEGACY.Adam(_lr(on, 1e-3), amsgrad=True, **_decay(on))),
    "rmsprop": (lambda on, f: RMSprop(_lr(on, 1e-3), **_decay(on), fused=f),
                lambda on: LEGACY.RMSprop(_lr(on, 1e-3), **_decay(on))),
    "rmsprop ctr": (lambda on, f: RMSprop(_lr(on, 1e-3), centered=True, **_decay(on), fused=f),
                    lambda on: LEGACY.RMSprop(_lr(on, 1e-3), centered=True, **_decay(on))),
    "rmsprop m=0.9": (lambda on, f: RMSprop(_lr(on, 1e-3), momentum=0.9, **_decay(on), fused=f),
                      lambda on: LEGACY.RMSprop(_lr(on, 1e-3), momentum=0.9, **_decay(on))),
    "rmsprop ctr m": (
        lambda on, f: RMSprop(_lr(on, 1e-3), momentum=0.9, centered=True, **_decay(on), fused=f),
        lambda on: LEGACY.RMSprop(_lr(on, 1e-3), momentum=0.9, centered=True, **_decay(on))),
    "adagrad": (lambda on, f: Adagrad(_lr(on, 1e-3), **_decay(on), fused=f),
                lambda on: LEGACY.Adagrad(_lr(on, 1e-3), **_decay(on))),
    "adamw*": (lambda on, f: AdamW(_lr(on, 1e-3), fused=f),
               lambda on: tf_keras.optimizers.AdamW(_lr(on, 1e-3), jit_compile=False)),
    "diffgrad~adam": (lambda on, f: DiffGrad(_lr(on, 1e-3), **_decay(on), fused=f),
                      lambda on: LEGACY.Adam(_lr(on, 1e-3), **_decay(on))),
    "adam eps const": (lambda on, f: AdamBakedEpsilon(_lr(on, 1e-3), **_decay(on), fused=f),
                       lambda on: LEGACY.Adam(_lr(on, 1e-3), **_decay(on))),
    "adadelta": (lambda on, f: Adadelta(_lr(on, 1.0), **_decay(on), fused=f),
                 lambda on: LEGACY.Adadelta(_lr(on, 1.0), **_decay(on))),
    "adamax": (lambda on, f: Adamax(_lr(on, 1e-3), **_decay(on), fused=f),
               lambda on: LEGACY.Adamax(_lr(on, 1e-3), **_decay(on))),
    "ftrl": (lambda on, f: Ftrl(_lr(on, 1e-3), **_decay(on), fused=f),
             lambda on: LEGACY.Ftrl(_lr(on, 1e-3), **_decay(on))),
    # Keras 2's Nadam refuses a schedule: "on" is the legacy decay only, for both
    "nadam": (lambda on, f: Nadam(1e-3, **_decay(on), fused=f),
              lambda on: LEGACY.Nadam(1e-3, **_decay(on))),
    # Keras 3's algorithms: the reference is the keras.optimizers built-in on a Keras 3 MLP of
    # the same shape and start (`keras3_mlp`); no fused kernel exists, so fused = pure
    "lion k3": (lambda on, f: Lion(_lr(on, 1e-4), fused=f),
                lambda on: keras.optimizers.Lion(_lr3(on, 1e-4))),
    "lamb k3": (lambda on, f: Lamb(_lr(on, 1e-3), fused=f),
                lambda on: keras.optimizers.Lamb(_lr3(on, 1e-3))),
    "adafactor k3": (lambda on, f: Adafactor(_lr(on, 1e-3), fused=f),
                     lambda on: keras.optimizers.Adafactor(_lr3(on, 1e-3))),
    "muon k3": (lambda on, f: Muon(_lr(on, 1e-3), fused=f),
                lambda on: keras.optimizers.Muon(_lr3(on, 1e-3))),
    "sf-adamw k3": (lambda on, f: ScheduleFreeAdamW(_lr(on, 2.5e-3), keras3_tf_compat=True,
                                                     fused=f),
                    lambda on: keras.optimizers.ScheduleFreeAdamW(_lr3(on, 2.5e-3))),
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


def keras3_mlp(seed: int):
    """`mlp(seed)` as a Keras 3 model: same layers, same starting weights."""
    model = keras.Sequential([keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.build((None, 64))
    model.set_weights(mlp(seed).get_weights())
    return model


def make_step(model, opt, jit: bool):
    """A `tf.function` train step of `model` by `opt`. On a Keras 3 model the tape watches the
    `tf.Variable`s behind its variables, and a lab (OptimizerV2) optimizer updates those
    `tf.Variable`s directly, so the lab and Keras 3 contestants run the same model code."""
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras3_model = isinstance(model, keras.Model)
    watched = ([v.value for v in model.trainable_variables] if keras3_model
               else model.trainable_variables)
    updated = (model.trainable_variables if isinstance(opt, keras.optimizers.Optimizer)
               else watched)

    @tf.function(jit_compile=jit)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, watched)
        opt.apply_gradients(zip(grads, updated))
        return loss

    return step


def timed(step, x, y) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one step."""
    start, start_cpu = time.perf_counter(), time.process_time()
    step(x, y).numpy()  # .numpy() waits for the step to finish
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench(fused_opt, pure_opt, keras_opt, jit: bool, warmup: int, rounds: int
          ) -> dict[str, float]:
    """`rounds` interleaved triples of steps after `warmup` (the order rotates every round, so
    each contestant goes first, second and third equally often): median wall seconds of the
    fused lab step, the pure-rule lab step and the Keras step, and the medians of the per-round
    ratios fused/keras and pure/keras, in wall time and in process CPU time. Per-round ratios
    are what survives a loaded machine: the three steps of a round see the same load; CPU time
    does not count the time spent waiting for a core."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(128, 64)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, size=128))
    # a Keras 3 reference: all three train the Keras 3 MLP (its forward and backward pass is
    # not tf_keras's), so the ratios compare the optimizers alone
    make_model = keras3_mlp if isinstance(keras_opt, keras.optimizers.Optimizer) else mlp
    steps = [make_step(make_model(0), opt, jit) for opt in (fused_opt, pure_opt, keras_opt)]
    for _ in range(warmup):
        for step in steps:
            timed(step, x, y)
    times: list[list[tuple[float, float]]] = [[], [], []]
    for i in range(rounds):
        order = [(i + k) % 3 for k in range(3)]
        for k in order:
            times[k].append(timed(steps[k], x, y))
    fused, pure, stock = times
    med = statistics.median
    return {
        "fused": med(t[0] for t in fused), "pure": med(t[0] for t in pure),
        "keras": med(t[0] for t in stock),
        "fused/keras": med(f[0] / k[0] for f, k in zip(fused, stock)),
        "pure/keras": med(p[0] / k[0] for p, k in zip(pure, stock)),
        "fused/keras cpu": med(f[1] / max(k[1], 1e-9) for f, k in zip(fused, stock)),
        "pure/keras cpu": med(p[1] / max(k[1], 1e-9) for p, k in zip(pure, stock)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--only", default="", help="comma-separated case labels (default: all)")
    parser.add_argument("--modes", default="graph,xla", help="graph, xla or both")
    args = parser.parse_args()
    warmup, rounds = (10, 60) if args.quick else (30, 300)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    cases = {k: v for k, v in CASES.items() if not only or k in only}
    print(f"MLP 64-256-256-10, batch 128, float32, median of {rounds} interleaved rounds; "
          "targets fused/keras <= 1.05 graph, <= 1.02 xla; pure = the rule without kernels "
          "(fused=False)")
    print(f"{'optimizer':14s} {'sched+decay':11s} {'mode':5s} {'fused ms':>8s} {'pure ms':>8s} "
          f"{'keras ms':>8s} {'fused/keras':>11s} {'pure/keras':>10s} {'(cpu f/k)':>9s}")
    for mode in [m.strip() for m in args.modes.split(",")]:
        control = bench(LEGACY.Adam(1e-3), LEGACY.Adam(1e-3), LEGACY.Adam(1e-3), mode == "xla",
                        warmup, rounds)
        print(f"{'keras x3':14s} {'(control)':11s} {mode:5s} {control['fused'] * 1e3:8.3f} "
              f"{control['pure'] * 1e3:8.3f} {control['keras'] * 1e3:8.3f} "
              f"{control['fused/keras']:10.3f}x {control['pure/keras']:9.3f}x "
              f"{control['fused/keras cpu']:8.3f}x  (noise floor)", flush=True)
        for label, (make_ours, make_keras) in cases.items():
            for on in (False, True):
                row = f"{label:14s} {('on' if on else 'off'):11s} {mode:5s}"
                try:
                    r = bench(make_ours(on, True), make_ours(on, False), make_keras(on),
                              mode == "xla", warmup, rounds)
                except tf.errors.InvalidArgumentError:  # a Keras kernel XLA cannot compile
                    r = bench(make_ours(on, True), make_ours(on, False), make_ours(on, False),
                              True, warmup, rounds)
                    print(f"{row} {r['fused'] * 1e3:8.3f} {r['pure'] * 1e3:8.3f} {'n/a':>8s} "
                          f"{'n/a':>11s} {'n/a':>10s}  (the Keras kernel has no XLA lowering)",
                          flush=True)
                    continue
                print(f"{row} {r['fused'] * 1e3:8.3f} {r['pure'] * 1e3:8.3f} "
                      f"{r['keras'] * 1e3:8.3f} {r['fused/keras']:10.3f}x "
                      f"{r['pure/keras']:9.3f}x {r['fused/keras cpu']:8.3f}x", flush=True)


if __name__ == "__main__":
    main()
