"""Benchmark: the local executor's run host vs a Ray host actor, same sitting.

    PYTHONPATH=. python bench/bench_ray_executor.py [--rounds 3] [--steps 1500]

For each executor in turn, in a fresh temporary store with one run host (`OPTIMIZER_LAB_HOSTS=1`):
the host is started and waited for (`keep_warm`, `wait_ready`), then `--rounds` runs of the
Train page's default Setup (`settings.fields.page_defaults()`, `--steps` steps, full speed) are
started one after the other (`control.start_run`); the store is polled every 10 ms until the
run's `step` >= 1 (its first batch of records committed). Prints per executor: Start -> first
step (s) and steps/s (steps after the first batch / seconds to the run's end), median of the
rounds; the resident size (VmRSS, MB) of the host process or actor and of this process (the
server's stand-in); the marginal memory of one more run in the host: its VmRSS with
`--together` paced default runs training at once minus with one, divided by `--together` - 1;
for Ray, each process of the local cluster's head (`ray.cluster_utils` head of 1 CPU, no
dashboard, 100 MB object store) and their total.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runs.protocol import FINAL_STATUSES  # noqa: E402
from runs.service import control, ray_table, waiting, warm_pool, worker_table  # noqa: E402
from runs.store.processes import rss_mb  # noqa: E402
from runs.store.run_store import RunStore  # noqa: E402
from settings import fields  # noqa: E402

# Most specific first: `log_monitor.py` contains `monitor.py`.
HEAD_PROCESSES = ("log_monitor", "runtime_env/agent", "DashboardAgent", "RuntimeEnvAgent",
                  "dashboard.py", "monitor.py", "gcs_server", "raylet")


def measure(store: RunStore, steps: int) -> tuple[float, float]:
    """(Start -> first step s, steps/s) of one default run trained to its end."""
    config = fields.page_defaults().model_copy(update={"steps": steps})
    started = time.time()
    run_id = control.start_run(config, store)
    while True:
        run = store.run(run_id)
        if run["step"] >= 1:
            first_at, first_step = time.time(), run["step"]
            break
        if run["status"] in FINAL_STATUSES:
            raise RuntimeError(f"run {run_id} ended before its first step: {run['message']}")
        time.sleep(0.01)
    run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=900)
    if run["status"] != "finished":
        raise RuntimeError(f"run {run_id} {run['status']}: {run['message']}")
    return first_at - started, (run["step"] - first_step) / (run["updated"] - first_at)


def resident_with(store: RunStore, count: int, pid: int) -> float:
    """VmRSS (MB) of process `pid` while `count` default runs (paced at 5 steps/s) train in
    it; the runs are stopped afterwards."""
    config = fields.page_defaults().model_copy(update={"steps": 1_000_000})
    ids = [control.start_run(config, store, steps_per_second=5.0) for _ in range(count)]
    for run_id in ids:
        waiting.wait_for_step(store, run_id, 2, timeout_s=900)
    time.sleep(2.0)
    resident = rss_mb(pid) or 0.0
    for run_id in ids:
        control.stop(store, run_id)
    for run_id in ids:
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=120)
    return resident


def head_rss() -> list[tuple[str, float]]:
    """(name, MB) of the Ray head's own processes on this machine."""
    out = subprocess.run(["ps", "-eo", "rss=,args="], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        rss, _, args = line.strip().partition(" ")
        words = args.split() or [""]
        # the program: a binary, `ray::Name`, or the script a Python runs (flags name others)
        python = Path(words[0]).name.startswith("python")
        program = words[1] if python and len(words) > 1 else words[0]
        if program == "-u" and len(words) > 2:
            program = words[2]
        name = next((n for n in HEAD_PROCESSES if n in program), None)
        if name:
            found.append((name, int(rss) / 1024))
    return found


def bench(kind: str, rounds: int, steps: int, together: int) -> None:
    os.environ["OPTIMIZER_LAB_HOME"] = tempfile.mkdtemp(prefix=f"bench-{kind}-")
    os.environ["OPTIMIZER_LAB_HOSTS"] = "1"
    nodes = None
    if kind == "ray":
        import ray
        from ray.cluster_utils import Cluster

        nodes = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, include_dashboard=False, object_store_memory=100 * 2**20))
        os.environ.update(OPTIMIZER_LAB_EXECUTOR="ray", OPTIMIZER_LAB_RAY_ADDRESS=nodes.address)
    else:
        os.environ["OPTIMIZER_LAB_EXECUTOR"] = "local"
    store = RunStore()
    try:
        warm_pool.keep_warm(store).wait_ready(1, 600)
        time.sleep(3)  # the host's prepared engine is built after it is ready
        results = [measure(store, steps) for _ in range(rounds)]
        first = statistics.median(r[0] for r in results)
        speed = statistics.median(r[1] for r in results)
        print(f"{kind}: Start -> first step {first:.2f} s (rounds "
              f"{', '.join(f'{r[0]:.2f}' for r in results)}); {speed:.0f} steps/s")
        host = worker_table.hosts(store)[0]
        pid = host["pid"] if kind == "local" else ray_table.host(store, host["id"])["node_pid"]
        print(f"{kind}: host RSS {rss_mb(pid) or 0:.0f} MB; this process "
              f"{rss_mb(os.getpid()) or 0:.0f} MB")
        if together > 1:
            one, many = resident_with(store, 1, pid), resident_with(store, together, pid)
            print(f"{kind}: host RSS with 1 run {one:.0f} MB, with {together} runs {many:.0f} MB: "
                  f"{(many - one) / (together - 1):.1f} MB per more run")
        if kind == "ray":
            head = head_rss()
            print("ray head: " + ", ".join(f"{n} {mb:.0f} MB" for n, mb in head)
                  + f"; total {sum(mb for _, mb in head):.0f} MB")
    finally:
        warm_pool.shutdown()
        if nodes is not None:
            ray.shutdown()
            nodes.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--kinds", default="local,ray")
    parser.add_argument("--together", type=int, default=10,
                        help="runs at once for the marginal memory (<= 1: not measured)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for kind in args.kinds.split(","):
        bench(kind, args.rounds, args.steps, args.together)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
