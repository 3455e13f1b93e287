"""The store's side of the run hosts that are Ray actors: which `workers` rows they are
(`ray_hosts` table), giving them runs, and marking their runs interrupted when one dies. No
Streamlit, no TensorFlow, no `ray` (the dispatcher calls this in any process, also inside a
host actor as it hands its place over).

A Ray host's `workers` row has no pid, and the runs it takes get none either: its process may
live on another node, where a pid (and `/proc` start time) means nothing to the server's
`runs.store.processes` checks. Its liveness is judged instead by

* Ray, in the server that owns the actor (`runs.service.ray_hosts.RayPool.collect`): the
  object reference of the actor's `serve` call fails with `RayActorError` the moment the
  actor or its node dies, and `interrupt_host` then writes the truth onto its runs;
* the heartbeat, everywhere else (another web server, the CLI): `RunStore.mark_interrupted`
  marks an active run without a pid interrupted once its heartbeat is older than
  `runs.store.run_store.STALE_AFTER` (the host beats every held run every few seconds; the
  owning server beats the runs given to a host that is still importing TensorFlow,
  `beat_untaken`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from runs.protocol import ACTIVE_STATUSES, QUEUED
from runs.service.worker_table import SPARE_STATES, host_label, lab_env
from runs.store.connection import dict_rows, for_update
from runs.store.run_store import RunStore

WAIT_MESSAGE = "waits for a Ray run host with room"
GPU_WAIT_MESSAGE = ("waits for a Ray run host with a GPU (num_gpus=1): one is started when a "
                    "node of the cluster declares a GPU")


def wants_gpu(config: dict[str, Any]) -> bool:
    """True when a run's config (a `RunConfig` JSON dict) asks for a GPU (`device` names one,
    e.g. `/device:GPU:0`): such a run goes to a host actor that reserved `num_gpus=1`."""
    return "GPU" in str(config.get("device") or "").upper()


def add_host(store: RunStore, host_id: int, actor_id: str, gpus: float) -> None:
    """Record that `workers` row `host_id` is the Ray actor `actor_id` (hex) reserving `gpus`."""
    with store._connect() as con:
        con.execute("INSERT INTO ray_hosts (host_id, actor_id, gpus, created) VALUES (?,?,?,?)",
                    (host_id, actor_id, float(gpus), time.time()))


def set_node(store: RunStore, host_id: int, node_id: str, node_pid: int) -> None:
    """Record the node the actor runs on and its pid there (written by the actor itself)."""
    with store._connect() as con:
        con.execute("UPDATE ray_hosts SET node_id = ?, node_pid = ? WHERE host_id = ?",
                    (node_id, node_pid, host_id))


def host(store: RunStore, host_id: int) -> dict[str, Any] | None:
    """The `ray_hosts` row of `host_id` as a dict, or None when it is no Ray host."""
    with store._connect() as con:
        rows = dict_rows(con.execute("SELECT * FROM ray_hosts WHERE host_id = ?", (host_id,)))
    return rows[0] if rows else None


def assign(store: RunStore, run_id: int, capacity: int) -> int | None:
    """Give a `starting` run with no host yet to a live Ray host with room (fewer than
    `capacity` active runs); a run that asks for a GPU (`wants_gpu`) only to a host that
    reserved one, a CPU run to a host without one first (the GPUs stay free). Ready hosts come
    before warming ones, then the least loaded, then the oldest. Returns the host id, or None.

    One `store.immediate()` transaction, as `runs.service.worker_table.assign`: the run gets
    `worker = 'host <id>'` and a fresh heartbeat but no pid (see the module docstring); the
    host row gets the dispatcher's `OPTIMIZER_LAB_*` variables.
    """
    with store.immediate() as con:
        found = con.execute("SELECT status, pid, worker, config FROM runs WHERE id = ?"
                            + for_update(con), (run_id,)).fetchone()
        if found is None or found[0] != "starting" or found[1] is not None or found[2]:
            return None  # gone, stopped, or it already has a process
        gpu = wants_gpu(json.loads(found[3]))
        load = dict(con.execute(
            f"SELECT worker, COUNT(*) FROM runs WHERE status IN {ACTIVE_STATUSES} AND worker "
            "LIKE 'host %' GROUP BY worker").fetchall())
        candidates = []
        for host_id, state, gpus in con.execute(
                "SELECT w.id, w.state, r.gpus FROM workers w JOIN ray_hosts r ON r.host_id = "
                f"w.id WHERE w.state IN {SPARE_STATES}" + for_update(con)).fetchall():
            held = int(load.get(host_label(host_id), 0))
            if held < capacity and (gpus >= 1 or not gpu):
                candidates.append((state != "ready", (gpus >= 1) != gpu, held, host_id))
        if not candidates:
            return None
        host_id = min(candidates)[-1]
        now = time.time()
        con.execute("UPDATE workers SET run_id = ?, assigned_at = ?, env = ? WHERE id = ?",
                    (run_id, now, json.dumps(lab_env()), host_id))
        con.execute("UPDATE runs SET worker = ?, updated = ?, heartbeat = ? WHERE id = ?",
                    (host_label(host_id), now, now, run_id))
        return int(host_id)


def assign_or_requeue(store: RunStore, run_id: int, capacity: int) -> int | None:
    """`assign`, and a claimed run no Ray host can take goes back to the queue with the reason
    as its message (it never goes to a local process). Returns the host id, or None."""
    taken = assign(store, run_id, capacity)
    if taken is None:
        with store._connect() as con:
            found = con.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
        why = GPU_WAIT_MESSAGE if found and wants_gpu(json.loads(found[0])) else WAIT_MESSAGE
        store.set_status(run_id, QUEUED, why, only_from=("starting",))
    return taken


def gpu_runs_waiting(store: RunStore) -> int:
    """How many queued runs ask for a GPU (`wants_gpu`)."""
    with store._connect() as con:
        return sum(wants_gpu(json.loads(config)) for (config,) in con.execute(
            "SELECT config FROM runs WHERE status = ?", (QUEUED,)))


def beat_untaken(store: RunStore, host_ids: list[int]) -> None:
    """Refresh the heartbeat of the runs given to these live hosts that they have not taken
    yet (a host importing TensorFlow beats its runs only once it serves)."""
    if not host_ids:
        return
    labels = [host_label(h) for h in host_ids]
    with store._connect() as con:
        con.execute(f"UPDATE runs SET heartbeat = ? WHERE status = 'starting' AND taken_at IS "
                    f"NULL AND worker IN ({','.join('?' * len(labels))})",
                    [time.time(), *labels])


def interrupt_host(store: RunStore, host_id: int, reason: str) -> list[int]:
    """The Ray host `host_id` died (`reason`: what Ray said): its row becomes `gone` and each
    of its active runs `interrupted` with the truth - which host and actor, on which node, why,
    and the last committed step (every record up to it is kept; the run can be continued from
    its last checkpoint, `runs.service.continuing`). Returns the run ids marked."""
    found = host(store, host_id) or {}
    node = f" on node {found['node_id'][:12]}" if found.get("node_id") else ""
    actor = found.get("actor_id") or "?"
    now, marked = time.time(), []
    with store.immediate() as con:
        for run_id, step in con.execute(
                f"SELECT id, step FROM runs WHERE worker = ? AND status IN {ACTIVE_STATUSES}"
                + for_update(con), (host_label(host_id),)).fetchall():
            message = (f"run host {host_id} (Ray actor {actor}{node}) died: {reason}; "
                       f"interrupted after step {step}, the last committed step; every record "
                       "up to it is kept")
            con.execute(f"UPDATE runs SET status = 'interrupted', message = ?, updated = ? "
                        f"WHERE id = ? AND status IN {ACTIVE_STATUSES}", (message, now, run_id))
            marked.append(int(run_id))
        con.execute("UPDATE workers SET state = 'gone' WHERE id = ?", (host_id,))
    return marked
