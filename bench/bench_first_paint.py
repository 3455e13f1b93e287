"""How long until the lab is usable: `import app`, `python -m lab_cli --help`, and the
first useful paint of `streamlit run app.py` in headless Chromium.

    python bench/bench_first_paint.py [--repeats 3] [--no-browser] [--compare-root DIR]
                                       [--poll health|browser]

Prints, per measurement, the median of `--repeats` fresh processes (and every sample):

* `import app`: wall seconds of a fresh `python -c "import app"` with Streamlit's bare mode
  (no server), its peak resident memory (MiB, `ru_maxrss` of the child) and whether TensorFlow
  ended up in `sys.modules`;
* `--help`: wall seconds of `python -m lab_cli --help` and `... train --help`;
* first paint: seconds from `Popen(streamlit run app.py)` until the Home page's heading
  "Optimizer Lab" is visible in Chromium, and then until the Train page's Start button is
  visible after navigating to /train (Chromium is started before the server, so its own start
  is not counted); then a click on Start at once (the default Setup) and the seconds until
  the run's first step is in the store: the first Start on a fresh server. The page is opened once the server answers `/_stcore/health` (polled every
  20 ms with urllib), as a user opens the address the server prints. `--poll browser` opens
  it the way this bench did until stop 24 instead: `page.goto` retried every 0.1 s until the
  port answers. Each refused attempt makes Chromium draw an error page, ~10 of them on 2 cores
  while the server starts, which delayed the server's own start by 0.2-0.7 s here (health at
  1.35-2.15 s against 0.8-1.35 s with urllib, same tree, same hour).

Numbers are wall-clock on a shared machine: compare side by side, not with a fixed target.
`--compare-root DIR` (another checkout, e.g. `git archive HEAD | tar -x -C DIR`; may be
repeated) measures that tree too, alternating the trees in every repeat, and prints every
median and the ratio other / this.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._streamlit_server import free_port  # noqa: E402  (a tiny helper, no TF)

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
PAINT_TIMEOUT_S = 120.0
POLLS = ("health", "browser")

# The child prints its own import time, peak RSS and whether TF got loaded.
IMPORT_APP = """
import resource, sys, time
start = time.perf_counter()
import app
elapsed = time.perf_counter() - start
rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print({"s": elapsed, "rss_mib": rss_mib,
       "tensorflow": "tensorflow" in sys.modules})
"""


def _env(home: str, root: Path) -> dict[str, str]:
    return dict(os.environ, OPTIMIZER_LAB_HOME=home, PYTHONPATH=str(root),
                TF_CPP_MIN_LOG_LEVEL="2")


def time_import_app(home: str, root: Path) -> dict:
    """One fresh `import app` (Streamlit bare mode: the page calls are no-ops)."""
    wall = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", IMPORT_APP], cwd=root, env=_env(home, root),
                         capture_output=True, text=True, timeout=300, check=True)
    result = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own child's dict
    result["wall_s"] = time.perf_counter() - wall
    return result


def time_cli(home: str, root: Path, args: list[str]) -> float:
    """Wall seconds of one `python -m lab_cli ARGS` (exit status must be 0)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lab_cli", *args], cwd=root,
                   env=_env(home, root), capture_output=True, timeout=300, check=True)
    return time.perf_counter() - start


def wait_healthy(url: str, proc: subprocess.Popen, start: float) -> None:
    """Return once `url`/_stcore/health answers 200 (polled every 20 ms, a cheap client).

    Raises:
        RuntimeError: the server exited first, or `PAINT_TIMEOUT_S` passed.
    """
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:  # connection refused until the server listens
            pass
        if proc.poll() is not None or time.perf_counter() - start > PAINT_TIMEOUT_S:
            raise RuntimeError(f"the server did not answer {url}/_stcore/health")
        time.sleep(0.02)


def time_first_start(page, home: Path) -> float:
    """Seconds from a click on the Train page's Start (the default Setup) to the run's first
    step in the store (`runs.step` >= 1: its first batch of records committed). The run is
    stopped then: its host would train it on after the server ends, beside the next sample."""
    from runs.service import control
    from runs.store.run_store import RunStore

    page.get_by_role("button", name="Start", exact=True).first.click()
    clicked = time.perf_counter()
    store = RunStore(home / "runs.sqlite")
    while time.perf_counter() - clicked < PAINT_TIMEOUT_S:
        runs = store.runs()
        if len(runs) and int(runs["step"].max()) >= 1:
            elapsed = time.perf_counter() - clicked
            control.stop(store, int(runs["id"].iloc[0]))
            return elapsed
        time.sleep(0.02)
    raise RuntimeError("the first run did not record a step")


def time_first_paint(browser, home: str, root: Path, poll: str = "health"
                     ) -> tuple[float, float, float]:
    """(seconds to the Home heading, seconds to the Train page's Start button) from the
    server's `Popen`, and seconds from the first click on Start to the run's first step;
    `poll` says how the page waits for the server (module docstring)."""
    port = free_port()
    log = open(Path(home) / "streamlit.log", "w")
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=root, env=_env(home, root), stdout=log, stderr=subprocess.STDOUT)
    try:
        page = browser.new_page()
        url = f"http://127.0.0.1:{port}"
        if poll == "health":
            wait_healthy(url, proc, start)
        while True:  # (--poll browser) the port opens some time after Popen
            try:
                page.goto(url, timeout=5_000)
                break
            except Exception:  # noqa: BLE001 - connection refused until the server listens
                if time.perf_counter() - start > PAINT_TIMEOUT_S or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        page.get_by_role("heading", name="Optimizer Lab").first.wait_for(
            state="visible", timeout=PAINT_TIMEOUT_S * 1000)
        home_s = time.perf_counter() - start
        page.goto(f"{url}/train", timeout=PAINT_TIMEOUT_S * 1000)
        page.get_by_role("button", name="Start", exact=True).first.wait_for(
            state="visible", timeout=PAINT_TIMEOUT_S * 1000)
        train_s = time.perf_counter() - start
        first_start_s = time_first_start(page, Path(home))
        page.close()
        return home_s, train_s, first_start_s
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _median(samples: list[float]) -> str:
    return f"{statistics.median(samples):.2f} (samples {', '.join(f'{s:.2f}' for s in samples)})"


def measure_once(root: Path, browser, poll: str = "health") -> dict[str, float]:
    """One sample of every measurement of the tree at `root`."""
    with tempfile.TemporaryDirectory() as home:
        imported = time_import_app(home, root)
        sample = {"import_app_s": imported["s"], "import_app_rss_mib": imported["rss_mib"],
                  "import_app_loads_tensorflow": float(imported["tensorflow"]),
                  "cli_help_s": time_cli(home, root, ["--help"]),
                  "cli_train_help_s": time_cli(home, root, ["train", "--help"])}
        if browser is not None:
            (sample["home_heading_s"], sample["train_start_button_s"],
             sample["first_start_to_step_s"]) = time_first_paint(browser, home, root, poll)
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--poll", choices=POLLS, default="health",
                        help="how the page waits for the server: health (default) or browser "
                             "(retried page loads, this bench before stop 24)")
    parser.add_argument("--compare-root", type=Path, action="append", default=[],
                        help="another checkout to measure alternately (e.g. the one before); "
                             "may be given more than once")
    args = parser.parse_args()
    roots = {"this": ROOT}
    for index, root in enumerate(args.compare_root):
        roots[f"compare{index + 1}"] = root.resolve()
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in roots}
    play = browser = None
    if not args.no_browser:
        from playwright.sync_api import sync_playwright

        play = sync_playwright().start()
        browser = play.chromium.launch(executable_path=shutil.which("chromium"),
                                       args=CHROMIUM_ARGS)
    try:
        for _ in range(args.repeats):  # alternate the trees: the machine's load hits both
            for label, root in roots.items():
                samples[label].append(measure_once(root, browser, args.poll))
    finally:
        if browser is not None:
            browser.close()
            play.stop()
    print(f"page opened after: {args.poll}")
    for label, root in roots.items():
        print(f"== {label}: {root}")
        for key in samples[label][0]:
            print(f"  {key:30} {_median([s[key] for s in samples[label]])}")
    for label in [k for k in roots if k != "this"]:
        print(f"== ratio {label} / this (medians; > 1: this tree is faster or smaller)")
        for key in samples["this"][0]:
            this = statistics.median(s[key] for s in samples["this"])
            other = statistics.median(s[key] for s in samples[label])
            if this and not key.endswith("tensorflow"):
                print(f"  {key:30} {other / this:.2f}")
    print(json.dumps({label: samples[label] for label in roots}))


if __name__ == "__main__":
    main()
