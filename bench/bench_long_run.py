"""Benchmark: a long run watched live - is memory flat, the store bounded, the page responsive?

    PYTHONPATH=. python bench/bench_long_run.py [--steps 200000] [--every 5] [--load-every 30]
        [--gc] [--keep DIR]

A 200,000-step run of the 2-D moons MLP (Adam, batch 128, eval every 100) in a real worker
subprocess with FULL recording (`--full-recording`: train loss and slot statistics at every
step, histograms every 20) while `streamlit run app.py` serves the Train page and a headless
Debian Chromium (Playwright) watches the run: the page is opened on the run through the
Train page's run selector (a view-only session: the bench starts the run, not the page).

Every `--every` seconds one sample:

* `step`: `runs.step` in the store;
* `run MiB` / `server MiB`: VmRSS of the worker and of the Streamlit server
  (/proc/<pid>/status); `chrome MiB`: the summed PSS of the Chromium processes started here
  (/proc/<pid>/smaps_rollup; PSS, so shared pages are not counted once per process);
* `store MiB`: runs.sqlite + runs.sqlite-wal;
* `refresh s`: on the watching page, the time between two successive changes of the step
  number in the live status line (median of the measurements that ended in the interval; the
  fragment re-reads the store every 0.5 s, so about 0.5 s is nominal: more means the server
  or the browser cannot keep up). Measured back to back by the main thread; the processes and
  the store are sampled by a thread, so a slow page never delays a sample;
* `load s` (every `--load-every` seconds): a fresh tab: open the Train page, pick the run in
  the selector, until its status line shows;
* `tab JS heap` / `tab DOM nodes` (every `--every` seconds, by the main thread): the watching
  tab's own JavaScript heap in use and its DOM node count (Chrome DevTools Protocol
  `Performance.getMetrics`), apart from the browser's other processes.

With `--gc` a major garbage collection of the watching tab (CDP `HeapProfiler.collectGarbage`)
runs before each tab sample, so the samples show the memory the page still holds, not the
garbage the browser has not collected yet. Measured here (stop 21): without it the renderer's
PSS grew x1.56 over a 10-minute run; with it the renderer and the JS heap stayed flat (0.27 GiB
and 41-44 MiB from the first minute to the last): the growth is uncollected garbage (each
0.5 s refresh ships and parses the charts' data again; a page that never idles does not
trigger Chromium's memory reducer), not a leak. Less to parse and draw per refresh (markers
only up to `components.figures.MARKERS_UP_TO` points, long arrays as typed arrays) brought the
same 200,000-step run, side by side in one sitting, from renderer x1.64 / Chromium sum x1.40
(median) and refresh p95 1.97 s to renderer x1.29 / sum x1.19 (peak x1.04) and p95 1.07 s;
with less server work per refresh as well (NumPy arrays, the cached hyperparameter trace),
sum x1.20 (peak x1.19) and p95 0.82 s (p99 2.81 -> 1.12 s).

The summary compares the first and the last 10 % of the run (by step): peak and median RSS
and their ratio (1.0 = flat), the store's bytes per step, steps/s, the percentiles (p50, p90,
p95, p99) of the page's refresh and load times, and the watching tab's heap and DOM nodes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
from _streamlit_server import streamlit_server
from settings.run_config import RunConfig
from runs.store.run_store import RunStore

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
STATUS = re.compile(r"Run #(\d+) · status (\w+) · step (\d+)/(\d+)")
MiB = 2 ** 20


@dataclass
class Sample:
    t: float  # seconds since the worker started
    step: int
    run_rss: int
    server_rss: int
    chrome_pss: int
    store_bytes: int
    chrome_by_type: dict[str, int] | None = None  # PSS per Chromium process type
    refresh_s: float | None = None  # median of the page refreshes measured in this interval
    load_s: float | None = None  # a fresh page load finished in this interval


class Sampler(threading.Thread):
    """Samples the processes and the store every `every` seconds (the page is measured by the
    main thread: Playwright's sync API stays on one thread)."""

    def __init__(self, store: RunStore, run_id: int, worker: int, server: int, every: float,
                 start: float):
        super().__init__(name="sampler", daemon=True)
        self.store, self.run_id, self.worker, self.server = store, run_id, worker, server
        self.every, self.start_time = every, start
        self.samples: list[Sample] = []
        self.done = threading.Event()

    def take(self) -> Sample:
        by_type = chrome_pss_by_type()
        return Sample(time.monotonic() - self.start_time, self.store.run(self.run_id)["step"],
                      rss(self.worker), rss(self.server), sum(by_type.values()),
                      self.store.size_bytes(), by_type)

    def run(self) -> None:
        while not self.done.is_set():
            tick = time.monotonic()
            sample = self.take()
            if sample.run_rss:  # the worker is alive
                self.samples.append(sample)
            self.done.wait(max(0.0, self.every - (time.monotonic() - tick)))


# ----- processes ------------------------------------------------------------------------------
def rss(pid: int | None) -> int:
    """VmRSS of `pid` in bytes (0 when it is gone)."""
    if not pid:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(root: int) -> list[int]:
    parents = _parents()
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parents.items() if pp == pid]
        found += children
        frontier += children
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def server_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1].encode()
    for pid in descendants(os.getpid()):
        argv = cmdline(pid).split(b"\0")
        if b"streamlit" in argv and port in argv:
            return pid
    raise LookupError(f"no streamlit process of this bench serves {url}")


def pss(pid: int) -> int:
    """Proportional set size of `pid` in bytes (shared pages split between their users)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def chrome_pss_by_type() -> dict[str, int]:
    """PSS of the Chromium processes started by this bench, summed per process type
    (`--type=renderer`, `gpu-process`, `utility`, `zygote`; `browser` for the main process):
    which one grows tells a page's memory from the browser's own."""
    out: dict[str, int] = {}
    for pid in descendants(os.getpid()):
        argv = cmdline(pid)
        if b"chrom" not in argv:
            continue
        kind = re.search(rb"--type=([\w-]+)", argv)
        name = kind.group(1).decode() if kind else "browser"
        out[name] = out.get(name, 0) + pss(pid)
    return out


# ----- the page -------------------------------------------------------------------------------
def open_run(page, url: str, run_id: int, timeout_ms: float = 120_000) -> None:
    """Open the Train page and pick `run_id` in its run selector (unless already shown)."""
    page.goto(f"{url}/train")
    page.get_by_role("button", name="Start", exact=True).wait_for(timeout=timeout_ms)
    shown = page.get_by_text(re.compile(rf"Run #{run_id} · status"))
    if shown.count() == 0:
        page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').first.click()
        page.get_by_role("option", name=re.compile(rf"^#{run_id} ")).click()
    shown.first.wait_for(timeout=timeout_ms)


def page_step(page) -> int | None:
    match = STATUS.search(page.locator('[data-testid="stMain"]').inner_text(timeout=60_000))
    return int(match.group(3)) if match else None


def wait_step_change(page, after: int | None, timeout_ms: float) -> int | None:
    """Wait until the status line shows a step other than `after`; return it."""
    page.wait_for_function(
        """([after]) => {
            const m = document.body.innerText.match(/status (\\w+) · step (\\d+)\\//);
            return m && (Number(m[2]) !== after || m[1] !== 'running');
        }""",
        arg=[after if after is not None else -1], timeout=timeout_ms, polling=20,
    )
    return page_step(page)


def refresh_time(page, timeout_ms: float = 120_000) -> float | None:
    """Seconds between two successive changes of the status line's step number."""
    try:
        first = wait_step_change(page, page_step(page), timeout_ms)  # align on a change
        start = time.perf_counter()
        second = wait_step_change(page, first, timeout_ms)
        elapsed = time.perf_counter() - start
        return None if second is None or second == first else elapsed
    except Exception as error:  # noqa: BLE001 - the run ended meanwhile, or the page timed out
        print(f"  (refresh not measured: {type(error).__name__}: {str(error)[:200]})",
              flush=True)
        return None


def tab_metrics(cdp, collect_garbage: bool = False) -> tuple[float, float] | None:
    """(JS heap used MiB, DOM nodes) of the watching tab, from the Chrome DevTools Protocol
    (`Performance.getMetrics`): the tab's own memory, apart from the browser's other
    processes and the fresh-load tabs that the PSS sum also counts. `collect_garbage`: after
    a major garbage collection (`HeapProfiler.collectGarbage`)."""
    try:
        if collect_garbage:
            cdp.send("HeapProfiler.collectGarbage")
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        return metrics["JSHeapUsedSize"] / MiB, metrics["Nodes"]
    except Exception as error:  # noqa: BLE001 - reported as a missing value
        print(f"  (tab metrics failed: {type(error).__name__}: {str(error)[:200]})", flush=True)
        return None


def tab_summary(tab: list[tuple[int, float, float]], steps: int) -> None:
    """First vs last 10 % (by step) of the watching tab's JS heap and DOM node count."""
    first = [r for r in tab if 0 < r[0] <= 0.1 * steps]
    last = [r for r in tab if r[0] >= 0.9 * steps]
    for label, index, unit in (("tab JS heap used", 1, " MiB"), ("tab DOM nodes", 2, "")):
        a, b = [r[index] for r in first], [r[index] for r in last]
        if a and b:
            print(f"  {label:<23}: peak {max(a):7.1f} -> {max(b):7.1f}{unit} "
                  f"(x{max(b) / max(a):.3f}), median {statistics.median(a):7.1f} -> "
                  f"{statistics.median(b):7.1f}{unit} "
                  f"(x{statistics.median(b) / statistics.median(a):.3f})")
        else:
            print(f"  {label:<23}: not enough samples")


def load_time(context, url: str, run_id: int) -> float | None:
    page = context.new_page()
    try:
        start = time.perf_counter()
        open_run(page, url, run_id)
        return time.perf_counter() - start
    except Exception as error:  # noqa: BLE001 - reported as a missing value
        print(f"  (fresh load failed: {type(error).__name__}: {str(error)[:200]})", flush=True)
        return None
    finally:
        page.close()


# ----- statistics -----------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def merge(samples: list[Sample], page: list[tuple[float, int, float]],
          loads: list[tuple[float, int, float]]) -> None:
    """Attach the page measurements (t, step, seconds) to the sample interval they ended in."""
    edges = [0.0] + [s.t for s in samples]
    for sample, lo, hi in zip(samples, edges, edges[1:]):
        inside = [v for t, _, v in page if lo < t <= hi]
        sample.refresh_s = statistics.median(inside) if inside else None
        done = [v for t, _, v in loads if lo < t <= hi]
        sample.load_s = done[0] if done else None


def print_table(samples: list[Sample]) -> None:
    print(f"{'t s':>7} {'step':>8} {'run MiB':>8} {'server MiB':>10} {'chrome MiB':>10} "
          f"{'store MiB':>9} {'refresh s':>9} {'load s':>7}")
    for s in samples:
        print(f"{s.t:7.1f} {s.step:8d} {s.run_rss / MiB:8.1f} {s.server_rss / MiB:10.1f} "
              f"{s.chrome_pss / MiB:10.1f} {s.store_bytes / MiB:9.1f} "
              f"{fmt(s.refresh_s, '9.2f'):>9} {fmt(s.load_s, '7.2f'):>7}")


def summary(samples: list[Sample], page: list[tuple[float, int, float]],
            loads: list[tuple[float, int, float]], steps: int, train_s: float,
            store_bytes: int, status: str) -> None:
    first = [s for s in samples if 0 < s.step <= 0.1 * steps]
    last = [s for s in samples if s.step >= 0.9 * steps]
    print(f"\nsummary ({len(samples)} samples; first 10 % = {len(first)} samples with 0 < step <= "
          f"{steps // 10:,}, last 10 % = {len(last)} samples with step >= {9 * steps // 10:,})")
    print(f"  run                    : {status}")
    for label, key in (("run process RSS", "run_rss"), ("server RSS", "server_rss"),
                       ("chromium PSS (sum)", "chrome_pss")):
        a = [getattr(s, key) / MiB for s in first if getattr(s, key)]
        b = [getattr(s, key) / MiB for s in last if getattr(s, key)]
        if a and b:
            print(f"  {label:<23}: peak {max(a):7.1f} -> {max(b):7.1f} MiB (x{max(b) / max(a):.3f})"
                  f", median {statistics.median(a):7.1f} -> {statistics.median(b):7.1f} MiB "
                  f"(x{statistics.median(b) / statistics.median(a):.3f})")
        else:
            print(f"  {label:<23}: not enough samples")
    kinds = sorted({k for s in first + last for k in (s.chrome_by_type or {})})
    for kind in kinds:
        a = [s.chrome_by_type.get(kind, 0) / MiB for s in first if s.chrome_by_type]
        b = [s.chrome_by_type.get(kind, 0) / MiB for s in last if s.chrome_by_type]
        if a and b and statistics.median(a):
            print(f"    chromium {kind:<14}: median {statistics.median(a):7.1f} -> "
                  f"{statistics.median(b):7.1f} MiB "
                  f"(x{statistics.median(b) / statistics.median(a):.3f})")
    print(f"  store                  : {store_bytes:,} bytes for {steps:,} steps = "
          f"{store_bytes / steps:,.0f} bytes/step")
    print(f"  throughput             : {steps / train_s:,.1f} steps/s ({train_s:.1f} s from step 0 "
          "(model built, first evaluation) to the end)")
    for label, rows in (
        ("page refresh (s)", page),
        ("  first 10 %", [r for r in page if r[1] <= 0.1 * steps]),
        ("  last 10 %", [r for r in page if r[1] >= 0.9 * steps]),
        ("fresh page load (s)", loads),
        ("  first 10 %", [r for r in loads if r[1] <= 0.1 * steps]),
        ("  last 10 %", [r for r in loads if r[1] >= 0.9 * steps]),
    ):
        values = [v for _, _, v in rows]
        if values:
            print(f"  {label:<23}: p50 {pct(values, 50):6.2f}  p90 {pct(values, 90):6.2f}  "
                  f"p95 {pct(values, 95):6.2f}  p99 {pct(values, 99):6.2f}  "
                  f"max {max(values):6.2f}  (n={len(values)})")
        else:
            print(f"  {label:<23}: no measurement")


# ----- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="run length (smoke: 5000)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--load-every", type=float, default=30.0,
                        help="seconds between fresh page loads (0 = never)")
    parser.add_argument("--gc", action="store_true",
                        help="a major garbage collection of the watching tab before each sample")
    parser.add_argument("--keep", metavar="DIR", help="use DIR as the data directory and keep it")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Debian's chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    config = RunConfig(dataset="moons", model="mlp", steps=args.steps, eval_every=100)
    page_times: list[tuple[float, int, float]] = []  # (t, step, refresh seconds)
    load_times: list[tuple[float, int, float]] = []  # (t, step, load seconds)
    tab_samples: list[tuple[int, float, float]] = []  # (step, JS heap MiB, DOM nodes)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(args.keep or tmp)
        home.mkdir(parents=True, exist_ok=True)
        store = RunStore(home / "runs.sqlite")
        with streamlit_server(home) as url, sync_playwright() as pw:
            server = server_pid(url)
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            run_id = store.create_run(config.to_json_dict(), name="bench_long_run")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
            log = open(home / f"run-{run_id}.log", "wb")
            start = time.monotonic()
            worker = subprocess.Popen(
                [sys.executable, "-m", "runs.process.worker", "--store", str(store.path),
                 "--run-id", str(run_id), "--full-recording"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
            print(f"moons MLP, Adam, {args.steps:,} steps, full recording; worker pid "
                  f"{worker.pid}, server pid {server}, {url}"
                  + ("; a major GC of the watching tab before each sample" if args.gc else ""),
                  flush=True)
            sampler = Sampler(store, run_id, worker.pid, server, args.every, start)
            sampler.start()
            try:
                page = context.new_page()
                page.set_default_timeout(120_000)
                cdp = context.new_cdp_session(page)
                cdp.send("Performance.enable")
                open_run(page, url, run_id)  # while the worker imports TensorFlow
                last_load = last_print = last_tab = time.monotonic()
                while worker.poll() is None:
                    refresh = refresh_time(page)
                    now = time.monotonic()
                    if refresh is not None:
                        page_times.append((now - start, page_step(page) or 0, refresh))
                    if now - last_tab >= args.every:
                        last_tab = now
                        metrics = tab_metrics(cdp, collect_garbage=args.gc)
                        if metrics is not None:
                            tab_samples.append((store.run(run_id)["step"], *metrics))
                    if args.load_every and now - last_load >= args.load_every:
                        last_load = now
                        step = store.run(run_id)["step"]
                        load = load_time(context, url, run_id)
                        if load is not None:
                            load_times.append((time.monotonic() - start, step, load))
                    if now - last_print >= 60 and sampler.samples:
                        last_print = now
                        s = sampler.samples[-1]
                        print(f"  t={s.t:7.1f} s step {s.step:,} run {s.run_rss / MiB:.0f} MiB "
                              f"server {s.server_rss / MiB:.0f} MiB store "
                              f"{s.store_bytes / MiB:.1f} MiB refresh {fmt(refresh, '.2f')} s",
                              flush=True)
            finally:
                if worker.poll() is None:
                    worker.kill()
                worker.wait()
                sampler.done.set()
                sampler.join()
                log.close()
                browser.close()
            run = store.run(run_id)
            size = store.size_bytes()
            # training began when the worker wrote its step-0 batch (the `init` hyper rows)
            began = float(store.hyper_changes(run_id)["created"].min())
        samples = sampler.samples
        merge(samples, page_times, load_times)
        print()
        print_table(samples)
        steps = run["step"] or args.steps
        summary(samples, page_times, load_times, steps, run["updated"] - began, size,
                f"{run['status']} ({run['message']}), worker exit code {worker.returncode}")
        tab_summary(tab_samples, steps)
    return 0 if run["status"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
