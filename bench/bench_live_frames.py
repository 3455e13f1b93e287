"""Blank chart frames of a running Train page in headless Chromium.

Starts `streamlit run app.py` (from `--root`, default this checkout) on a free port with a fresh
`OPTIMIZER_LAB_HOME`, opens /train in Debian's Chromium (Playwright), starts a 100,000-step run
and, once the status line says it is running, samples the plot DOM `--samples` times every
`--every` seconds. A frame is blank when a `.js-plotly-plot` on the page has drawn no line
(no SVG trace path with points) nor heatmap image, or when no plot is on the page at all. It
also counts chart elements re-created between samples (a plot div not seen in the previous
sample). Prints `blank frames / samples`, the re-created count and the plot counts per frame;
screenshots go to `--shots` if given.

    python bench/bench_live_frames.py                 # this checkout
    python bench/bench_live_frames.py --root /tmp/before --samples 20

Not a test: a number to compare before/after on the same machine (2 shared cores here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _streamlit_server import free_port, health  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking"]
FRAME_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const drawn = plots.filter(p =>
      [...p.querySelectorAll('.scatterlayer .trace path')].some(e =>
          (e.getAttribute('d') || '').length > 2)
      || p.querySelector('.heatmaplayer image, .hm image'));
  const fresh = plots.filter(p => !p.__benchSeen);
  plots.forEach(p => { p.__benchSeen = true; });
  const status = (document.body.innerText.match(/step (\\d+)/) || [0, -1])[1];
  return [plots.length, drawn.length, fresh.length, Number(status)];
}"""


def serve(root: Path, home: Path) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` in `root`; returns the process and its base URL (health ok)."""
    port = free_port()
    env = dict(os.environ, OPTIMIZER_LAB_HOME=str(home), PYTHONPATH=str(root),
               TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=root, env=env, stdout=open(home / "streamlit.log", "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while health(port) != "ok":
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError((home / "streamlit.log").read_text()[-2000:])
        time.sleep(0.5)
    return proc, f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--shots", type=Path, default=None, help="directory for screenshots")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="bench-frames-"))
    proc, url = serve(args.root.resolve(), home)
    blank, recreated, counts = 0, 0, []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(180_000)
            page.goto(f"{url}/train")
            page.get_by_role("button", name="Start", exact=True).wait_for()
            box = page.get_by_role("spinbutton", name="steps", exact=True)
            box.fill("100000")
            box.press("Enter")
            page.wait_for_timeout(1500)
            page.get_by_role("button", name="Start", exact=True).click()
            page.get_by_text("status running").first.wait_for()
            page.wait_for_function("() => { const p = document.querySelector('.js-plotly-plot');"
                                   " return p && p.data && p.data.length; }")
            for index in range(args.samples):
                time.sleep(args.every)
                plots, drawn, fresh, step = page.evaluate(FRAME_JS)
                counts.append((plots, drawn, fresh, step))
                blank += plots == 0 or drawn < plots
                recreated += fresh if index else 0
                if args.shots:
                    args.shots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(args.shots / f"frame-{index:02d}.png"))
            browser.close()
    finally:
        sys.path.insert(0, str(args.root.resolve()))
        os.environ["OPTIMIZER_LAB_HOME"] = str(home)
        try:
            from runs.service import control
            from runs.store.run_store import RunStore

            store = RunStore()
            for run_id in store.runs()["id"]:
                try:
                    control.stop(store, int(run_id))
                except (KeyError, ValueError):
                    pass
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"root {args.root}: blank frames {blank} / {args.samples} samples; chart elements "
          f"re-created between samples {recreated}\n(plots, plots drawn, plots new, run step per frame: "
          f"{counts})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
