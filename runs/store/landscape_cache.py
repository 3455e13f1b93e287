"""Which run's stored grid serves a landscape along the path (`engine.path_landscape`).

The 2-D slice depends only on the initial weights, the training data and the direction seed,
never on the optimizer: runs whose configs agree on `LANDSCAPE_KEY` share one plane, so one
complete grid in the store serves them all (the run process skips computing it again, the
Landscape page reads it from whichever run holds it). TensorFlow-free: the pages import it.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from runs.store.run_store import RunStore

# The config fields that fix theta_0, the training set and the directions.
LANDSCAPE_KEY = ("dataset", "label_noise", "model", "seed", "dtype", "path_landscape")
GRID_CELLS = 21 * 21  # engine.path_landscape.GRID_POINTS ** 2 (that module imports TensorFlow)


def landscape_key(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """The values of `LANDSCAPE_KEY` in a run's config (a `RunConfig` dict); a missing
    `path_landscape` (a run from before the option) reads as 0 = off."""
    return tuple(config.get(field, 0 if field == "path_landscape" else None)
                 for field in LANDSCAPE_KEY)


def grid_source(store: RunStore, config: Mapping[str, Any]) -> int | None:
    """The id of a run with the same `landscape_key` whose grid is complete (the lowest id),
    or None (also for a config with `path_landscape` 0)."""
    key = landscape_key(config)
    if not key[-1]:
        return None
    counts = store.frame("SELECT run_id, COUNT(*) AS cells FROM landscape WHERE kind = 'grid'"
                         " GROUP BY run_id ORDER BY run_id", ())
    for run_id in counts.loc[counts["cells"] >= GRID_CELLS, "run_id"]:
        try:
            if landscape_key(store.run(int(run_id))["config"]) == key:
                return int(run_id)
        except KeyError:  # deleted meanwhile
            continue
    return None
