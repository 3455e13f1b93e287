"""Admission of queued runs: a pool place AND room in the memory budget (no Streamlit, no
TensorFlow; used by `RunStore.claim_queued` and the warm pool).

A run trains either alone in a cold TensorFlow process or beside others in a run host
(`runs.process.run_host`). Resident sizes of a cold process measured on the 2-core test machine
(TF 2.21, `ps -o rss`): a plain run 0.95-1.08 GB, one following 4 hyper-gradients 1.29 GB, one
with `reverse_horizon=200` 2.61 GB; measured again here (VmRSS, digits/mlp, Adam, after 300+
steps): plain 962 MB, 4 hyper-gradients 1042 MB, one hyper-gradient with `reverse_horizon=200`
2480 MB. The estimate of a cold process stays at or above these:

    MB = 1000 + 80 * len(hypergradients) + 8 * reverse_horizon            (`estimate_mb`)

In a host the TensorFlow import is paid once (`WARM_HOST_MB`); one more default run adds what
its own model, optimizer, data and traced functions hold (`bench/bench_run_hosts.py` measures
it), estimated as

    MB = IN_HOST_RUN_MB + 80 * len(hypergradients) + 8 * reverse_horizon  (`estimate_in_host_mb`)

The account counts what processes really hold: a cold run at max(estimate, its resident size);
a live host ONCE, at max(its resident size, `WARM_HOST_MB` + the in-host estimates of its active
runs) - the estimates cover runs given to it whose engines are not built yet.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any
from collections.abc import Sequence

from runs.protocol import ACTIVE_STATUSES, FINAL_STATUSES
from runs.store.processes import rss_mb, same_process_alive

MEMORY_BUDGET_ENV = "OPTIMIZER_LAB_MEMORY_BUDGET_MB"
BUDGET_SHARE_OF_RAM = 0.75
PLAIN_RUN_MB = 1000.0
PER_HYPERGRADIENT_MB = 80.0
PER_REVERSE_STEP_MB = 8.0
# One more default run (digits/mlp, Adam) in a host: measured 13-17 MB resident per extra run
# (`bench/bench_run_hosts.py`: host VmRSS 993 MB with 1 run, 1,110 MB with 10, 1,404 MB with
# 25); 60 MB leaves room for a run's record buffers, its writer thread and fragmentation.
IN_HOST_RUN_MB = 60.0
# Resident size of a warm run host with no run (TensorFlow, tf_keras and the engine imported,
# devices configured, the default engine prepared): 888 MB VmRSS measured by
# `bench/bench_run_hosts.py`; rounded up.
WARM_HOST_MB = 900.0
HOST_PREFIX = "host "  # `runs.worker` of a run trained by a host (`worker_table.host_label`)


def estimate_mb(config: dict[str, Any]) -> float:
    """Estimated resident memory of a run process in MB, from its config (a `RunConfig` JSON
    dict: `hypergradients` list, `reverse_horizon` int in steps)."""
    followed = config.get("hypergradients") or []
    horizon = int(config.get("reverse_horizon") or 0) if followed else 0
    return PLAIN_RUN_MB + PER_HYPERGRADIENT_MB * len(followed) + PER_REVERSE_STEP_MB * horizon


def host_reservation_mb(capacity: int) -> float:
    """Memory a run host holds when full, in MB: `WARM_HOST_MB` + `capacity` default runs of
    `IN_HOST_RUN_MB` (what a Ray host actor reserves on its node, `ray_actor.actor_options`)."""
    return WARM_HOST_MB + IN_HOST_RUN_MB * capacity


def estimate_in_host_mb(config: dict[str, Any]) -> float:
    """Estimated memory one more run adds to a run host, in MB (same fields as `estimate_mb`)."""
    return estimate_mb(config) - PLAIN_RUN_MB + IN_HOST_RUN_MB


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
          budget_mb: float | None, ending_mb: float = 0.0, hosts_mb: float = 0.0,
          hosts: int = 0) -> tuple[list[int], dict[int, str]]:
    """Which queued runs start now, first come first served.

    Args:
        queued: (run id, estimated MB) of the queued runs, oldest first.
        active_mb: MB charged for each active run (max of estimate and resident size).
        pool_size: places in the pool (active runs count against it).
        budget_mb: memory budget in MB, None for none.
        ending_mb: MB still held by processes of runs that have ended but not yet exited (a
            finished run's process lives 1-2 s more): in the memory account, not the count.
        hosts_mb: MB the `hosts` live run hosts hold beyond their runs' entries of
            `active_mb` (TensorFlow itself, idle hosts): in the account, not the count.

    Returns:
        (ids admitted, {id: why it waits} for the first run that does not fit). Order is kept:
        a large run at the head is not overtaken by smaller ones (it would starve). A run that
        alone exceeds the budget starts when nothing else is active (else it would wait
        forever; `runs.service.control.start_run` refuses such runs up front).
    """
    used, count = float(sum(active_mb)) + ending_mb + hosts_mb, len(active_mb)
    admitted: list[int] = []
    for run_id, need in queued:
        if count >= pool_size:
            break
        if budget_mb is not None and used + need > budget_mb and (count > 0 or ending_mb):
            return admitted, {run_id: (
                f"waits for memory: needs ~{need:.0f} MB, {used:.0f} of {budget_mb:.0f} MB "
                f"({MEMORY_BUDGET_ENV}) held by {count} active run(s)"
                + (f" and {ending_mb:.0f} MB by ending ones" if ending_mb else "")
                + (f" and {hosts} run host(s)" if hosts else ""))}
        admitted.append(run_id)
        used += need
        count += 1
    return admitted, {}


class Account:
    """What the live processes of a store hold, in MB (see the module docstring).

    Attributes:
        active_mb: one entry per active run: a cold run's max(estimate, resident size), a host
            run's in-host estimate.
        hosts_mb: what the live hosts hold beyond their runs' entries.
        hosts: live hosts; free_places: runs they may still take (`capacity` each).
        ending_mb: resident size of cold processes whose run ended in the last 60 s.
    """

    def __init__(self, con: sqlite3.Connection, capacity: int = 0, own_pid: int | None = None):
        own_pid = os.getpid() if own_pid is None else own_pid
        self.active_mb: list[float] = []
        in_host: dict[str, list[float]] = {}
        for config, pid, start, worker in con.execute(
                f"SELECT config, pid, pid_start, worker FROM runs WHERE status IN "
                f"{ACTIVE_STATUSES}"):
            config = json.loads(config)
            if (worker or "").startswith(HOST_PREFIX):
                need = estimate_in_host_mb(config)
                in_host.setdefault(worker, []).append(need)
                self.active_mb.append(need)
            else:
                alive = same_process_alive(pid, start)
                self.active_mb.append(max(estimate_mb(config),
                                          (rss_mb(pid) or 0.0) if alive else 0.0))
        self.hosts_mb, self.hosts, self.free_places = 0.0, 0, 0
        for host_id, pid, start, state in con.execute(
                "SELECT id, pid, pid_start, state FROM workers WHERE state IN "
                "('warming', 'ready', 'retired')"):
            if not same_process_alive(pid, start):
                continue
            runs = in_host.get(f"{HOST_PREFIX}{host_id}", [])
            self.hosts += 1
            self.hosts_mb += max(rss_mb(pid) or 0.0, WARM_HOST_MB + sum(runs)) - sum(runs)
            if state != "retired":
                self.free_places += max(0, capacity - len(runs))
        # processes of cold runs that just ended (not this one: a worker handing its place over
        # is about to exit) still hold their memory for a second or two
        self.ending_mb = sum(
            rss_mb(pid) or 0.0 for pid, start, worker in con.execute(
                f"SELECT pid, pid_start, worker FROM runs WHERE status IN {FINAL_STATUSES} AND "
                "pid IS NOT NULL AND updated > ?", (time.time() - 60,))
            if pid != own_pid and not (worker or "").startswith(HOST_PREFIX)
            and same_process_alive(pid, start))

    def needs(self, configs: Sequence[tuple[int, dict[str, Any]]]) -> list[tuple[int, float]]:
        """(run id, MB) of queued runs in order: the first `free_places` as runs in a host,
        the others as cold processes."""
        out = []
        for place, (run_id, config) in enumerate(configs):
            out.append((run_id, estimate_in_host_mb(config) if place < self.free_places
                        else estimate_mb(config)))
        return out

    def held_mb(self) -> float:
        """Everything held: active runs, hosts, ending processes (MB)."""
        return float(sum(self.active_mb)) + self.hosts_mb + self.ending_mb


def hosts_wanted(live: int, count: int, budget_mb: float | None, held_mb: float) -> int:
    """How many run hosts to start now (>= 0): up to `count` live ones, as many as the memory
    budget (MB) has room for at `WARM_HOST_MB` each beside what is held (`Account.held_mb`).

    Args:
        live: hosts alive now (warming or ready); count: hosts wanted in all.
        budget_mb: memory budget in MB, None for none; held_mb: MB held now.
    """
    wanted = count - live
    if budget_mb is not None:
        wanted = min(wanted, int((budget_mb - held_mb) // WARM_HOST_MB))
    return max(0, wanted)
