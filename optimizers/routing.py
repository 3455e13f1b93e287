"""Which step Muon gives a variable (Keras 3.15's rule), decided without TensorFlow.

`muon_route(rank, path, ...)` is the decision; `optimizers.muon` applies it to variables, and
the run process records the result per variable under `ROUTES_KEY` in the run's optimizer
config, which the Slots view (TensorFlow-free) shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ROUTES_KEY = "_slot_routes"  # optimizer config key: {variable label: "muon" | "adamw"}


def muon_route(rank: int | None, path: str, exclude_embeddings: bool = True,
               exclude_layers: Sequence[str] = ()) -> str:
    """"adamw" or "muon": Keras 3.15's Muon sends every variable that is not 2-D to AdamW; a
    2-D one too when `exclude_embeddings` and `path` contains "embedding" (any case), or when a
    regular expression of `exclude_layers` matches `path` (`re.search`); every other 2-D
    variable, the output layer's kernel included, takes the Muon step."""
    if rank != 2:
        return "adamw"
    if exclude_embeddings and "embedding" in path.lower():
        return "adamw"
    if any(re.search(pattern, path) for pattern in exclude_layers):
        return "adamw"
    return "muon"


__all__ = ["ROUTES_KEY", "muon_route"]
