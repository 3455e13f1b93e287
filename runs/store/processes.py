"""Is a run's process alive, and is it still the SAME process? (Linux `/proc`; no Streamlit,
no TensorFlow.)

A pid alone is not an identity: once a process ends its pid can be given to another one. The
kernel's start time of a process (field 22 of `/proc/<pid>/stat`, in clock ticks since boot)
is recorded at launch (`runs.service.control._launch` -> `runs.pid_start`); a pid whose start time
differs is another process.
"""

from __future__ import annotations

import os


def pid_alive(pid: int | None) -> bool:
    """True when a process with this pid exists (and is not a zombie) on this machine."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child not yet reaped is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def process_start(pid: int | None) -> int | None:
    """The start time of process `pid` in clock ticks since boot (`/proc/<pid>/stat` field
    22), or None when there is no such process (or no `/proc`)."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    # fields[0] is field 3 (state); field 22 (starttime) is fields[19]
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def same_process_alive(pid: int | None, start: int | None) -> bool:
    """True when `pid` lives and is the process that had start time `start` (see
    `process_start`). With `start` None (a run launched before start times were recorded, or
    a run trained in the caller's own process) this is False: its identity cannot be proven,
    so it is treated as gone once silent (the behaviour before the check existed)."""
    if start is None or not pid_alive(pid):
        return False
    return process_start(pid) == int(start)


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of process `pid` in MB (`VmRSS` of `/proc/<pid>/status`), or None."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None
