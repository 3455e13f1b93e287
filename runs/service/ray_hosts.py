"""Run hosts as Ray actors: the Ray executor (`OPTIMIZER_LAB_EXECUTOR=ray`,
`runs.service.executor`). No Streamlit, no TensorFlow in the server; `ray` is imported by the
pool (`RayPool`), which only exists when the Ray executor is chosen.

A host actor (`runs.service.ray_actor.HostActor`) runs the same host loop as a host process
(`runs.process.run_host.host_main`: TensorFlow imported once, warm-up, many runs interleaved
step by step) for a `workers` row the server registered; Ray's scheduler places it on a node
with `num_cpus` free (`OPTIMIZER_LAB_RAY_CPUS_PER_HOST`, default 1), the `memory` a full host
holds (`RayPool.reservation_mb`) and, for a host that serves runs asking for a GPU,
`num_gpus=1` (`ray_actor.actor_options`). Devices a run trains on
are reported with the run as for a local host (`runs.device`, e.g. `/device:GPU:0` on a GPU
node).

Why commands and records go through the store, not through actor calls: the host loop
already takes its runs, polls their commands and writes their records in batches through the
store, one transaction per batch; every node reaches the store (PostgreSQL for a real
cluster, the SQLite file for a cluster on one machine), so a page's `set_hyper`, pause or stop
is the same row whichever executor trains the run, several web servers can command one run,
and a command sent while its host is busy or restarting waits in the queue instead of being
lost with an actor call. The server's only Ray calls are starting an actor, its one `serve`
call, watching that call's result for the actor's death, and - when the connection to an
actor broke - asking Ray whether the actor or its node is dead (`RayPool._verdict`).

Liveness: see `runs.service.ray_table` (Ray for the server that owns the actor, the heartbeat
for any other process; no pid of another node is ever checked). A host actor is owned by the
server process that started it and ends with it (Ray's ownership): its runs are then
interrupted, as a killed host process's are, and can be continued from their checkpoints.
Checkpoints live with the store (`runs.store.checkpoints`): rows of a PostgreSQL store, which
every node and every web server reaches, so a run that a lost node was training can be continued
elsewhere; files beside a SQLite store, which only a cluster on one machine (or one shared
disk) can use. Host logs are files in the node's data directory.

The actor itself, its options and its runtime environment: `runs.service.ray_actor`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.service import executor, pool, ray_table, worker_table
from runs.service.executor import ExecutorSettings
from runs.service.ray_actor import TF_ENV, HostActor, actor_options, runtime_env
from runs.service.pool import host_log_path
from runs.service import host_pool
from runs.service.host_pool import WarmPool
from runs.store import admission
from runs.store.run_store import RunStore

# How long a host actor whose connection broke may stay unavailable, alive in Ray's eyes,
# before the pool stops watching it (its runs are then judged by their heartbeat). Ray declares
# a lost node dead after its health checks fail (~13 s measured on the test cluster).
UNAVAILABLE_GRACE_S = 30.0


def actor_state(actor: Any) -> tuple[str, str]:
    """(state, death cause) of an actor in Ray's control store (`ALIVE`, `RESTARTING`, `DEAD`,
    ...; the cause on one line); ("?", "") when it cannot be read. Ray's state API needs the
    dashboard, which a lab cluster may not run: this reads the GCS's actor table instead."""
    try:
        from ray._private.state import state as global_state

        found = global_state.actor_table(actor._actor_id.hex())
    except Exception:  # noqa: BLE001 - a private API of Ray: any failure is "unknown"
        return "?", ""
    cause = found.get("DeathCause")
    words = ""
    for path in (("node_death_info", "reason_message"),
                 ("actor_died_error_context", "error_message")):
        value: Any = cause
        for name in path:
            value = getattr(value, name, "")
        if value:
            words = str(value)
            break
    return str(found.get("State", "?")), " ".join(words.split())[:200]


def death_reason(error: BaseException) -> str:
    """What Ray said about a dead actor, on one line (at most 300 characters)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


@dataclass
class _Host:
    actor: Any
    ref: Any  # the ObjectRef of its `serve` call
    gpu: bool
    # (monotonic s, Ray's words) once its `serve` call failed with ActorUnavailableError: the
    # connection broke, which a dead node and a network blip both cause; Ray decides which
    unavailable: tuple[float, str] | None = None


class RayPool(WarmPool):
    """The run hosts of one store as Ray actors owned by this process (a `WarmPool`: the same
    sizing, refill thread and `wait_ready`; see the module docstring).

    Args:
        store: the run store; chosen: the Ray executor settings (`executor.settings()`).

    Raises:
        ExecutorRefused: ray cannot be imported, or no Ray cluster answers at the address.
    """

    # Host actors import TensorFlow on Ray's nodes, each on the CPUs it reserved: all at once.
    max_warming = pool.MAX_HOSTS

    def __init__(self, store: RunStore, chosen: ExecutorSettings):
        super().__init__(store)
        self.settings = chosen
        self.ray = executor.connect(chosen)
        self.on_this_machine = executor.local_cluster(self.ray)
        self._actors: dict[int, _Host] = {}
        self.cluster_error = ""  # set while the cluster cannot be reached

    @staticmethod
    def reservation_mb() -> float:
        """The memory each host actor reserves on its node (MB): a full host
        (`admission.host_reservation_mb` of `OPTIMIZER_LAB_RUNS_PER_HOST`)."""
        return admission.host_reservation_mb(pool.runs_per_host())

    def hosts_wanted(self, live: int) -> int:
        """How many host actors to start beside the `live` ones: up to `OPTIMIZER_LAB_HOSTS`,
        as many as the cluster's unreserved memory holds (Ray's `memory` resource, summed over
        the nodes; each actor reserves `reservation_mb`). This machine's memory budget does not
        apply: the hosts live on Ray's nodes. An actor no single node has room for waits in
        Ray's queue, as any actor does.

        Raises:
            ValueError: an invalid hosts or runs-per-host setting.
        """
        wanted = pool.host_count() - live
        free = self.ray.available_resources().get("memory")
        if free is not None:
            wanted = min(wanted, int(free // (self.reservation_mb() * 2**20)))
        return max(0, wanted)

    def _spawn(self, gpu: bool = False) -> int | None:
        """Start one host actor (its row first); None when Ray refuses (the reason is kept)."""
        wid = worker_table.register(self.store, os.getpid())
        try:
            options = actor_options(self.settings, gpu,
                                    runtime_env(self.settings, self.on_this_machine, gpu),
                                    self.reservation_mb())
            actor = self.ray.remote(HostActor).options(**options).remote()
            ray_table.add_host(self.store, wid, actor._actor_id.hex(), 1 if gpu else 0)
            environ = {**worker_table.lab_env(), **TF_ENV}
            ref = actor.serve.remote(str(self.store.path), wid, environ)
        except Exception as error:  # noqa: BLE001 - a Ray or store error: no host this time
            worker_table.set_state(self.store, wid, "gone")
            self.last_error = f"could not start a Ray run host: {death_reason(error)}"
            print(f"ray pool: {self.last_error}", file=sys.stderr, flush=True)
            return None
        self._actors[wid] = _Host(actor, ref, gpu)
        return wid

    def collect(self) -> None:
        """Forget the host actors whose `serve` call ended: a clean exit leaves its row `gone`
        itself (the idle actor is then killed: it would keep its CPUs); a dead actor
        (`ActorDiedError`) interrupts its runs with the truth (`ray_table.interrupt_host`). An
        unavailable actor (`ActorUnavailableError`: the connection broke) is dead once Ray's
        control store says so or its node is no longer alive (`_verdict`). The runs given to
        live hosts not yet serving are beaten. A cluster that cannot be reached sets
        `cluster_error` and raises (never a local substitute).

        Raises:
            ExecutorRefused: the cluster cannot be reached (the message says so).
        """
        for hid, host in list(self._actors.items()):
            if host.unavailable is None:
                try:
                    done, _ = self.ray.wait([host.ref], timeout=0)
                except Exception as error:  # noqa: BLE001 - the GCS or the connection is gone
                    self.cluster_error = (
                        f"the Ray cluster ({executor.ADDRESS_ENV}={self.settings.address}) cannot"
                        f" be reached: {death_reason(error)}; its runs cannot train until it is "
                        "back, and the local executor is not used instead")
                    raise executor.ExecutorRefused(self.cluster_error) from None
                if not done:
                    continue
                try:
                    self.ray.get(host.ref)
                except Exception as error:  # noqa: BLE001 - ActorDiedError, ...
                    if type(error).__name__ == "ActorUnavailableError":
                        host.unavailable = (time.monotonic(), death_reason(error))
                    else:
                        self._died(hid, death_reason(error))
                        continue
                else:
                    self._ended(hid, host)
                    continue
            verdict = self._verdict(hid, host)
            if verdict == "alive":  # it came back: its heartbeat judges its runs from now on
                self._actors.pop(hid)
            elif verdict:
                self._died(hid, verdict)
        self.cluster_error = ""
        ray_table.beat_untaken(self.store, list(self._actors))

    def _ended(self, hid: int, host: _Host) -> None:
        self._actors.pop(hid)
        try:
            self.ray.kill(host.actor)
        except Exception:  # noqa: BLE001 - it ended meanwhile
            pass
        if worker_table.row(self.store, hid)["ready_at"] is not None:
            self.failures = 0
            host_log_path(self.store, hid).unlink(missing_ok=True)

    def _died(self, hid: int, reason: str) -> None:
        self._actors.pop(hid, None)
        ready = worker_table.row(self.store, hid)["ready_at"] is not None
        ray_table.interrupt_host(self.store, hid, reason)
        print(f"ray pool: run host {hid} died: {reason}", file=sys.stderr, flush=True)
        if not ready:
            self.failures += 1
            self.last_error = f"Ray run host {hid} died before it was ready: {reason}"

    def _verdict(self, hid: int, host: _Host) -> str:
        """For an unavailable host: why it is dead ("" while Ray has not decided; "alive" when
        Ray still holds it alive after `UNAVAILABLE_GRACE_S`)."""
        since, words = host.unavailable or (time.monotonic(), "")
        state, cause = actor_state(host.actor)
        if state == "DEAD":
            return f"{words}; Ray: the actor is DEAD ({cause})"
        node = (ray_table.host(self.store, hid) or {}).get("node_id") or ""
        alive = {n.get("NodeID"): n.get("Alive") for n in self.ray.nodes()}
        if node and alive.get(node) is False:
            return f"{words}; Ray: its node {node[:12]} is no longer alive"
        if time.monotonic() - since < UNAVAILABLE_GRACE_S:
            return ""
        if state == "ALIVE":
            return "alive"
        return f"{words}; unavailable for {UNAVAILABLE_GRACE_S:.0f} s (Ray: state {state})"

    def refill(self) -> list[int]:
        """`WarmPool.refill`, then one GPU host (`num_gpus=1`) when a queued run asks for a GPU,
        no live GPU host exists and the cluster declares a GPU (an actor no node can hold would
        wait forever, holding the run; the run waits queued instead), then a dispatch of the
        queue (runs that waited for a host). Returns the host ids started.

        Raises:
            ValueError: a bad pool setting. StoreUnavailable: the store cannot be used.
        """
        started = super().refill()
        with self._lock:
            if (not self._stop.is_set() and ray_table.gpu_runs_waiting(self.store)
                    and not any(h.gpu for h in self._actors.values())
                    and self.ray.cluster_resources().get("GPU", 0) >= 1):  # else never placed
                started += [hid for hid in [self._spawn(gpu=True)] if hid is not None]
        if not self._stop.is_set():
            pool.dispatch(self.store)
        return started

    def actor(self, host_id: int) -> Any:
        """The actor handle of host `host_id` (KeyError when this pool did not start it)."""
        return self._actors[host_id].actor

    def shutdown(self, wait_s: float = 10.0) -> None:
        """Stop refilling; retire this process's hosts; kill the idle actors. Actors holding
        runs train on while this process lives and end with it (Ray's ownership)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait_s)
        with self._lock:
            try:
                worker_table.retire(self.store, os.getpid())
                busy = {h["id"] for h in worker_table.hosts(self.store) if h["runs"]}
            except Exception:  # noqa: BLE001 - store gone: the idle actors still must go
                busy = set()
            for hid, host in list(self._actors.items()):
                if hid in busy:
                    continue
                try:
                    self.ray.kill(host.actor)
                    worker_table.set_state(self.store, hid, "gone")
                except Exception:  # noqa: BLE001 - the cluster or store is gone already
                    pass
                self._actors.pop(hid, None)
                host_log_path(self.store, hid).unlink(missing_ok=True)


_REFUSED: list[str] = []  # why the last attempt to keep a Ray pool was refused


def make_pool(store: RunStore) -> RayPool:
    """A started `RayPool` for `store` with this process's settings (`warm_pool.keep_warm`
    calls it when the Ray executor is chosen).

    Raises:
        ValueError: a bad executor setting. ExecutorRefused: ray cannot be imported, or no
            Ray cluster answers at the address (kept for `problem`).
    """
    try:
        made = RayPool(store, executor.settings())
    except ValueError as error:
        _REFUSED[:] = [str(error)]
        raise
    _REFUSED[:] = []
    made.start()
    return made


def problem() -> str | None:
    """What keeps the Ray executor from training, for a page or the CLI to show: a refused
    setting, a refused connection, the cluster gone while runs train, or host actors that keep
    dying before they are ready (TensorFlow missing on a node); None when the local
    executor is chosen or all is well. Never connects by itself."""
    try:
        if not executor.settings().ray:
            return None
    except ValueError as error:
        return str(error)
    kept = host_pool.current()
    if isinstance(kept, RayPool):
        if kept.cluster_error:
            return kept.cluster_error
        if kept.failures >= host_pool.MAX_FAILURES:  # it starts no more hosts: runs wait
            return (f"{kept.failures} Ray run hosts in a row died before they were ready, so no "
                    f"more are started: {kept.last_error}")
        return None
    return _REFUSED[0] if _REFUSED else None


def report_problem(show: Callable[[str], Any]) -> None:
    """Call `show` (e.g. `st.error`) with `problem()` when there is one (a page's status)."""
    found = problem()
    if found:
        show(found)


def wait_for_actor_death(pool_: RayPool, host_id: int, timeout_s: float = 60.0) -> bool:
    """Wait until the pool noticed that host `host_id` is gone; True when it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pool_.wake()
        if host_id not in pool_._actors:
            return True
        time.sleep(0.1)
    return False
