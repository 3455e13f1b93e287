"""Bounded plugin discovery, the parent's side: plugin files are first imported in a child.

A plugin file is code the server has never run: `while True: pass` at import would hang every
page and burn a core. So the server never imports a file before a child process has imported it
within a time limit:

    python -m optimizer_plugins.plugin_discovery --check FILE...

(`plugin_discovery.main`) imports each file and runs the contract check on its classes
(`plugin_discovery.check_file`, nothing registered), writing one JSON line per event to its stdout:
`{"event": "ready"}` once TensorFlow and the lab are imported, then per file
`{"event": "import", "path"}`, `{"event": "check", "path"}` (import done, contract check
starting) and `{"event": "report", "report": {...}}`. The plugin's own prints go to stderr, so
they cannot forge a line.

The parent (`check_in_child`) reads those lines with deadlines: `import_timeout_s` (environment
`OPTIMIZER_LAB_PLUGIN_TIMEOUT_S`, default 10 s) from "import" to "check", `check_timeout_s`
(`OPTIMIZER_LAB_PLUGIN_CHECK_TIMEOUT_S`, default 120 s) from "check" to "report". A file that
overruns is reported ("import did not finish in 10 s: not loaded"), the child is killed, and a
new child goes on with the files after it. `plugin_discovery.discover_bounded` then registers the classes
that passed from the report's catalog data (`ClassReport.catalog`: specs, options, `is_rule`,
the file and class), without importing any plugin file into the server.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO
from collections.abc import Mapping, Sequence

# This module imports nothing of the lab (and no TensorFlow): `optimizer_plugins.plugin_discovery` imports it.

IMPORT_TIMEOUT_ENV = "OPTIMIZER_LAB_PLUGIN_TIMEOUT_S"
CHECK_TIMEOUT_ENV = "OPTIMIZER_LAB_PLUGIN_CHECK_TIMEOUT_S"
DEFAULT_IMPORT_TIMEOUT_S = 10.0
DEFAULT_CHECK_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 3600.0
# TensorFlow's import in the child (4-5 s idle, far more under load) is not a plugin's fault.
STARTUP_TIMEOUT_S = 300.0
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def timeout_s(variable: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """Seconds from environment `variable` (default `default`).

    Raises:
        ValueError: not a number in (0, 3600] (the message names the variable).
    """
    text = (os.environ if environ is None else environ).get(variable)
    if text is None or text.strip() == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(f"{variable}={text!r} refused: must be a number of seconds in "
                         f"(0, {MAX_TIMEOUT_S:g}]")
    return value


def import_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """Seconds one plugin file may take to import (`OPTIMIZER_LAB_PLUGIN_TIMEOUT_S`, 10)."""
    return timeout_s(IMPORT_TIMEOUT_ENV, DEFAULT_IMPORT_TIMEOUT_S, environ)


def check_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """Seconds the contract check of one file's classes may take (120)."""
    return timeout_s(CHECK_TIMEOUT_ENV, DEFAULT_CHECK_TIMEOUT_S, environ)


def _reader(stream: IO[str], lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)  # end of stream: the child exited


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def _refused(path: str, reason: str) -> dict:
    return {"path": path, "error": reason, "classes": []}


def check_in_child(paths: Sequence[Path | str], import_timeout: float | None = None,
                   check_timeout: float | None = None, nice: int = 0) -> list[dict]:
    """Import and contract-check every file of `paths` in child processes, bounded in time.

    Args:
        paths: plugin files, in the order to check them.
        import_timeout, check_timeout: seconds per file (default: `import_timeout_s()`,
            `check_timeout_s()`).
        nice: how much the child lowers its CPU priority (`os.nice`, 0 to 19) before it
            imports TensorFlow: a server's background check then leaves the CPU to the pages
            and to a run host that imports TensorFlow at the same time.

    Returns:
        One report dict per file, in order: `path` (resolved), `error` (None, a traceback, or
        why the file was not loaded: "import did not finish in 10 s: not loaded"), `classes`
        (as `plugin_discovery.ClassReport`, with `checks` as `contract.CheckResult` fields and `catalog`
        as `catalog.CatalogEntry.to_data`), `module`.

    Raises:
        ValueError: a timeout environment variable is refused.
    """
    import_timeout = import_timeout_s() if import_timeout is None else import_timeout
    check_timeout = check_timeout_s() if check_timeout is None else check_timeout
    given = [str(Path(p).resolve()) for p in paths]  # the child runs in PROJECT_ROOT
    remaining = list(given)
    reports: dict[str, dict] = {}
    while remaining:
        done = _run_child(remaining, import_timeout, check_timeout, reports, nice)
        remaining = [p for p in remaining if p not in reports]
        if not done and remaining:  # the child could not start: report the rest
            for path in remaining:
                reports[path] = _refused(path, f"the plugin check process did not start in "
                                               f"{STARTUP_TIMEOUT_S:g} s: not loaded")
            remaining = []
    return [reports[path] for path in given]


def _run_child(paths: list[str], import_timeout: float, check_timeout: float,
               reports: dict[str, dict], nice: int = 0) -> bool:
    """One child over `paths`; fills `reports` until it ends or a file overruns. Returns False
    when the child never said it was ready."""
    priority = ["--nice", str(nice)] if nice else []
    process = subprocess.Popen(
        [sys.executable, "-m", "optimizer_plugins.plugin_discovery", *priority, "--check", *paths],
        cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    phase, current, deadline = "start", None, time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if current is None:
                    return False
                what = "import" if phase == "import" else "contract check"
                limit = import_timeout if phase == "import" else check_timeout
                reports[current] = _refused(current, f"{what} did not finish in {limit:g} s: "
                                                     "not loaded")
                return True
            if line is None:  # the child ended: blame the file it was on, if any
                if current is not None:
                    code = process.wait()
                    reports[current] = _refused(current, f"the plugin ended the check process "
                                                         f"(exit code {code}) during its "
                                                         f"{phase}: not loaded")
                return phase != "start"
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "ready":
                phase = "ready"
            elif kind == "import":
                phase, current = "import", event["path"]
                deadline = time.monotonic() + import_timeout
            elif kind == "check":
                phase, deadline = "check", time.monotonic() + check_timeout
            elif kind == "report":
                reports[event["report"]["path"]] = event["report"]
                phase, current = "ready", None
                deadline = time.monotonic() + STARTUP_TIMEOUT_S  # until the next "import"
    finally:
        _stop(process)
