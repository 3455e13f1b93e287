"""Benchmark: bytes and server CPU per refresh of a live Train page, without TensorFlow.

A fake run (status `running`, owned by the session's cookie token) grows in the store by
`--steps-per-refresh` recorded steps every 0.5 s, written by this script (`RunStore.append`,
the rows of `tests/fake_runs.py`: train loss every step, validation loss/accuracy every 10);
one websocket session (`streamlit_ws.BrowserlessSession`) watches it on /train. Prints the
median bytes received per fragment rerun (its `new_session` to its `script_finished`) and the
server's CPU milliseconds per fragment rerun, for the steps `--from`..`--from + --steps`.
Run it with `--root` on two checkouts to compare them; the bytes do not depend on other load
on the machine, the CPU does a little.

    python bench/bench_refresh_bytes.py [--root DIR] [--from 1500] [--seconds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from class_server import cpu_s, serve, stop_all  # noqa: E402
from streamlit_ws import BrowserlessSession  # noqa: E402


def rows(first: int, last: int) -> list[tuple[int, str, float]]:
    out = [(s, "train_loss", 2.3 * math.exp(-s / 3000) + 0.01 * math.sin(s))
           for s in range(first, last + 1)]
    out += [(s, name, v) for s in range(first, last + 1) if s % 10 == 0
            for name, v in (("val_loss", 2.3 * math.exp(-s / 4000)),
                            ("val_accuracy", 1 - math.exp(-s / 4000)))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--from", dest="start", type=int, default=1500)
    parser.add_argument("--steps-per-refresh", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    from runs.service.ownership import Caller
    from runs.store.run_store import RunStore
    from settings.run_config import RunConfig

    home = Path(tempfile.mkdtemp(prefix="refresh-bytes-"))
    token = secrets.token_urlsafe(32)
    store = RunStore(home / "runs.sqlite")
    config = RunConfig(steps=1_000_000)
    run_id = store.create_run(config.to_json_dict(), owner=Caller(token).owner)
    changes = [(1, k, None, v, "init") for k, v in config.hyperparameters.items()]
    store.append(run_id, scalars=rows(1, args.start), hyper_changes=changes, step=args.start)
    store.update_run(run_id, status="running", pid=os.getpid(), heartbeat=time.time())
    proc, base = serve(root, home, {})
    stop = threading.Event()

    def grow() -> None:
        step = args.start
        while not stop.wait(0.5):
            store.append(run_id, scalars=rows(step + 1, step + args.steps_per_refresh),
                         step=step + args.steps_per_refresh)
            step += args.steps_per_refresh

    writer = threading.Thread(target=grow, daemon=True)
    try:
        session = BrowserlessSession(base + "/train", cookies={"optimizer_lab_browser": token})
        writer.start()
        cpu0 = cpu_s(proc.pid)
        asyncio.run(session.run(time.monotonic() + args.seconds))
        cpu = cpu_s(proc.pid) - cpu0
    finally:
        stop.set()
        stop_all(proc, home)
    fragment = [b for is_fragment, b in session.run_bytes if is_fragment][3:]  # warm
    print(f"root {root}: {len(fragment)} fragment reruns in {args.seconds:g} s, bytes per "
          f"rerun median {statistics.median(fragment) if fragment else float('nan'):.0f} "
          f"(p95 {sorted(fragment)[int(0.95 * (len(fragment) - 1))] if fragment else 0}), "
          f"server CPU {cpu * 1000 / max(len(session.run_bytes), 1):.0f} ms per run "
          f"({len(session.run_bytes)} runs, {cpu:.1f} s CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
