"""Small fake runs written through `RunStore.append` (no TensorFlow training) for page tests."""

from __future__ import annotations

import math

from settings.run_config import RunConfig
from runs.store.run_store import RunStore


def add_fake_run(store: RunStore, optimizer: str = "adam", learning_rate: float = 1e-3,
                 steps: int = 30, seed: int = 0, name: str = "", status: str = "finished",
                 slots: tuple[str, ...] = ("m", "v", "update")) -> int:
    """A finished run with train/val losses, an lr change at step 11, slot stats and histograms."""
    config = RunConfig(optimizer=optimizer, hyperparameters={"learning_rate": learning_rate},
                       steps=steps, seed=seed, eval_every=10)
    run_id = store.create_run(config.to_json_dict(), name=name)
    scale = 1.0 + learning_rate * 100
    scalars = [(s, "train_loss", 2.3 * math.exp(-s / (10 * scale))) for s in range(1, steps + 1)]
    scalars += [(s, "val_loss", 2.3 * math.exp(-s / (12 * scale))) for s in range(0, steps + 1, 10)]
    scalars += [(s, "val_accuracy", 0.1 + 0.8 * s / steps) for s in range(0, steps + 1, 10)]
    changes = [(1, k, None, v, "init") for k, v in config.hyperparameters.items()]
    changes.append((11, "learning_rate", learning_rate, learning_rate / 2, "user"))
    stats = [(s, var, slot, 0.1 * s + i, 0.01 * s, 0.02 * s)
             for s in range(1, steps + 1) for var in ("dense/kernel", "dense/bias")
             for i, slot in enumerate(slots)]
    hists = [(s, var, slot, -0.1 * s, 0.1 * s, [1, 2, 3, 4])
             for s in (1, 20) for var in ("dense/kernel", "dense/bias") for slot in slots]
    store.append(run_id, scalars=scalars, hyper_changes=changes, slot_stats=stats,
                 histograms=hists, step=steps)
    store.set_status(run_id, status, f"{status} {steps} steps")
    return run_id
