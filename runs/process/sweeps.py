"""A learning-rate range test from the start of a run, in THIS process (the CLI's
`train --lr-range`): no run, no store; TensorFlow is imported by the call, not by this module.

For a test from a live run's current state, queue `lr_range` instead
(`runs.service.control.lr_range`): the sweep then runs in the run's process, where the
weights are (`runs.process.handlers`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from engine import lr_range
from settings.run_config import RunConfig


def sweep_from_start(config: RunConfig, lr_min: float = lr_range.LR_MIN,
                     lr_max: float = lr_range.LR_MAX, steps: int = lr_range.STEPS,
                     device: str = "/CPU:0") -> tuple[pd.DataFrame, lr_range.RangeResult]:
    """Sweep a fresh model and optimizer of `config` (`engine.lr_range_sweep.sweep_config`).

    Returns:
        (rows: `step, learning_rate, loss, smoothed` (nats), the analysis).

    Raises:
        ValueError: a sweep `engine.lr_range.check` refuses (names the field).
    """
    lr_range.check(lr_min, lr_max, steps)
    from engine import lr_range_sweep  # TensorFlow

    rows = lr_range_sweep.sweep_config(config, lr_min, lr_max, steps, device)
    table = pd.DataFrame([(r.step, r.learning_rate, r.loss) for r in rows],
                         columns=["step", "learning_rate", "loss"])
    finite = table["loss"].notna()
    table["smoothed"] = float("nan")
    table.loc[finite, "smoothed"] = lr_range.smooth(table.loc[finite, "loss"].tolist())
    return table, lr_range.analyse(table["learning_rate"], table["loss"])


def summary(result: lr_range.RangeResult) -> str:
    """One line per mark, e.g. `steepest descent  lr = 0.00316`."""
    def text(value: Any) -> str:
        return "not reached (raise --lr-max)" if value is None else f"lr = {value:.3g}"

    return "\n".join([
        f"steepest descent   {text(result.steepest)}",
        f"lowest loss        {text(result.minimum)}",
        f"divergence point   {text(result.divergence)}"
        + (f"  (2 / curvature {result.curvature:.3g})" if result.curvature else ""),
        f"blow-up            {text(result.blowup)}",
    ])
