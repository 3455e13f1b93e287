"""Admission of queued runs: a pool place AND room in the memory budget (no Streamlit, no
TensorFlow; pure functions, used by `RunStore.claim_queued`).

Every run is a TensorFlow process. Resident sizes measured on the 2-core test machine
(TF 2.21, `ps -o rss`): a plain run 0.95-1.08 GB, one following 4 hyper-gradients
1.29 GB, one with `reverse_horizon=200` 2.61 GB; measured again here (VmRSS, digits/mlp, Adam,
after 300+ steps): plain 962 MB, 4 hyper-gradients 1042 MB, one hyper-gradient with
`reverse_horizon=200` 2480 MB. The estimate below stays at or above these:

    MB = 1000 + 80 * len(hypergradients) + 8 * reverse_horizon

Active runs are counted at max(estimate, measured resident size), so a run that grew beyond
its estimate is charged what it really holds.
"""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Sequence

MEMORY_BUDGET_ENV = "OPTIMIZER_LAB_MEMORY_BUDGET_MB"
BUDGET_SHARE_OF_RAM = 0.75
PLAIN_RUN_MB = 1000.0
PER_HYPERGRADIENT_MB = 80.0
PER_REVERSE_STEP_MB = 8.0


def estimate_mb(config: dict[str, Any]) -> float:
    """Estimated resident memory of a run process in MB, from its config (a `RunConfig` JSON
    dict: `hypergradients` list, `reverse_horizon` int in steps)."""
    followed = config.get("hypergradients") or []
    horizon = int(config.get("reverse_horizon") or 0) if followed else 0
    return PLAIN_RUN_MB + PER_HYPERGRADIENT_MB * len(followed) + PER_REVERSE_STEP_MB * horizon


def machine_memory_mb(meminfo: str = "/proc/meminfo") -> float | None:
    """MemTotal of this machine in MB, or None when `/proc/meminfo` cannot be read."""
    try:
        with open(meminfo) as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_budget_mb() -> float | None:
    """The memory the pool's runs may hold together, in MB: `OPTIMIZER_LAB_MEMORY_BUDGET_MB`,
    default 75% of MemTotal (None = no budget: MemTotal unknown).

    Raises:
        ValueError: the variable is set but is not a number > 0.
    """
    raw = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if not raw:
        total = machine_memory_mb()
        return None if total is None else BUDGET_SHARE_OF_RAM * total
    try:
        budget = float(raw)
    except ValueError:
        budget = float("nan")
    if not (0 < budget < float("inf")):
        raise ValueError(f"{MEMORY_BUDGET_ENV}={raw!r} refused: must be a number of MB > 0")
    return budget


def admit(queued: Sequence[tuple[int, float]], active_mb: Sequence[float], pool_size: int,
          budget_mb: float | None, ending_mb: float = 0.0) -> tuple[list[int], dict[int, str]]:
    """Which queued runs start now, first come first served.

    Args:
        queued: (run id, estimated MB) of the queued runs, oldest first.
        active_mb: MB charged for each active run (max of estimate and resident size).
        pool_size: places in the pool (active runs count against it).
        budget_mb: memory budget in MB, None for none.
        ending_mb: MB still held by processes of runs that have ended but not yet exited (a
            finished run's process lives 1-2 s more): in the memory account, not the count.

    Returns:
        (ids admitted, {id: why it waits} for the first run that does not fit). Order is kept:
        a large run at the head is not overtaken by smaller ones (it would starve). A run that
        alone exceeds the budget starts when nothing else is active (else it would wait
        forever; `runs.service.control.start_run` refuses such runs up front).
    """
    used, count = float(sum(active_mb)) + ending_mb, len(active_mb)
    admitted: list[int] = []
    for run_id, need in queued:
        if count >= pool_size:
            break
        if budget_mb is not None and used + need > budget_mb and (count > 0 or ending_mb):
            return admitted, {run_id: (
                f"waits for memory: needs ~{need:.0f} MB, {used:.0f} of {budget_mb:.0f} MB "
                f"({MEMORY_BUDGET_ENV}) held by {count} active run(s)"
                + (f" and {ending_mb:.0f} MB by ending ones" if ending_mb else ""))}
        admitted.append(run_id)
        used += need
        count += 1
    return admitted, {}


# Resident size of an idle warm worker (TensorFlow, tf_keras and the engine imported, devices
# configured, no model): 714-715 MB VmRSS measured by `bench/bench_start_latency.py`.
WARM_WORKER_MB = 800.0


def warm_spares(active_configs: Sequence[dict[str, Any]], spare_count: int, queued: int,
                pool_size: int, budget_mb: float | None) -> int:
    """How many warm workers to start now (>= 0).

    Every pool place holds either an active run or at most one spare warm worker: spares =
    `pool_size` - active runs, so the idle processes never outnumber the free places. Fewer
    when the memory budget (MB) has no room for another `WARM_WORKER_MB` beside the active
    runs' estimates (`estimate_mb`) and the spares already there; none while runs are queued
    (their places are about to be taken, by a cold process if no spare is ready).

    Args:
        active_configs: `RunConfig` JSON dicts of the active runs.
        spare_count: live idle warm workers already there (warming or ready).
        queued: number of queued runs.
        pool_size: places in the pool.
        budget_mb: memory budget in MB, None for none.
    """
    if queued:
        return 0
    wanted = pool_size - len(active_configs)
    if budget_mb is not None:
        room = budget_mb - sum(estimate_mb(c) for c in active_configs)
        wanted = min(wanted, int(room // WARM_WORKER_MB))
    return max(0, wanted - spare_count)
