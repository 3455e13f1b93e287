"""Benchmark: run hosts (many runs in one TensorFlow process) against one process per run.

    PYTHONPATH=. python bench/bench_run_hosts.py [--counts 1,10,25] [--window 10] [--rounds 3]
        [--baseline /work/main]

In one sitting, one temporary store, one run host (`OPTIMIZER_LAB_HOSTS=1`), runs of the Train
page's default Setup (`settings.fields.page_defaults()`: digits, mlp, Adam; the seed varies
where said), printed side by side:

1. Start -> first step (s; `control.start_run` until `runs.step` >= 1, polled every 10 ms):
   - `host, idle`: a ready host holding no run (its prepared default engine serves the run);
   - `host, busy`: the same host while it trains 5 other runs at full speed (the new run's
     engine is built on the host's thread);
   - `warm worker`: the one-process-per-run design (a ready warm worker, prepared engine),
     measured by running the same steps with the code at `--baseline` (a checkout without run
     hosts) in a child process; skipped when that path has no `runs/process/warm_worker.py`.
2. Memory (VmRSS, MB): the idle host; the host with 1 and with each N of `--counts` runs after
   they trained `--window` s; marginal MB per extra run = (RSS(N) - RSS(1)) / (N - 1); against
   a cold process training one run (`OPTIMIZER_LAB_WARM_WORKERS=off`): its whole RSS is the
   marginal cost of a run.
3. Steps/s per run with N runs in the host (each N of `--counts`): min, median and the host's
   total over a `--window` s window once every run has trained 30 steps.

The `worker` column of every run is checked to name the host (`host <id>`). The machine's load
average is printed with the numbers: other processes on the 2 cores change every absolute value.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runs.protocol import FINAL_STATUSES  # noqa: E402
from runs.service import control, pool, waiting, warm_pool, worker_table  # noqa: E402
from runs.store.processes import rss_mb  # noqa: E402
from runs.store.run_store import RunStore  # noqa: E402
from settings import fields  # noqa: E402
from settings.run_config import RunConfig  # noqa: E402

LONG = 1_000_000  # steps of a run that is stopped by the bench (the most a run may ask)


def default_config(seed: int = 0, steps: int = LONG) -> RunConfig:
    """The Train page's default Setup with this seed and length."""
    return fields.page_defaults().model_copy(update={"seed": seed, "steps": steps})


def first_step_s(store: RunStore, config: RunConfig) -> tuple[float, int]:
    """(Start -> first step in s, run id); the run keeps training."""
    started = time.time()
    run_id = control.start_run(config, store)
    while True:
        run = store.run(run_id)
        if run["step"] >= 1:
            return time.time() - started, run_id
        if run["status"] in FINAL_STATUSES:
            raise RuntimeError(f"run {run_id} ended before its first step: {run['message']}")
        time.sleep(0.01)


def stop_all(store: RunStore, ids: list[int]) -> None:
    for run_id in ids:
        if store.run(run_id)["status"] not in FINAL_STATUSES:
            control.stop(store, run_id)
    for run_id in ids:
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=300)


def the_host(store: RunStore) -> dict:
    """The one live host (`worker_table.hosts`: id, pid, state, runs held)."""
    host, = [h for h in worker_table.hosts(store) if h["state"] in worker_table.SPARE_STATES]
    return host


def wait_steps(store: RunStore, ids: list[int], steps: int, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while min(store.run(i)["step"] for i in ids) < steps:
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs {ids} did not reach step {steps}")
        time.sleep(0.2)


def idle_host(store: RunStore, settle_s: float = 4.0) -> dict:
    """The host once it holds no run and had time to prepare its default engine again."""
    while the_host(store)["runs"]:
        time.sleep(0.1)
    time.sleep(settle_s)
    return the_host(store)


def starts(store: RunStore, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"host, idle": [], "host, busy": []}
    for _ in range(rounds):
        idle_host(store)
        seconds, run_id = first_step_s(store, default_config(0, 30))
        out["host, idle"].append(seconds)
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=300)
    busy = [first_step_s(store, default_config(100 + i))[1] for i in range(5)]
    wait_steps(store, busy, 30)
    for r in range(rounds):
        seconds, run_id = first_step_s(store, default_config(200 + r, 30))
        out["host, busy"].append(seconds)
        waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=300)
    stop_all(store, busy)
    return out


def baseline_starts(path: Path, rounds: int) -> list[float] | None:
    """Start -> first step with a warm worker of the one-process-per-run design at `path`."""
    if not (path / "runs" / "process" / "warm_worker.py").exists():
        return None
    script = textwrap.dedent(f"""
        import json, os, time
        from runs.service import control, pool, waiting, warm_pool
        from runs.protocol import FINAL_STATUSES
        from runs.store.run_store import RunStore
        from settings import fields
        os.environ[pool.POOL_SIZE_ENV] = "1"
        store = RunStore()
        kept = warm_pool.keep_warm(store)
        out = []
        for r in range({rounds}):
            kept.wait_ready(1, timeout_s=600)
            time.sleep(2)
            config = fields.page_defaults().model_copy(update={{"steps": 30}})
            t = time.time()
            run_id = control.start_run(config, store)
            while store.run(run_id)["step"] < 1:
                time.sleep(0.01)
            out.append(time.time() - t)
            waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=300)
            while store.active_count():
                time.sleep(0.1)
        warm_pool.shutdown()
        print("RESULT", json.dumps(out), flush=True)
    """)
    with tempfile.TemporaryDirectory(prefix="bench-hosts-base-") as home:
        env = dict(os.environ, OPTIMIZER_LAB_HOME=home, PYTHONPATH=str(path),
                   TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
        env.pop(pool.WARM_ENV, None)
        done = subprocess.run([sys.executable, "-c", script], cwd=path, env=env,
                              capture_output=True, text=True, timeout=3600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"baseline failed: {done.stderr[-2000:]}")


def throughput(store: RunStore, counts: list[int], window: float) -> dict[int, dict]:
    """Steps/s per run and host RSS with N runs in the host, for each N (ascending)."""
    out: dict[int, dict] = {}
    for n in counts:
        idle_host(store, settle_s=1.0)
        ids = [first_step_s(store, default_config(1000 + n * 100 + i))[1] for i in range(n)]
        wait_steps(store, ids, 30)
        host = the_host(store)
        workers = {store.run(i)["worker"] for i in ids}
        assert workers == {f"host {host['id']}"}, workers
        before = {i: store.run(i)["step"] for i in ids}
        t0 = time.monotonic()
        time.sleep(window)
        after = {i: store.run(i)["step"] for i in ids}
        elapsed = time.monotonic() - t0
        rates = sorted((after[i] - before[i]) / elapsed for i in ids)
        out[n] = {"min": rates[0], "median": statistics.median(rates), "total": sum(rates),
                  "rss": rss_mb(host["pid"]) or float("nan"), "host": host["id"]}
        stop_all(store, ids)
    return out


def cold_process_mb(store: RunStore, window: float) -> float:
    """VmRSS of a cold process training one default run, after `window` s of training."""
    os.environ[pool.WARM_ENV] = "off"
    try:
        run_id = control.start_run(default_config(7), store)
        wait_steps(store, [run_id], 30)
        time.sleep(window)
        run = store.run(run_id)
        assert run["worker"] == "cold", run["worker"]
        mb = rss_mb(run["pid"]) or float("nan")
        stop_all(store, [run_id])
        return mb
    finally:
        os.environ[pool.WARM_ENV] = "on"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="1,10,25")
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="/work/main")
    args = parser.parse_args()
    counts = sorted({int(c) for c in args.counts.split(",")} | {1})

    def cell(values: list[float] | None) -> str:
        if not values:
            return "(not measured)"
        return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, " \
               f"max {max(values):.2f}, n={len(values)})"

    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as home:
        os.environ.update({"OPTIMIZER_LAB_HOME": home, "TF_USE_LEGACY_KERAS": "1",
                           "TF_CPP_MIN_LOG_LEVEL": "2", pool.WARM_ENV: "on", pool.HOSTS_ENV: "1",
                           pool.RUNS_PER_HOST_ENV: str(max(counts + [6]))})
        store = RunStore()
        # first, with no host: a host handing a place over could take the cold run
        cold_mb = cold_process_mb(store, args.window)
        print(f"load average {os.getloadavg()[0]:.1f} / {os.cpu_count()} cores", flush=True)
        kept = warm_pool.keep_warm(store)
        try:
            t0 = time.monotonic()
            kept.wait_ready(1, timeout_s=900)
            print(f"host ready {time.monotonic() - t0:.1f} s after keep_warm", flush=True)
            idle_mb = rss_mb(idle_host(store)["pid"]) or float("nan")
            start = starts(store, args.rounds)
            print("\nStart -> first step (default Setup)")
            print(f"  run host, idle           {cell(start['host, idle'])}")
            print(f"  run host, 5 runs busy    {cell(start['host, busy'])}", flush=True)
            rates = throughput(store, counts, args.window)
        finally:
            warm_pool.shutdown()
    print("\nMemory (VmRSS)")
    print(f"  idle host                {idle_mb:8.0f} MB")
    one = rates[1]["rss"]
    for n in counts:
        marginal = "" if n == 1 else f"   marginal {(rates[n]['rss'] - one) / (n - 1):5.1f} MB/run"
        print(f"  host with {n:>2} run(s)      {rates[n]['rss']:8.0f} MB{marginal}")
    print(f"  process per run          {cold_mb:8.0f} MB   marginal {cold_mb:5.0f} MB/run")
    print("\nSteps/s per run in one host (worker column: host "
          f"{rates[counts[0]]['host']})")
    print("  runs   min/run   median/run   host total")
    for n in counts:
        r = rates[n]
        print(f"  {n:>4}   {r['min']:7.1f}   {r['median']:10.1f}   {r['total']:10.1f}")
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    base = baseline_starts(Path(args.baseline), args.rounds)
    print(f"\nStart -> first step, warm worker (one process per run, {args.baseline}): "
          f"{cell(base)}", flush=True)


if __name__ == "__main__":
    main()
