"""Benchmark: Start -> first step recorded, cold run process vs warm worker.

    PYTHONPATH=. python bench/bench_start_latency.py [--rounds 5] [--model mlp]
        [--compilers graph,xla] [--kinds cold,warm]

In one process and one temporary store, alternating cold and warm runs (the order flips every
round): `control.start_run` of a digits run (30 steps), then the store is polled every 10 ms
until the run's `step` >= 1 (the first batch of records committed). Before every measured Start
the warm pool has its spare `ready` and no other run is active, so neither kind shares the
cores with a TensorFlow import of ours (other load on the machine is shared by both: the rounds
alternate). Cold = `OPTIMIZER_LAB_WARM_WORKERS=off` (a `python -m runs.process.worker` per run); warm =
a ready warm worker (`runs.service.warm_pool`); each kind with every `RunConfig.compiler` asked for
(`xla` was every run's compiler before issue 13), and a warm run of the Train page's default
Setup (`default`: the spare's prepared engine serves it, `engine.prepared`). Prints per-case
median/min/max of Start -> first step and of Start -> taken (`runs.taken_at - runs.created`),
the ratio cold/warm of the medians, the resident size of an idle warm worker (VmRSS, MB), and
the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runs.service import control, pool, waiting, warm_pool, worker_table  # noqa: E402
from runs.store.processes import rss_mb, same_process_alive  # noqa: E402
from runs.protocol import FINAL_STATUSES  # noqa: E402
from runs.store.run_store import RunStore
from settings.run_config import RunConfig  # noqa: E402


def measure(store: RunStore, config: RunConfig, warm: bool) -> tuple[float, float, str]:
    """(Start -> first step s, Start -> taken s, worker kind) of one run, run to its end."""
    os.environ[pool.WARM_ENV] = "on" if warm else "off"
    started = time.time()
    run_id = control.start_run(config, store)
    while True:
        run = store.run(run_id)
        if run["step"] >= 1:
            first = time.time() - started
            break
        if run["status"] in FINAL_STATUSES:
            raise RuntimeError(f"run {run_id} ended before its first step: {run['message']}")
        time.sleep(0.01)
    run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=600)
    if run["status"] != "finished":
        raise RuntimeError(f"run {run_id} {run['status']}: {run['message']}")
    return first, run["taken_at"] - run["created"], run["worker"]


def quiet(store: RunStore, spares) -> float | None:
    """Wait until no run is active, every run process has exited and the spare is ready;
    returns its VmRSS in MB. (A run process that has just ended still dispatches the queue
    as it exits, with ITS environment: a round started before it is gone could be given a
    cold process by it.)"""
    os.environ[pool.WARM_ENV] = "on"
    while store.active_count():
        time.sleep(0.05)
    for run_id in store.runs()["id"]:
        run = store.run(int(run_id))
        while same_process_alive(run.get("pid"), run.get("pid_start")):
            time.sleep(0.05)
    spares.wait_ready(1, timeout_s=600)
    while any(s["state"] == "warming" for s in worker_table.spares(store)):
        time.sleep(0.05)
    pids = [s["pid"] for s in worker_table.spares(store) if s["state"] == "ready"]
    return rss_mb(pids[0]) if pids else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="mlp", choices=("logistic", "mlp", "cnn"))
    parser.add_argument("--compilers", default="graph,xla",
                        help="RunConfig.compiler values to alternate (xla = before issue 13)")
    parser.add_argument("--kinds", default="cold,warm")
    args = parser.parse_args()
    os.environ[pool.POOL_SIZE_ENV] = "1"
    from settings import fields

    cases = [(kind, compiler) for compiler in args.compilers.split(",")
             for kind in args.kinds.split(",")]
    if "warm" in args.kinds.split(","):  # the Train page's default Setup: a prepared engine
        cases.append(("warm", "default"))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {c: [] for c in cases}
    sizes: list[float] = []
    # a run process that just ended may still close its log: never fail on the clean-up
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as home:
        os.environ["OPTIMIZER_LAB_HOME"] = home
        store = RunStore()
        spares = warm_pool.keep_warm(store)
        try:
            for round_ in range(args.rounds):
                for kind, compiler in (cases if round_ % 2 == 0 else cases[::-1]):
                    size = quiet(store, spares)
                    if size is not None:
                        sizes.append(size)
                    if compiler == "default":  # adopts the spare's prepared engine
                        config = fields.page_defaults().model_copy(
                            update={"steps": 30, "eval_every": 10})
                    else:
                        config = RunConfig(dataset="digits", model=args.model, steps=30,
                                           eval_every=10, compiler=compiler)
                    first, taken, worker = measure(store, config, kind == "warm")
                    if worker != kind and not (kind == "warm" and worker.startswith("host ")):
                        raise RuntimeError(f"a {kind} round ran on a {worker} worker")
                    results[(kind, compiler)].append((first, taken))
                    print(f"round {round_ + 1} {kind} {compiler}: first step {first:6.2f} s, "
                          f"taken {taken:6.2f} s", flush=True)
        finally:
            warm_pool.shutdown()
    print(f"\nStart -> first step recorded, digits/{args.model}, median of {args.rounds} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"{'kind':<6}{'compiler':>9}{'median s':>10}{'min s':>8}{'max s':>8}"
          f"{'taken median s':>16}")
    for kind, compiler in cases:
        firsts = [f for f, _ in results[(kind, compiler)]]
        takens = [t for _, t in results[(kind, compiler)]]
        print(f"{kind:<6}{compiler:>9}{statistics.median(firsts):>10.2f}{min(firsts):>8.2f}"
              f"{max(firsts):>8.2f}{statistics.median(takens):>16.2f}")
    if sizes:
        print(f"idle warm worker VmRSS: median {statistics.median(sizes):.0f} MB "
              f"(min {min(sizes):.0f}, max {max(sizes):.0f})")


if __name__ == "__main__":
    main()
