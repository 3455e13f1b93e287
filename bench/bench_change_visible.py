"""Benchmark: a live hyperparameter change -> visible on the Train page.

Starts `streamlit run app.py` (from `--root`, default this checkout) with a fresh
`OPTIMIZER_LAB_HOME`, opens /train in Debian's Chromium (Playwright), starts a long Adam run
and, once it trains, types a new learning rate `--changes` times. For each change it times,
from the Enter key press:

* queued: the `set_hyper` command row exists in the store (the callback ran);
* applied: the run process marked it `done` (it assigns the variable between two steps);
* table: the page's "Hyperparameter changes" table shows the new value;
* marker: the loss chart carries the change's marker (`learning_rate → value`).

Prints every change and the medians, with the load average. Target: <= 1 s to the marker.

    python bench/bench_change_visible.py [--changes 5] [--root DIR]

Not a test: numbers to compare before/after on the same machine (2 shared cores here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _streamlit_server import free_port, health  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SEEN_JS = """(value) => {
  const table = [...document.querySelectorAll('[data-testid="stTable"] td')]
      .some(td => td.innerText.trim() === value);
  const marker = [...document.querySelectorAll('.js-plotly-plot .annotation-text')]
      .some(t => (t.textContent || '').includes('learning_rate → ' + value));
  return [table, marker];
}"""


def serve(root: Path, home: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, OPTIMIZER_LAB_HOME=str(home), PYTHONPATH=str(root),
               TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=root, env=env, stdout=open(home / "streamlit.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while health(port) != "ok":
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("streamlit did not start")
        time.sleep(0.3)
    return proc, f"http://127.0.0.1:{port}"


def command_state(home: Path, value: float) -> str | None:
    con = sqlite3.connect(home / "runs.sqlite", timeout=30)
    try:
        rows = con.execute("SELECT payload, status FROM commands WHERE kind = 'set_hyper'"
                           ).fetchall()
    finally:
        con.close()
    for payload, status in rows:
        if f"{value:g}" in payload or repr(value) in payload:
            return status
    return None


def stop_runs(home: Path) -> None:
    """Kill the run processes this bench started: a run outlives its server by design."""
    con = sqlite3.connect(home / "runs.sqlite", timeout=30)
    try:
        pids = [pid for (pid,) in con.execute("SELECT pid FROM runs WHERE pid IS NOT NULL")]
    finally:
        con.close()
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--changes", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="change-visible-"))
    proc, url = serve(args.root.resolve(), home)
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/train?optimizer=adam&steps=1000000", timeout=120_000)
            page.get_by_role("button", name="Start", exact=True).wait_for(timeout=120_000)
            page.wait_for_timeout(1500)
            page.get_by_role("button", name="Start", exact=True).click()
            page.wait_for_function("() => /status running · step [1-9]/.test(document.body."
                                   "innerText)", timeout=300_000)
            page.wait_for_timeout(2000)
            box = page.get_by_role("spinbutton", name="learning_rate", exact=True)
            for i in range(args.changes):
                value = round(0.0011 + 0.0003 * i, 6)
                text = f"{value:g}"
                box.fill(text)
                start = time.monotonic()
                box.press("Enter")
                times: dict[str, float] = {}
                while len(times) < 4 and time.monotonic() - start < args.timeout:
                    now = time.monotonic() - start
                    state = command_state(home, value)
                    if state is not None:
                        times.setdefault("queued", now)
                    if state == "done":
                        times.setdefault("applied", now)
                    table, marker = page.evaluate(SEEN_JS, text)
                    if table:
                        times.setdefault("table", now)
                    if marker:
                        times.setdefault("marker", now)
                    page.wait_for_timeout(50)
                rows.append(times)
                print(f"change {i + 1} learning_rate={text}: " + ", ".join(
                    f"{k} {times.get(k, float('nan')):.2f} s"
                    for k in ("queued", "applied", "table", "marker")), flush=True)
                page.wait_for_timeout(1500)
            browser.close()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        stop_runs(home)
    print(f"\nmedians over {len(rows)} changes (load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores):")
    for key in ("queued", "applied", "table", "marker"):
        got = [r[key] for r in rows if key in r]
        if got:
            print(f"  {key:8s} {statistics.median(got):6.2f} s  (max {max(got):.2f}, "
                  f"{len(got)}/{len(rows)} seen)")
        else:
            print(f"  {key:8s} never seen within {args.timeout:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
