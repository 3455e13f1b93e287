"""The warm pool: the run hosts (warm TensorFlow processes that each train many runs), kept by a
long-lived process (the Streamlit server; a test). No Streamlit, no TensorFlow.

Why: a cold run process imports TensorFlow (4-5 s, ~750 MB on the 2-core machine) before its
first step, and holds ~962 MB for one run. A run host (`runs.process.run_host`) pays the import
once, before any run needs it, and then trains many runs side by side for ~40-60 MB each;
`runs.service.pool.dispatch` gives a claimed run to a host with room in one transaction
(`runs.service.worker_table.assign`) and falls back to a cold process when none has room. The
runs of a host stay isolated from each other (own engine, optimizer, data order, traced step,
commands; `runs.process.host_scheduler`).

`keep_warm(store)` starts (once per process) a refill thread that every `REFILL_EVERY_S`
seconds, and at once after an assignment: forgets the hosts that exited and starts new ones up
to `runs.store.admission.hosts_wanted` (`OPTIMIZER_LAB_HOSTS`, within the memory budget). The
first host starts at once; further ones one at a time (`WarmPool.max_warming`: one TensorFlow
import at a time on this machine) and only while no run is waiting for its first step
(`STARTING_PRIORITY_S`: a TensorFlow import beside a run's first step would delay it). `shutdown()` (also at exit)
retires this process's hosts: idle ones are terminated, ones holding runs train them to their
end and then exit (runs outlive a restart of the server); a host whose parent dies without a
shutdown exits by itself once idle (see `runs.process.run_host`), so the server never leaves
idle orphans.
"""

from __future__ import annotations

import atexit

from runs.service import executor, host_pool
# The local pool and its settings, re-exported: the callers know them by this module.
from runs.service.host_pool import (MAX_FAILURES, REFILL_EVERY_S, SHUTDOWN_WAIT_S,  # noqa: F401
                                    STARTING_PRIORITY_S, WarmPool, current)
from runs.service.pool import _ON_ASSIGN, host_log_path, warm_enabled  # noqa: F401
from runs.store.run_store import RunStore


def keep_warm(store: RunStore) -> WarmPool | None:
    """Keep run hosts for `store` in this process (idempotent; a pool kept for another store is
    shut down first). Returns the pool, or None when run hosts are off
    (`OPTIMIZER_LAB_WARM_WORKERS=off`).

    Call it from the long-lived process that serves the pages (its children die with it).

    With `OPTIMIZER_LAB_EXECUTOR=ray` the hosts are Ray actors (`runs.service.ray_hosts`).

    Raises:
        ValueError: an invalid `OPTIMIZER_LAB_WARM_WORKERS` or executor setting;
            `runs.service.executor.ExecutorRefused` (a ValueError) when the Ray executor is
            chosen and ray cannot be imported or no cluster answers at its address.
    """
    if not warm_enabled():
        executor.settings()  # the Ray executor with run hosts off is refused, not ignored
        return None
    with host_pool._POOL_LOCK:
        kept = host_pool._POOL  # at most one per process
        if kept and kept[0].alive() and kept[0].store.path == store.path:
            return kept[0]
        if kept:
            kept.pop().shutdown()
        if executor.chosen() == executor.RAY:  # host actors on a Ray cluster, never processes
            from runs.service import ray_hosts

            pool: WarmPool = ray_hosts.make_pool(RunStore(store.path))
        else:
            pool = WarmPool(RunStore(store.path))
            pool.start()
        kept.append(pool)
        _ON_ASSIGN[:] = [pool.wake]
        return pool


def shutdown() -> None:
    """Shut down this process's warm pool, if any (registered to run at exit)."""
    with host_pool._POOL_LOCK:
        if host_pool._POOL:
            pool = host_pool._POOL.pop()
            _ON_ASSIGN[:] = []
            pool.shutdown()


atexit.register(shutdown)
