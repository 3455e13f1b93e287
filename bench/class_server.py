"""The load benchmarks' server side: `streamlit run app.py` of a checkout on a free port, every
process of its data directory, and the store and process samples taken once a second
(`bench/bench_class.py`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _streamlit_server import free_port, health  # noqa: E402
from runs.store.run_store import RunStore  # noqa: E402

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


# ----- the server and its processes ---------------------------------------------------------------
def serve(root: Path, home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` of `root` on a free port with `OPTIMIZER_LAB_HOME=home`."""
    port = free_port()
    full = dict(os.environ, OPTIMIZER_LAB_HOME=str(home), PYTHONPATH=str(root),
                TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", **env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=root, env=full, stdout=open(home / "streamlit.log", "w"),
        stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while health(port) != "ok":
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"streamlit did not start: {(home / 'streamlit.log').read_text()}")
        time.sleep(0.3)
    return proc, f"http://127.0.0.1:{port}"


def home_pids(home: Path) -> list[int]:
    """Every process whose environment has `OPTIMIZER_LAB_HOME=home`."""
    needle = f"OPTIMIZER_LAB_HOME={home}\0".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/environ").read_bytes() + b"\0":
                    out.append(int(entry))
            except OSError:
                pass
    return out


def rss_mb(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def stop_all(proc: subprocess.Popen, home: Path) -> None:
    """Stop the server, then every process of its data directory (runs outlive a server)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in home_pids(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----- sampling the store and the processes ----------------------------------------------------
@dataclass
class Samples:
    """1 s samples: `runs[t] = {run_id: (status, step)}`, server CPU seconds, RSS totals and
    the probe write latencies (seconds)."""

    runs: list[tuple[float, dict[int, tuple[str, int]]]] = field(default_factory=list)
    server_cpu: list[tuple[float, float]] = field(default_factory=list)
    server_rss: list[float] = field(default_factory=list)
    runs_rss: list[float] = field(default_factory=list)
    writes: list[float] = field(default_factory=list)


def sample(store: RunStore, home: Path, servers: list[int], stop: threading.Event,
           out: Samples) -> None:
    """Every second: the runs' status and step and a probe write, through the store's own
    interface (SQLite or PostgreSQL), and the processes' CPU and memory."""
    while not stop.wait(1.0):
        now = time.monotonic()
        try:
            rows = store.frame("SELECT id, status, step FROM runs", ())
            out.runs.append((now, {int(i): (s, int(n or 0)) for i, s, n in
                                   zip(rows["id"], rows["status"], rows["step"].fillna(0))}))
            start = time.monotonic()
            with store.immediate() as con:  # what a record batch waits for: lock + commit
                con.execute("CREATE TABLE IF NOT EXISTS bench_probe (t REAL)")
                con.execute("INSERT INTO bench_probe VALUES (?)", (time.time(),))
            out.writes.append(time.monotonic() - start)
        except Exception:  # noqa: BLE001 - a busy store skips one sample, the bench goes on
            pass
        out.server_cpu.append((now, sum(cpu_s(pid) for pid in servers)))
        out.server_rss.append(sum(rss_mb(pid) for pid in servers))
        out.runs_rss.append(sum(rss_mb(p) for p in home_pids(home) if p not in servers))
