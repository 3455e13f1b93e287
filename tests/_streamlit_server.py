"""Start and stop a real `streamlit run app.py` server for the server and browser tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
HEALTH_TIMEOUT_S = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def health(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
            return resp.read().decode().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def streamlit_server(home: Path, timeout_s: float = HEALTH_TIMEOUT_S,
                     env: dict[str, str] | None = None) -> Iterator[str]:
    """Run the app on a free port with `OPTIMIZER_LAB_HOME=home` (plus `env`); yield its base
    URL."""
    port = free_port()
    env = dict(os.environ, OPTIMIZER_LAB_HOME=str(home), PYTHONPATH=str(ROOT),
               TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    log = open(home / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while health(port) != "ok":
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}: "
                                   f"{(home / 'streamlit.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no /_stcore/health 'ok' on port {port} after {timeout_s} s")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
