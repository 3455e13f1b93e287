"""Benchmark: a class of N students on one server, each watching a live run of their own.

For each N (`--n 1,10,25,50`) the bench starts a fresh `streamlit run app.py` (from `--root`,
default this checkout; a private `OPTIMIZER_LAB_HOME`), stores one class challenge (the
default setup, `learning_rate` free, goal: the lowest validation loss at the last step; made by
the served checkout's own code) and opens N student sessions on its link
(`/train?challenge=ID`) and one teacher session on its board (`/class_board?challenge=ID`, the
teacher secret entered). Every student loads the page, types a nickname, presses **Start**,
watches its run, and 5 s after its run trains types one new `learning_rate` (a value unique to
the session), then keeps watching until `--duration` seconds after it connected. `--entry
/train` (any page and query) opens that page instead, without a challenge or a teacher. One
table row per N:

* `train@once`: most runs in status `running` at one sample (1/s); `queue max`: the longest
  Start -> "status running, step >= 1" a session saw on its page (`>` = still waiting at the end);
* `steps/s min/med`: per run that trained >= 5 s, (last step - first step) / time between the
  1 s store samples;
* `refresh p50/p95`: a student's fragment rerun's request -> its `script_finished` (seconds;
  requests the server merged into a later run count from their own sending); `board p95`: the
  same for the teacher's board; `rr/s` fragment reruns finished per student per second; `KB/rr`
  mean bytes received per student fragment rerun (its `new_session` to its `script_finished`);
* `srv CPU/RSS`: the Streamlit processes' CPU (% of one core over the window, summed over
  `--servers`) and their largest total RSS; `ms/rr`: its CPU milliseconds per fragment rerun finished (every session's, page runs
  included in the CPU): the cost of one refresh, which other load on the machine changes
  least; `runs RSS`: the largest total RSS of every other process of this data directory (the
  run processes / hosts: every process whose environment holds this `OPTIMIZER_LAB_HOME`);
* `MB/run`: marginal memory, (runs RSS - previous row's) / (runs at once - previous row's);
  the first row divides by its own runs;
* `write p95`: a probe transaction (`BEGIN IMMEDIATE`, one INSERT into `bench_probe`, COMMIT)
  on the store every second: what a record batch waits for the write lock and the disk;
* `xtalk`: two sessions that name the same run as theirs, plus `set_hyper` commands whose run is
  not the run of the session that typed the value;
* `lost`: recorded steps missing in the store: for each run, `train_loss` rows expected at
  every recorded step 1..`runs.step` (the stride rule of `engine.recording.stride`: every step
  to 1,000, then every 10th, 100th, 1,000th) minus the rows present;
* `marker p95`: the time from sending the new `learning_rate` to the first frame that carries
  its marker text `learning_rate → value` (the loss chart's change annotation).

Sessions are `streamlit_ws.BrowserlessSession` clients: Streamlit's websocket protocol spoken
as its frontend speaks it (see that module: page load, fragment auto-rerun timers, message
cache, widget triggers). How they are checked against a browser: `--compare K` opens K real
headless Chromium pages (Debian's `chromium` + Playwright) and K websocket sessions on ONE
server, all pressing Start, and prints per session the requests sent per second, the fragment
reruns finished per second and the bytes received per second and per rerun (Chromium's frames
are counted from Playwright's websocket `framesent` / `framereceived` events and decoded with
the same `parse_forward`). Run on 2026-11-27 with a load average of 35-60 on the 2 cores
(other work on the machine), the two did NOT agree: Chromium sent 0.5-0.7 requests/s (its
renderer, starved of CPU, fires the 0.5 s timer late) and had 0.16-0.28 fragment reruns/s
finished; the websocket sessions sent 1.0-2.1 requests/s and had 0.02-0.07 finished (K=2: the
first two Starts train, the others queue, so the sessions did not watch the same thing; K=1:
both runs trained, 0.26 against 0.05). Repeated the same day with a load average of 5.7
(`--compare 1`), they agree: 1.54 fragment reruns finished per second per Chromium page,
1.59 per websocket session. Under a starved CPU the browser's own timers fire late, which the
websocket client does not imitate: trust the table's rerun rates when the machine has CPU to
spare (its bytes per rerun and the store-side columns do not depend on it).

    python bench/bench_class.py --n 1,5 --duration 30          # quick
    python bench/bench_class.py --n 1,10,25,50 --duration 90
    python bench/bench_class.py --compare 2 --duration 40
    python bench/bench_class.py --root /path/to/old/checkout --n 1,10   # "before"
    python bench/bench_class.py --n 50 --store postgresql --servers 2      # past one server

`--store postgresql` starts a private PostgreSQL server per row (`tests/_postgres.py`: Debian's
`postgresql` package, a Unix socket in a temp directory) and points every server and run host
at it (`OPTIMIZER_LAB_STORE`); `--servers K` starts K Streamlit servers over the one store and
hands the students to them in turn, as a load balancer with sticky sessions would. The store is
sampled through its own interface (`RunStore.frame`, `RunStore.immediate`), either backend.

The server, its processes and the 1-s samples are `bench/class_server.py`; the students and
the teacher `bench/class_sessions.py`; this file makes the rows.

Not a test: numbers to compare before/after on the same machine (2 shared cores here; other
work on the machine shows in every column: the load average is printed with each row).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _postgres import missing_reason, postgres_server  # noqa: E402
from class_server import Samples, sample, serve, stop_all  # noqa: E402
from class_sessions import TEACHER_SECRET, Student, create_challenge, student, teacher  # noqa: E402
from runs.store.files import STORE_ENV  # noqa: E402
from runs.store.run_store import RunStore  # noqa: E402
from streamlit_ws import BrowserlessSession, parse_forward  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


# ----- the row -----------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def expected_records(step: int) -> int:
    """Recorded steps in 1..step under the stride rule of `engine.recording.stride`."""
    count = 0
    for lo, hi, width in ((1, 1_000, 1), (1_001, 10_000, 10), (10_001, 100_000, 100),
                          (100_001, 10**9, 1_000)):
        top = min(step, hi)
        if top >= lo:
            count += top // width - (lo - 1) // width
    return count


def store_checks(store: RunStore, students: list[Student]) -> tuple[int, int]:
    """(cross-talk, lost records) read from the store after the sessions closed."""
    ids = [s.run_id for s in students if s.run_id is not None]
    xtalk = len(ids) - len(set(ids))
    commands = store.frame("SELECT run_id, payload FROM commands WHERE kind = 'set_hyper'", ())
    by_value = {s.lr: s.run_id for s in students}
    for run_id, payload in zip(commands["run_id"], commands["payload"]):
        value = json.loads(payload).get("value")  # a value typed by session i steers i's run
        if value in by_value and int(run_id) != by_value[value]:
            xtalk += 1
    lost = 0
    runs = store.frame("SELECT id, step FROM runs", ())
    for run_id, step in zip(runs["id"], runs["step"].fillna(0)):
        have = store.frame("SELECT COUNT(DISTINCT step) AS n FROM scalars WHERE run_id = ? AND"
                           " name = 'train_loss' AND step BETWEEN 1 AND ?",
                           (int(run_id), int(step)))["n"].iloc[0]
        lost += max(0, expected_records(int(step)) - int(have))
    return xtalk, lost


def steps_per_s(samples: Samples) -> list[float]:
    first: dict[int, tuple[float, int]] = {}
    last: dict[int, tuple[float, int]] = {}
    for t, runs in samples.runs:
        for rid, (status, step) in runs.items():
            if status == "running" and step > 0:
                first.setdefault(rid, (t, step))
                last[rid] = (t, step)
    return [(last[r][1] - first[r][1]) / (last[r][0] - first[r][0])
            for r in first if last[r][0] - first[r][0] >= 5]


@dataclass
class Row:
    n: int
    text: str
    runs_rss: float
    at_once: int


def class_row(n: int, args: argparse.Namespace, previous: Row | None) -> Row:
    home = Path(tempfile.mkdtemp(prefix=f"bench-class-{n}-"))
    board = args.entry is None
    entry, env = args.entry, dict(args.env)
    with contextlib.ExitStack() as stack:
        location = str(home / "runs.sqlite")
        if args.store == "postgresql":  # a private server, stopped when the row is done
            location = stack.enter_context(postgres_server())
            env[STORE_ENV] = location
        if board:
            challenge = create_challenge(args.root, home, location)
            entry = f"/train?challenge={challenge}"
            env.setdefault("OPTIMIZER_LAB_TEACHER_SECRET", TEACHER_SECRET)
        store = RunStore(location)
        servers: list[tuple[subprocess.Popen, str]] = []
        samples, stop = Samples(), threading.Event()
        students = [Student(i, round(0.0011 + 0.00001 * i, 8)) for i in range(n)]
        try:
            servers += [serve(args.root, home, env) for _ in range(args.servers)]
            sampler = threading.Thread(target=sample, daemon=True, args=(
                store, home, [proc.pid for proc, _ in servers], stop, samples))
            sampler.start()
            start = time.monotonic()

            async def everyone() -> tuple[list[BrowserlessSession], BrowserlessSession | None]:
                # the teacher on the first server; students take the servers in turn (what
                # a load balancer with sticky sessions does with new sessions)
                watching = asyncio.create_task(teacher(
                    f"{servers[0][1]}/class_board?challenge={challenge}",
                    time.monotonic() + args.duration)) if board else None
                tasks = []
                for s in students:
                    tasks.append(asyncio.create_task(student(
                        servers[s.index % len(servers)][1] + entry, s,
                        time.monotonic() + args.duration, board)))
                    await asyncio.sleep(args.stagger)
                return await asyncio.gather(*tasks), (await watching if watching else None)

            sessions, board_session = asyncio.run(everyone())
            window = time.monotonic() - start
        finally:
            stop.set()
            for proc, _ in servers:
                stop_all(proc, home)
        xtalk, lost = store_checks(store, students)
    frag = [r for s in sessions for r in s.reruns if r.fragment and r.done is not None]
    refresh = [r.done - r.sent for r in frag]
    board_refresh = [r.done - r.sent for r in (board_session.reruns if board_session else [])
                     if r.fragment and r.done is not None]
    finished = [sum(1 for _, _, f in s.finished if f) for s in sessions]
    frag_bytes = [b for s in sessions for is_fragment, b in s.run_bytes if is_fragment]
    waits = [(s.running - s.pressed) for s in students if s.running and s.pressed]
    waiting = [s for s in students if s.pressed and not s.running]
    queue = max(waits, default=0.0)
    queue_text = f"{queue:.1f}" + (f" ({len(waiting)} >{window:.0f})" if waiting else "")
    rates = steps_per_s(samples)
    at_once = max((sum(1 for st, _ in runs.values() if st == "running")
                   for _, runs in samples.runs), default=0)
    cpu = samples.server_cpu
    cpu_pct = (100 * (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0])
               if len(cpu) > 1 and cpu[-1][0] > cpu[0][0] else float("nan"))
    cpu_per_rerun = ((cpu[-1][1] - cpu[0][1]) * 1000 / sum(finished)
                     if len(cpu) > 1 and sum(finished) else float("nan"))
    runs_rss = max(samples.runs_rss, default=0.0)
    if previous and at_once != previous.at_once:
        marginal = (runs_rss - previous.runs_rss) / (at_once - previous.at_once)
    else:
        marginal = runs_rss / at_once if at_once else float("nan")
    markers = [s.marker - s.changed for s in students if s.marker and s.changed]
    errors = [s.error for s in students if s.error]
    text = (f"{n:>3} | {at_once:>3} | {queue_text:>12} | "
            f"{min(rates, default=float('nan')):6.1f} {statistics.median(rates) if rates else float('nan'):6.1f} | "
            f"{pct(refresh, .5):5.2f} {pct(refresh, .95):5.2f} {pct(board_refresh, .95):5.2f} | "
            f"{statistics.mean(finished) / window if finished else 0:4.2f} | "
            f"{statistics.mean(frag_bytes) / 1024 if frag_bytes else 0:6.1f} | "
            f"{cpu_pct:4.0f}% {max(samples.server_rss, default=0):6.0f} {cpu_per_rerun:6.0f} | "
            f"{runs_rss:7.0f} | "
            f"{marginal:6.0f} | {pct(samples.writes, .95) * 1000:6.1f} | {xtalk:>5} | {lost:>4} | "
            f"{pct(markers, .95):5.2f} ({len(markers)}/{n}) | {os.getloadavg()[0]:4.1f}")
    if errors:
        text += f"\n      errors: {errors[:3]}"
    return Row(n, text, runs_rss, at_once)


HEADER = ("  N | run | queue max s  | steps/s min  med | refresh p50 p95 board p95 | rr/s | "
          "KB/rr  | "
          "srv CPU  RSS MB  ms/rr | runs RSS | MB/run | write p95 ms | xtalk | lost | marker p95 s "
          "(seen) | load")


# ----- browser vs websocket client ---------------------------------------------------------------
def compare(args: argparse.Namespace) -> None:
    """K Chromium pages and K websocket sessions on one server: reruns/s and bytes per session."""
    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="bench-class-compare-"))
    proc, base = serve(args.root, home, dict(args.env))
    url = base + (args.entry or "/train")
    results: list[str] = []
    try:
        students = [Student(i, round(0.0011 + 0.00001 * i, 8)) for i in range(args.compare)]
        holder: dict[str, list[BrowserlessSession]] = {}

        def ws_side() -> None:
            async def everyone() -> list[BrowserlessSession]:
                until = time.monotonic() + args.duration
                return await asyncio.gather(*(student(url, s, until) for s in students))
            holder["sessions"] = asyncio.run(everyone())

        thread = threading.Thread(target=ws_side)
        thread.start()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=CHROMIUM_ARGS)
            counters = []
            pages = []
            for _ in range(args.compare):
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                counter = {"bytes": 0, "finished": 0, "start": time.monotonic(), "sent": 0}

                def on_ws(ws, counter=counter) -> None:
                    ws.on("framesent", lambda _, counter=counter: counter.__setitem__(
                        "sent", counter["sent"] + 1))

                    def frame(payload, counter=counter) -> None:
                        if isinstance(payload, (bytes, bytearray)):
                            counter["bytes"] += len(payload)
                            parsed = parse_forward(bytes(payload))
                            if parsed.finished and parsed.fragment_ids:
                                counter["finished"] += 1
                    ws.on("framereceived", frame)
                page.on("websocket", on_ws)
                page.goto(url, timeout=180_000)
                pages.append(page)
                counters.append(counter)
            for page in pages:
                page.get_by_role("button", name="Start", exact=True).wait_for(timeout=180_000)
                page.get_by_role("button", name="Start", exact=True).click()
            deadline = time.monotonic() + args.duration
            while time.monotonic() < deadline:
                pages[0].wait_for_timeout(500)
            for counter in counters:
                span = time.monotonic() - counter["start"]
                results.append(f"chromium  sent/s {counter['sent'] / span:5.2f}  "
                               f"rr/s {counter['finished'] / span:5.2f}  "
                               f"KB/s {counter['bytes'] / span / 1024:7.1f}  KB/rr "
                               f"{counter['bytes'] / max(counter['finished'], 1) / 1024:6.1f}")
            browser.close()
        thread.join()
        for s in holder["sessions"]:
            span = (s.frames[-1][0] - s.frames[0][0]) if s.frames else 1.0
            done = sum(1 for _, _, f in s.finished if f)
            results.append(f"websocket sent/s {len(s.reruns) / span:5.2f}  "
                           f"rr/s {done / span:5.2f}  KB/s "
                           f"{s.bytes_in / span / 1024:7.1f}  KB/rr "
                           f"{s.bytes_in / max(done, 1) / 1024:6.1f}")
        results.append("(KB/rr here: all bytes received / fragment reruns finished, the same "
                       "count for both kinds of session)")
    finally:
        stop_all(proc, home)
    print(f"compare: {args.compare} Chromium pages + {args.compare} websocket sessions, "
          f"{args.duration:g} s, load {os.getloadavg()[0]:.1f}")
    print("\n".join(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose app.py is served")
    parser.add_argument("--n", default="1,10,25,50", help="session counts, comma-separated")
    parser.add_argument("--duration", type=float, default=90.0,
                        help="seconds each session stays connected")
    parser.add_argument("--entry", default=None,
                        help="the page every session opens, with its query (e.g. /train): "
                             "no challenge, no teacher (default: the bench's challenge)")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the run store: the embedded SQLite file, or a private "
                             "PostgreSQL server (Debian's postgresql package) started per row")
    parser.add_argument("--servers", type=int, default=1,
                        help="Streamlit servers over the one store (students take them in turn)")
    parser.add_argument("--stagger", type=float, default=0.1,
                        help="seconds between two sessions connecting")
    parser.add_argument("--env", action="append", default=[], type=lambda v: v.split("=", 1),
                        metavar="KEY=VALUE", help="extra environment of the server")
    parser.add_argument("--compare", type=int, default=0, metavar="K",
                        help="instead of the table: K Chromium pages vs K websocket sessions")
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    if args.compare:
        compare(args)
        return 0
    if not 1 <= args.servers <= 8:
        parser.error(f"--servers {args.servers} refused: must be in [1, 8]")
    if args.store == "postgresql" and missing_reason():
        parser.error(f"--store postgresql: {missing_reason()}")
    counts = [int(v) for v in args.n.split(",") if v.strip()]
    if any(not 1 <= c <= 200 for c in counts):
        parser.error(f"--n {args.n!r} refused: each count must be in [1, 200]")
    print(f"bench_class: root {args.root}, entry {args.entry or 'a challenge + its board'}, {args.servers} server(s) over {args.store}, {args.duration:g} s per N, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start", flush=True)
    print(HEADER, flush=True)
    previous = None
    for n in counts:
        previous = class_row(n, args, previous)
        print(previous.text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
