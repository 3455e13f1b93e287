"""Parity tables for the closing note (prints markdown). Not a test: it measures and prints.

1. Keras 2 (the lab's `RuleOptimizer`) vs its Keras 3 twin (`RuleTwin`): optimizer x dtype
   (float32, float64) x gradient kind (dense kernel/bias, sparse `IndexedSlices` of an embedding)
   -> max |Keras 2 - Keras 3| over the weights and every slot after 20 steps on the same batches
   (`teaching.migration.parity_of`; the tests assert float32 <= 1e-6, float64 <= 1e-12).
2. The twin vs the Keras 3 built-in of the same algorithm (SGD, Adam, RMSprop, Adagrad, AdamW),
   weights only (the built-ins name their slots differently), same problem and batches. These
   differences are conventions, not bugs: see the notes column.
3. The lab's classes of Keras 3's newer algorithms vs `keras.optimizers` (`teaching.keras3_parity`).
4. The conventions of `teaching.conventions`: max |w - w_first convention| after N steps.

    PYTHONPATH=. python bench/parity_tables.py [--steps 20] [--convention-steps 20,200,1000]
"""

from __future__ import annotations

import argparse

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import keras
import numpy as np
import tensorflow as tf

from optimizers import registry
from optimizers.keras3_twin import RuleTwin
from teaching import conventions, keras3_parity, migration, plugin_migration

DTYPES = (tf.float32, tf.float64)
CASES = [  # (label, registry name, hyperparameters, options)
    ("sgd", "sgd", {"learning_rate": 0.05}, {}),
    ("sgd momentum nesterov", "sgd", {"learning_rate": 0.05, "momentum": 0.9}, {"nesterov": True}),
    ("adam", "adam", {"learning_rate": 0.01}, {}),
    ("adam amsgrad", "adam", {"learning_rate": 0.01}, {"amsgrad": True}),
    ("adamw", "adamw", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("rmsprop centered momentum", "rmsprop", {"learning_rate": 0.01, "momentum": 0.5},
     {"centered": True}),
    ("adagrad", "adagrad", {"learning_rate": 0.1}, {}),
    ("diffgrad", "diffgrad", {"learning_rate": 0.01}, {}),
    ("accumulation(adam)", "accumulation", {"learning_rate": 0.01}, {"inner": "adam"}),
    ("lion", "lion", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("lamb", "lamb", {"learning_rate": 0.01, "weight_decay": 0.1}, {}),
    ("adafactor", "adafactor", {"learning_rate": 0.01}, {}),
    ("muon", "muon", {"learning_rate": 0.01}, {}),
    ("schedule_free_adamw", "schedule_free_adamw", {"learning_rate": 0.01}, {}),
]
# (label, lab name, lab hypers, lab options, Keras 3 built-in factory, note)
BUILTINS = [
    ("SGD momentum 0.9", "sgd", {"learning_rate": 0.05, "momentum": 0.9}, {},
     lambda: keras.optimizers.SGD(0.05, momentum=0.9), "same form"),
    ("SGD nesterov", "sgd", {"learning_rate": 0.05, "momentum": 0.9}, {"nesterov": True},
     lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True), "same form"),
    ("Adam", "adam", {"learning_rate": 0.01}, {},
     lambda: keras.optimizers.Adam(0.01), "same epsilon-hat form"),
    ("Adam amsgrad", "adam", {"learning_rate": 0.01}, {"amsgrad": True},
     lambda: keras.optimizers.Adam(0.01, amsgrad=True), "same form"),
    ("RMSprop momentum 0.5", "rmsprop", {"learning_rate": 0.01, "momentum": 0.5}, {},
     lambda: keras.optimizers.RMSprop(0.01, momentum=0.5), "epsilon inside sqrt in both"),
    ("RMSprop no momentum", "rmsprop", {"learning_rate": 0.01}, {},
     lambda: keras.optimizers.RMSprop(0.01), "Keras 2: eps outside sqrt; Keras 3: inside"),
    ("Adagrad", "adagrad", {"learning_rate": 0.1}, {},
     lambda: keras.optimizers.Adagrad(0.1), "Keras 3: g / sqrt(acc + eps); Keras 2: "
                                            "g / (sqrt(acc) + eps)"),
    ("AdamW wd 0.1", "adamw", {"learning_rate": 0.01, "weight_decay": 0.1}, {},
     lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1), "both scale the decay by lr"),
]


def kind_maxima(table) -> dict[str, float]:
    """gradient kind -> largest max_abs_difference over the weights and slots of that kind."""
    return table.groupby("gradient")["max_abs_difference"].max().to_dict()


def twin_table(steps: int) -> list[str]:
    lines = [f"### Keras 2 class vs Keras 3 twin: max |difference| after {steps} steps "
             "(weights and every slot)", "",
             "| optimizer | f32 dense | f32 sparse | f64 dense | f64 sparse |",
             "|---|---|---|---|---|"]
    factories = [(label, lambda n=name, h=hypers, o=options: registry.create(n, h, o))
                 for label, name, hypers, options in CASES]
    adabelief = next((c.cls for c in plugin_migration.plugin_choices()
                      if c.cls.__name__ == "AdaBelief"), None)
    if adabelief is not None:
        factories.append(("adabelief (plugin)", lambda: adabelief(learning_rate=0.01)))
    for label, make in factories:
        cells = []
        for dtype in DTYPES:
            maxima = kind_maxima(migration.parity_of(make, dtype, steps))
            cells += [maxima["dense"], maxima["sparse (IndexedSlices)"]]
        lines.append(f"| {label} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    return lines


def weights_after(opt, dtype: tf.DType, steps: int) -> list[np.ndarray]:
    start, batches, loss = migration.parity_problem(dtype, steps)
    variables = [keras.Variable(v, dtype=dtype.name) for v in start]
    migration.train_steps(opt, variables, [v.value for v in variables], batches, loss)
    return [np.asarray(tf.convert_to_tensor(v)) for v in variables]


def builtin_table(steps: int) -> list[str]:
    lines = [f"### Lab twin vs Keras 3 built-in: max |weight difference| after {steps} steps", "",
             "| algorithm | f32 dense | f32 sparse | f64 dense | f64 sparse | notes |",
             "|---|---|---|---|---|---|"]
    for label, name, hypers, options, builtin, note in BUILTINS:
        cells = []
        for dtype in DTYPES:
            ours = weights_after(RuleTwin(registry.create(name, hypers, options)), dtype, steps)
            theirs = weights_after(builtin(), dtype, steps)
            dense = max(float(np.abs(a - b).max()) for a, b in zip(ours[:2], theirs[:2]))
            cells += [dense, float(np.abs(ours[2] - theirs[2]).max())]
        lines.append(f"| {label} | " + " | ".join(f"{c:.3g}" for c in cells) + f" | {note} |")
    lines += ["", "sparse = the embedding table: the lab (as Keras 2's sparse kernels) updates "
                  "only the touched rows and their slots (lazy); Keras 3's built-ins densify "
                  "the IndexedSlices, so every row's slots decay and every row moves.",
              "float64 dense ~1e-6: the lab keeps every `_set_hyper` value in a float32 "
              "variable (beta_1 = 0.8999999762), as Keras 2 does; Keras 3 casts the Python "
              "float 0.9 to float64."]
    return lines


def keras3_builtin_table(steps: int) -> list[str]:
    lines = [f"### Keras 3's newer algorithms: lab class vs keras.optimizers built-in, {steps} "
             "dense float32 steps", "",
             "| algorithm | max weight diff | max slot diff | <= 1e-6 | note |",
             "|---|---|---|---|---|"]
    for _, r in keras3_parity.table(steps).iterrows():
        lines.append(f"| {r['algorithm']} | {r['max_weight_difference']:.3g} | "
                     f"{r['max_slot_difference']:.3g} | {r['within_1e-6']} | {r['note']} |")
    return lines


def convention_table(steps_list: list[int]) -> list[str]:
    header = " | ".join(f"after {n}" for n in steps_list)
    lines = ["### Conventions: max |w - w(first convention)| over 8 weights (lr 0.01, float64)",
             "", f"| family | convention | {header} |",
             "|---|---|" + "---|" * len(steps_list)]
    for family, members in conventions.FAMILIES.items():
        finals = {}
        for n in steps_list:
            table = conventions.compare(family, steps=n)
            last = table[table["step"] == n].set_index("convention")["max_abs_difference"]
            finals[n] = last
        for member in members[1:]:
            cells = " | ".join(f"{finals[n][member.label]:.3g}" for n in steps_list)
            lines.append(f"| {family} | {member.label} vs {members[0].label} | {cells} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--convention-steps", default="20,200,1000")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps={args.steps} refused: at least 1")
    convention_steps = [int(n) for n in args.convention_steps.split(",")]
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}\n")
    for section in (twin_table(args.steps), builtin_table(args.steps),
                    keras3_builtin_table(args.steps), convention_table(convention_steps)):
        print("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
