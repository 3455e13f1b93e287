"""The load benchmarks' people: a student who joins the class challenge (nickname, Start, one
live `learning_rate` change) and the teacher who watches its board, each a
`streamlit_ws.BrowserlessSession` (`bench/bench_class.py`)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streamlit_ws import BrowserlessSession

STATUS = r"Run #(\d+) · status (\w+) · step (\d+)"
CHANGE_AFTER_S = 5.0  # a session changes its learning rate this long after its run trains


# ----- the challenge ----------------------------------------------------------------------------
TEACHER_SECRET = "bench-chalk"
CHALLENGE_SCRIPT = """
import sys
from runs.service import challenges
from runs.store.run_store import RunStore
from settings.run_config import RunConfig
base = RunConfig().to_json_dict()
print(challenges.create_challenge(RunStore(sys.argv[1]), dict(
    title="bench class", base=base, optimizers=[base["optimizer"]], free=["learning_rate"],
    goal="val_loss_at_step", goal_step=int(base["steps"]))))
"""


def create_challenge(root: Path, home: Path, location: str) -> int:
    """Store the bench's challenge in the store at `location` (a SQLite file or PostgreSQL
    URL) with `root`'s own code (its schema); its id."""
    done = subprocess.run([sys.executable, "-c", CHALLENGE_SCRIPT, location],
                          cwd=root, env=dict(os.environ, PYTHONPATH=str(root),
                                             OPTIMIZER_LAB_HOME=str(home)),
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"the challenge was not stored: {done.stderr[-2000:]}")
    return int(done.stdout.split()[-1])


async def teacher(url: str, until: float) -> BrowserlessSession:
    """The teacher: opens the board, enters the secret, watches until `until`."""
    session = BrowserlessSession(url)

    async def actions(s: BrowserlessSession) -> None:
        await s.loaded(until - time.monotonic())
        while "teacher secret" not in s.widgets and time.monotonic() < until:
            await asyncio.sleep(0.2)
        if "teacher secret" in s.widgets:
            await s.set_text("teacher secret", TEACHER_SECRET)

    await session.run(until, actions)
    return session


# ----- one session -------------------------------------------------------------------------------
@dataclass
class Student:
    """What one session did and saw (monotonic seconds)."""

    index: int
    lr: float
    run_id: int | None = None
    pressed: float | None = None
    running: float | None = None
    changed: float | None = None
    marker: float | None = None
    error: str = ""


async def student(url: str, me: Student, until: float, challenge: bool = False
                  ) -> BrowserlessSession:
    """One student on `url` (a challenge link when `challenge`: it types a nickname)."""
    session = BrowserlessSession(url)
    # the change marker's text, `learning_rate → value` (UTF-8 or JSON-escaped), the value
    # not followed by another digit (0.0011 is not 0.00113)
    pattern = (rb"learning_rate (?:\xe2\x86\x92|\\u2192) "
               + re.escape(f"{me.lr:.6g}").encode() + rb"(?![0-9])")

    async def actions(s: BrowserlessSession) -> None:
        try:
            await s.loaded(until - time.monotonic())
            if challenge:  # a challenge link: a nickname first, then Start is enabled
                while "your nickname" not in s.widgets and time.monotonic() < until:
                    await asyncio.sleep(0.2)
                await s.set_text("your nickname", f"student{me.index}")
                await s.idle(until - time.monotonic())
            while "Start" not in s.widgets and time.monotonic() < until:
                await asyncio.sleep(0.2)
            me.pressed = time.monotonic()
            await s.press("Start")
            while time.monotonic() < until:
                await asyncio.sleep(0.1)
                found = s.text_matching(STATUS)
                if found and me.run_id is None:
                    me.run_id = int(found.group(1))
                if found and found.group(2) == "running" and int(found.group(3)) >= 1:
                    me.running = time.monotonic()
                    break
            if me.running is None or me.running + CHANGE_AFTER_S > until - 5:
                return
            await asyncio.sleep(CHANGE_AFTER_S)
            s.watch(pattern)
            me.changed = time.monotonic()
            await s.set_number("learning_rate", me.lr)
        except Exception as error:  # noqa: BLE001 - reported in the row, the class goes on
            me.error = repr(error)

    try:
        await session.run(until, actions)
    except Exception as error:  # noqa: BLE001
        me.error = me.error or repr(error)
    me.marker = session.watches.get(pattern)
    return session
