"""The Hyper-gradients page's correctness check, bounded: at most `MAX_RUNNING` checks at once
per server (each is a ~1 GB TensorFlow process of ~15 s, started outside the run pool), and
the result of a configuration computed once (cached), so repeated clicks start nothing new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import streamlit as st

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # a loaded 2-core machine needs minutes for the three trainings
MAX_RUNNING = 1  # server-wide
CACHED_FOR_S = 3600


@st.cache_resource(show_spinner=False)
def running_slots() -> threading.BoundedSemaphore:
    """The server-wide slots of running checks (one object per server process)."""
    return threading.BoundedSemaphore(MAX_RUNNING)


# The run-config fields the check depends on (a schedule adds `lr_schedule.<param>` rows).
CHECKED_FIELDS = ("optimizer", "hyperparameters", "options", "lr_schedule", "decay")


def run_correctness(config: Mapping[str, Any]) -> dict[str, Any]:
    """`python -m hypergrad.correctness` for the config's optimizer, hypers, options, learning
    rate schedule and legacy decay: the printed JSON (`rows`, `passed`, `tolerances`,
    `learning_rate`, `labels`) or `{"error": ...}` (timeout after `TIMEOUT_S` seconds, or a
    failed process)."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT),
                                           *filter(None, [os.environ.get("PYTHONPATH")])]))
    args = [sys.executable, "-m", "hypergrad.correctness", "--optimizer", config["optimizer"],
            "--hypers", json.dumps(config.get("hyperparameters", {})),
            "--options", json.dumps(config.get("options", {})),
            "--lr-schedule", json.dumps(config.get("lr_schedule")),
            "--decay", repr(float(config.get("decay") or 0.0))]
    try:
        done = subprocess.run(args, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"the check took longer than {TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"the check failed (exit {done.returncode}): {done.stderr[-800:]}"}
    return json.loads(lines[-1])


def cache_key(config: Mapping[str, Any]) -> str:
    """The JSON of the config's `CHECKED_FIELDS` (absent ones as a run config defaults them)."""
    defaults = {"hyperparameters": {}, "options": {}, "lr_schedule": None, "decay": 0.0}
    return json.dumps({k: config.get(k, defaults.get(k)) for k in CHECKED_FIELDS},
                      sort_keys=True)


@st.cache_data(show_spinner=False, ttl=CACHED_FOR_S, max_entries=64)
def _cached(config_json: str) -> dict[str, Any]:
    return run_correctness(json.loads(config_json))


def check(config: Mapping[str, Any]) -> dict[str, Any]:
    """The check's result for `config` (the `CHECKED_FIELDS` of a run config): cached per
    configuration for `CACHED_FOR_S` seconds; refused (an `error` naming the limit) while
    `MAX_RUNNING` checks run on this server."""
    key = cache_key(config)
    slots = running_slots()
    if not slots.acquire(blocking=False):
        return {"error": f"refused: {MAX_RUNNING} correctness check(s) already running on this "
                         "server (each is a ~1 GB TensorFlow process); try again when it ends"}
    try:
        return _cached(key)
    finally:
        slots.release()


__all__ = ["CHECKED_FIELDS", "cache_key", "check", "run_correctness", "running_slots"]
