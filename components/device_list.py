"""The logical devices runs can use, listed WITHOUT importing TensorFlow into the server.

`engine.devices.list_devices` needs TensorFlow (4-5 s and ~750 MB in the Streamlit server, which
otherwise never imports it). Here a child process imports it, configures the GPUs as a run
process does (`engine.devices.configure_gpus`: memory growth must be set before TensorFlow
initialises its devices), and prints the names as JSON; the answer is kept for the life of the
server process. The child starts in a background thread at the first `device_names` call (the
Train page), so no page waits for it and a server whose users never open Train never pays for
it: until it answers, `device_names` returns the CPU that every TensorFlow machine has, with
`final=False` (a device named in a shared link is judged once the list is final).
(Measured: starting it at server start made the first Train paint slower while the page itself
still imported TensorFlow, the two imports competing for the same cores.)

A server that keeps local run hosts (the default) needs no child of its own: each host imports
TensorFlow and configures the GPUs the same way anyway, and writes the names it then lists
beside the store (`runs.store.host_devices`). The probe thread waits up to `HOST_WAIT_S` for a
live host's answer and starts its own child only without one (measured: the child's
TensorFlow import, ~5 s of CPU, ran beside the first host's and delayed a fresh server's first
Start).

No Streamlit and no TensorFlow imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from runs.service import executor
from runs.store import host_devices

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# TensorFlow's import in the child: 4-5 s idle, 15-78 s measured under load (ARCHITECTURE.md).
PROBE_TIMEOUT_S = 300.0
PROVISIONAL = ("/device:CPU:0",)  # every TensorFlow build has this logical device
# how long the probe waits for a local run host's answer before starting its own child: a
# fresh host imports TensorFlow in 5-10 s here, more on a loaded machine
HOST_WAIT_S = 60.0
HOST_POLL_S = 0.2
PROBE_CODE = (
    "import json, lab_env\n"
    "from engine import devices\n"
    "devices.configure_gpus()\n"
    "print(json.dumps([d['name'] for d in devices.list_devices()]))\n"
)


@dataclass(frozen=True)
class DeviceList:
    """Logical device names (`/device:CPU:0`, `/device:GPU:0`, ...), CPUs first.

    Attributes:
        names: the names (the provisional CPU until the probe answers, or after it failed).
        final: True once the probe answered (or failed: then `error` says why).
        error: why the probe failed ("" when it did not).
    """

    names: tuple[str, ...]
    final: bool
    error: str = ""


_LOCK = threading.Lock()
_STATE: dict[str, object] = {"thread": None, "answer": None}


def host_answer(data_dir: Path) -> DeviceList | None:
    """The final `DeviceList` a live local run host wrote in `data_dir`
    (`runs.store.host_devices`), or None."""
    names = host_devices.read(data_dir)
    return DeviceList(names, True) if names else None


def local_hosts_dir() -> Path | None:
    """Where this server's local run hosts write their devices (the default store's data
    directory), or None when runs get no local hosts (`OPTIMIZER_LAB_WARM_WORKERS=off`, the Ray
    executor, or a refused setting: the pages say which)."""
    try:
        if not executor.warm_enabled() or executor.chosen() != executor.LOCAL:
            return None
    except ValueError:
        return None
    return host_devices.default_data_dir()


def probe(timeout_s: float = PROBE_TIMEOUT_S, python: str = sys.executable) -> DeviceList:
    """Ask a child process for the logical devices (blocks up to `timeout_s` seconds).

    Returns:
        A final `DeviceList`; on a timeout, a crash or unreadable output, the provisional CPU
        with `error` set (the run process still checks the device it is given).
    """
    try:
        done = subprocess.run([python, "-c", PROBE_CODE], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return DeviceList(PROVISIONAL, True, f"device probe did not answer in {timeout_s:g} s")
    except OSError as error:
        return DeviceList(PROVISIONAL, True, f"device probe did not start: {error}")
    try:
        names = json.loads(done.stdout.strip().splitlines()[-1])
        if done.returncode != 0 or not names or not all(isinstance(n, str) for n in names):
            raise ValueError(names)
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return DeviceList(PROVISIONAL, True, f"device probe failed: {tail}")
    return DeviceList(tuple(names), True)


def _run_probe(host_dir: Path | None) -> None:
    """The probe thread: a live local host's answer in `host_dir` (polled for up to
    `HOST_WAIT_S` seconds), else a child process of its own (`probe`)."""
    answer = None
    deadline = time.monotonic() + HOST_WAIT_S
    while host_dir is not None:
        answer = host_answer(host_dir)
        if answer is not None or time.monotonic() >= deadline:
            break
        time.sleep(HOST_POLL_S)
    if answer is None:
        answer = probe()
    with _LOCK:
        _STATE["answer"] = answer


def start_probe() -> None:
    """Start the background probe once per process (later calls do nothing)."""
    with _LOCK:
        if _STATE["thread"] is not None:
            return
        thread = threading.Thread(target=_run_probe, args=(local_hosts_dir(),),
                                  name="device-probe", daemon=True)
        _STATE["thread"] = thread
    thread.start()


def device_names(wait_s: float = 0.0) -> DeviceList:
    """The logical devices: the probe's answer, or the provisional CPU (`final=False`) while it
    runs. Starts the probe if nobody did; waits up to `wait_s` seconds for its answer."""
    start_probe()
    thread = _STATE["thread"]
    if wait_s > 0 and isinstance(thread, threading.Thread):
        thread.join(wait_s)
    with _LOCK:
        answer = _STATE["answer"]
    return answer if isinstance(answer, DeviceList) else DeviceList(PROVISIONAL, False)


def _reset_for_tests() -> None:
    """Forget the answer (tests only; a running probe thread finishes on its own)."""
    with _LOCK:
        _STATE["thread"] = None
        _STATE["answer"] = None


__all__ = ["DeviceList", "HOST_WAIT_S", "PROBE_TIMEOUT_S", "PROVISIONAL", "device_names",
           "host_answer", "local_hosts_dir", "probe", "start_probe"]
