"""A run host as a Ray actor (`HostActor`), its options and its runtime environment: what
runs on a node, and how the pool (`runs.service.ray_hosts.RayPool`) starts it. No Streamlit;
TensorFlow and `ray` only inside the actor's methods, on the node.

Runtime environment (`runtime_env`): a node needs only Ray and Python; the actor gets a Ray
runtime environment with the project's requirements (`pip`, requirements.txt without the test
tools) and its code (`working_dir`). It is skipped for a cluster whose every node is this
machine (`executor.local_cluster`): they already run this Python with these packages.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from runs.service import pool, ray_table
from runs.service.pool import host_log_path
from runs.service.executor import ExecutorSettings
from runs.store.run_store import RunStore

PROJECT_ROOT = pool.PROJECT_ROOT
REQUIREMENTS = PROJECT_ROOT / "requirements.txt"
TESTS_MARK = "# tests"  # requirements.txt: the lines after it are the test tools
# Not shipped to a node: tests, benchmarks, docs, version control, stores and caches.
EXCLUDES = [".git", "tests", "bench", "docs", "**/__pycache__", "*.sqlite*", ".ci"]
# TensorFlow's variables in every host actor: Keras 2 for `tf.keras`, its C++ log at warnings.
TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


class HostActor:
    """A Ray actor that is one run host (made remote with the options of `actor_options`)."""

    def where(self) -> dict[str, Any]:
        """The node id, this process's pid and the GPU ids Ray gave it."""
        import ray

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "pid": os.getpid(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def serve(self, store_location: str, host_id: int, environ: dict[str, str]) -> int:
        """Be run host `host_id` of the store until it must exit (`run_host.host_main`);
        returns its exit code. Its output goes to the host's log in the data directory when
        that directory is reachable here."""
        os.environ.update(environ)
        from runs.process.run_host import host_main

        store = RunStore(store_location)
        here = self.where()
        ray_table.set_node(store, host_id, here["node_id"], here["pid"])
        _log_to(host_log_path(store, host_id))
        # The orphan check: the raylet that started this worker; Ray ends the actor itself when
        # the server that owns it ends.
        return host_main(store_location, host_id, os.getppid(), record_pid=False)


def _log_to(path: Path) -> None:
    """Send this process's stdout and stderr to `path` (appended); kept as they are when the
    file cannot be opened (a node without the shared data directory: Ray's logs keep them)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def requirement_lines(gpu: bool = False, path: Path = REQUIREMENTS) -> list[str]:
    """The project's requirements as `pip` lines: requirements.txt up to its test tools, comments
    dropped, without `ray` (the node's own Ray runs the actor); `gpu` installs
    `tensorflow[and-cuda]` instead of `tensorflow` (the CUDA libraries from PyPI)."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip().lower() == TESTS_MARK:
            break
        text = line.split("#", 1)[0].strip()
        if not text or text.lower().startswith("ray"):
            continue
        if gpu and text.startswith("tensorflow=="):
            text = "tensorflow[and-cuda]" + text[len("tensorflow"):]
        out.append(text)
    return out


def runtime_env(chosen: ExecutorSettings, on_this_machine: bool, gpu: bool = False
                ) -> dict[str, Any]:
    """The Ray `runtime_env` of a host actor: TensorFlow's variables always; with
    `OPTIMIZER_LAB_RAY_RUNTIME_ENV=on`, or `auto` on a cluster with a node elsewhere
    (`on_this_machine` False), also `pip` (`requirement_lines`) and `working_dir` (the project,
    without `EXCLUDES`); else the project root on `PYTHONPATH` (its nodes share this machine's
    files and packages)."""
    full = chosen.runtime_env == "on" or (chosen.runtime_env == "auto" and not on_this_machine)
    if full:
        return {"pip": requirement_lines(gpu), "working_dir": str(PROJECT_ROOT),
                "excludes": list(EXCLUDES), "env_vars": dict(TF_ENV)}
    path = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"env_vars": {**TF_ENV, "PYTHONPATH": path}}


def actor_options(chosen: ExecutorSettings, gpu: bool, runtime: dict[str, Any],
                  memory_mb: float) -> dict[str, Any]:
    """The options of a host actor: `num_cpus` (`OPTIMIZER_LAB_RAY_CPUS_PER_HOST`),
    `num_gpus` 1 for a host that serves GPU runs else 0, `memory` (bytes) the `memory_mb` it
    holds when full (`admission.host_reservation_mb`: Ray places it only on a node with that
    much memory not reserved by other actors, so a cluster's memory is accounted by Ray's
    scheduler, node by node, as this machine's budget is by `runs.store.admission`), no restart
    (a restarted actor would have lost its runs' state: the server marks them interrupted
    instead), `runtime_env`."""
    return {"num_cpus": chosen.cpus_per_host, "num_gpus": 1 if gpu else 0,
            "memory": int(memory_mb * 2**20), "max_restarts": 0, "runtime_env": runtime}
