"""How often a page watching a live run may refresh, so that every such page of this server
together stays within a CPU budget (no Streamlit, no TensorFlow: plain arithmetic on what the
refreshes report).

Why: a live refresh is a fragment rerun that reads the run's new records and patches the charts;
it costs ~0.1 s of the server's CPU (bench/bench_class.py, `ms/rr`). One page refreshing twice
a second is cheap; 50 pages doing so would ask 10 s of CPU per second of a 2-core machine that
also trains their runs, every request would queue behind the others, and each page would see
its run seconds late. Refreshing less often when many pages watch keeps every refresh prompt:
the pages share `budget_cores` of CPU, and the interval is what that share affords,

    interval = max(base, watchers * cost / budget_cores)

where `watchers` counts the sessions that refreshed a live run in the last `window_s` seconds
and `cost` is the median CPU seconds of their recent refreshes (each measured on its script
thread with `time.thread_time`, so other threads' load does not inflate it). The interval is
rounded UP to a power of two times `base` (0.5, 1, 2, 4, 8 s, at most `MAX_INTERVAL_S`): a page
resets its timer with a page run, so the interval moves in a few coarse steps, not with every
sample.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import deque

BASE_INTERVAL_S = 0.5
MAX_INTERVAL_S = 8.0
WINDOW_S = 10.0
SAMPLES = 200  # recent refresh costs kept (of every session)
HYSTERESIS = 0.75  # see `RefreshPace.interval_from`
# Half the machine's cores for the pages by default: the run hosts train on the rest.
DEFAULT_BUDGET_CORES = max(1.0, (os.cpu_count() or 2) / 2)
BUDGET_ENV = "OPTIMIZER_LAB_REFRESH_CPU"
MAX_BUDGET_CORES = 1024.0


def budget_cores(environ: dict[str, str] | None = None) -> float:
    """The pages' CPU budget in cores: `OPTIMIZER_LAB_REFRESH_CPU` (a number in (0, 1024]),
    else `DEFAULT_BUDGET_CORES`.

    Raises:
        ValueError: the setting is not a number in that range (the message names it).
    """
    text = (os.environ if environ is None else environ).get(BUDGET_ENV, "").strip()
    if not text:
        return DEFAULT_BUDGET_CORES
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and 0 < value <= MAX_BUDGET_CORES):
        raise ValueError(f"{BUDGET_ENV}={text!r} refused: must be a number of cores in "
                         f"(0, {MAX_BUDGET_CORES:g}]")
    return value


class RefreshPace:
    """The live-refresh interval of one server process (see the module docstring).

    Args:
        budget_cores: CPU the pages' live refreshes may use together, in cores (> 0).
        base: the interval when the server has room, seconds (> 0).
        window_s: a session that has not refreshed for this long no longer counts (> 0).

    Raises:
        ValueError: an argument outside its range (the message names it).
    """

    def __init__(self, budget_cores: float = DEFAULT_BUDGET_CORES,
                 base: float = BASE_INTERVAL_S, window_s: float = WINDOW_S):
        for name, value in (("budget_cores", budget_cores), ("base", base),
                            ("window_s", window_s)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} refused: must be a finite number > 0")
        self.budget_cores = float(budget_cores)
        self.base = float(base)
        self.window_s = float(window_s)
        self._lock = threading.Lock()
        self._last_seen: dict[str, float] = {}
        self._costs: deque[float] = deque(maxlen=SAMPLES)

    def note(self, session: str, cpu_s: float, now: float | None = None) -> None:
        """Record one live refresh of `session` that used `cpu_s` CPU seconds (>= 0)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._last_seen[session] = now
            self._costs.append(max(0.0, float(cpu_s)))

    def watchers(self, now: float | None = None) -> int:
        """Sessions that refreshed a live run in the last `window_s` seconds."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for session in [s for s, t in self._last_seen.items() if now - t > self.window_s]:
                del self._last_seen[session]
            return len(self._last_seen)

    def cost(self) -> float:
        """Median CPU seconds of the recent refreshes (0.0 before any)."""
        with self._lock:
            return statistics.median(self._costs) if self._costs else 0.0

    def wanted(self, now: float | None = None) -> float:
        """The interval the budget asks for, unrounded: watchers x cost / budget, seconds."""
        return self.watchers(now) * self.cost() / self.budget_cores

    def interval(self, now: float | None = None) -> float:
        """Seconds between two refreshes of a shown live page: `base` times a power of two,
        at most `MAX_INTERVAL_S` (a page never waits longer than that for news)."""
        return self._rounded(self.wanted(now))

    def _rounded(self, wanted: float) -> float:
        if wanted <= self.base:
            return self.base
        steps = math.ceil(math.log2(wanted / self.base) - 1e-9)
        return min(self.base * 2 ** steps, max(MAX_INTERVAL_S, self.base))

    def interval_from(self, current: float, now: float | None = None) -> float:
        """The interval for a page whose timer is at `current` seconds: slower at once when
        the budget needs it, faster only when the wanted interval is below `HYSTERESIS` of
        the next faster step (the number of watchers moves by a page or two all the time, and
        each change of a page's timer costs a whole page run)."""
        wanted = self.wanted(now)
        new = self._rounded(wanted)
        if new >= current or wanted <= HYSTERESIS * max(new, current / 2):
            return new
        return current


PACE = RefreshPace(budget_cores())  # the server process's one pace (every session's refreshes)

__all__ = ["BASE_INTERVAL_S", "BUDGET_ENV", "MAX_INTERVAL_S", "PACE", "RefreshPace",
           "budget_cores"]
