"""The run loop's side of the landscape along the path (`engine.path_landscape`): what a run
with `path_landscape` (a direction seed) records, step by step.

* step 0 and every `path_every(total)` steps (and the last): a `path` row (the weights
  projected onto the plane, the loss at the real weights); at most `PATH_POINTS` per run;
* one row of the 21 x 21 grid per step until the grid is complete, unless a run with the same
  plane already holds a complete grid in the store (`runs.store.landscape_cache`): 21 loss
  evaluations per step for the first 21 steps, so the run starts at once and the grid fills
  in the background with its progress in the store;
* the line from theta_0 to the weights now (`line` rows) and how far the run has gone
  (a `distance` row) at each quarter of the run, at most every `LINE_EVERY_S` seconds
  otherwise, and at the last step.

Runs in the run process (TensorFlow, imported when a run asks for it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from runs.store import landscape_cache

if TYPE_CHECKING:
    from runs.process.run_loop import RunLoop

PATH_POINTS = 500
LINE_EVERY_S = 60.0


def path_every(total: int) -> int:
    """Steps between two `path` rows of a run of `total` steps (at most `PATH_POINTS` rows)."""
    return max(1, total // PATH_POINTS)


class LandscapeHook:
    """Buffers the landscape rows of one run (see the module docstring)."""

    def __init__(self, run: RunLoop, landscape: Any, need_grid: bool):
        self.run, self.landscape = run, landscape
        if not need_grid:
            landscape.pending.clear()
        self.every = path_every(run.total)
        quarter = max(1, run.total // 4)
        self.line_steps = {quarter, 2 * quarter, 3 * quarter, run.total}
        self.last_line = time.monotonic()
        run.buffers["landscape"].append(landscape.path_row(0))

    def on_step(self, step: int) -> None:
        """Buffer the rows due after `step` (1-based)."""
        rows = self.run.buffers["landscape"]
        last = step == self.run.total
        if step == 1 or step % self.every == 0 or last:
            rows.append(self.landscape.path_row(step))
        if self.landscape.pending:
            rows += self.landscape.grid_rows(self.landscape.points)
        if step in self.line_steps or time.monotonic() - self.last_line >= LINE_EVERY_S:
            rows += self.landscape.line_rows(step)
            rows.append(self.landscape.distance_row(step))
            self.last_line = time.monotonic()


def for_run(run: RunLoop) -> LandscapeHook | None:
    """The hook of a run whose config asks for the landscape (`path_landscape` > 0) and whose
    engine has a model (not a stand-in); None otherwise. Call it before the first step: the
    model's weights now are theta_0."""
    engine = run.engine
    config: Any = getattr(engine, "config", None)
    seed = getattr(config, "path_landscape", 0)
    if not seed or config is None or not hasattr(engine, "model"):
        return None
    from engine.path_landscape import PathLandscape  # TensorFlow: this is the run process

    landscape = PathLandscape(engine.model, config.model, engine.dataset, config.seed,
                              config.dtype, engine.x_train, engine.y_train, seed, engine.device)
    cached = landscape_cache.grid_source(run.store, config.to_json_dict())
    return LandscapeHook(run, landscape, need_grid=cached is None or cached == run.run_id)
