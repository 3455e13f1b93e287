"""Which default setup keeps optimizers visibly different for minutes?

Trains each optimizer (its Train-page defaults) on each candidate setup with the lab's engine
and prints the validation loss and accuracy at 100 / 1,000 / 3,000 / `--steps` steps, and per
setup the spread between optimizers (max - min validation loss, and that spread relative to
the worst), so the choice of the Train page's default is a measurement:

* `digits` (clean): the previous default;
* `digits, label_noise 0.3`: 30% of the training labels wrong (validation clean);
* `digits cnn`: the convolutional model.

    PYTHONPATH=. python bench/bench_default_setup.py [--steps 8000] [--optimizers adam,sgd,...]

Not a test; numbers of one seed (0). Takes a few minutes (about 2-3 ms per step here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lab_env  # noqa: E402,F401  (Keras 2 before TensorFlow loads)

from engine.train_step import Engine  # noqa: E402
from settings.run_config import RunConfig  # noqa: E402

SETUPS = {
    "digits mlp (clean)": {"dataset": "digits", "model": "mlp"},
    "digits mlp, label noise 0.3": {"dataset": "digits", "model": "mlp", "label_noise": 0.3},
    "digits cnn (clean)": {"dataset": "digits", "model": "cnn"},
}


def curve(optimizer: str, setup: dict, steps: int, marks: list[int]) -> dict[int, tuple]:
    """{step: (val loss, val accuracy)} at `marks` for one run."""
    engine = Engine(RunConfig(optimizer=optimizer, steps=steps, **setup), "/device:CPU:0")
    out = {}
    for step in range(1, steps + 1):
        engine.step(record=False)
        if step in marks:
            out[step] = engine.evaluate()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--optimizers", default="adam,rmsprop,adagrad,sgd")
    args = parser.parse_args()
    marks = sorted({100, 1000, 3000, args.steps} & set(range(1, args.steps + 1)))
    optimizers = args.optimizers.split(",")
    for label, setup in SETUPS.items():
        print(f"\n{label}: validation loss / accuracy")
        print(f"{'optimizer':10s}" + "".join(f"{f'step {m}':>18s}" for m in marks))
        table = {}
        for name in optimizers:
            table[name] = curve(name, setup, args.steps, marks)
            print(f"{name:10s}" + "".join(f"{table[name][m][0]:9.3f} / {table[name][m][1]:5.3f}"
                                          for m in marks), flush=True)
        spread = []
        for m in marks:
            losses = [table[n][m][0] for n in optimizers]
            spread.append(f"{max(losses) - min(losses):9.3f} ({(max(losses) - min(losses)) / max(losses):4.2f})")
        print(f"{'spread':10s}" + "".join(f"{s:>18s}" for s in spread))


if __name__ == "__main__":
    main()
