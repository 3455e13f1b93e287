"""The cooperative scheduler of a run host: many runs interleaved step by step in ONE thread.

Each held run is a `runs.process.run_session.RunSession`. A round visits the runs in the order
they joined and advances every run that is due (`RunSession.next_wake` <= now) exactly once:
one step plus the duties due with it (records, flush, command poll; `RunLoop.advance`). So when
the host is saturated every unpaced run gets the same number of steps (its share), a paced run
(`set_speed`) steps when its pace says, and a paused run is only polled every
`run_loop.POLL_EVERY_S`; when no run is due the host sleeps until the earliest wake (no busy
spin). The order of the steps depends only on the runs and their commands, never on threads:
the same runs train the same steps in the same order on every machine, and since no run reads
another's variables, each ends exactly as it would alone.

Isolation: an exception inside one run's step or command (`RunSession.fail`: status `failed`
with the error) or its end (`diverged`, `stopped`, `finished`) removes that run only; the other
runs' next steps come in the same round.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from runs.process.run_session import RunSession, log

# After a session ended (any status) the host is told, e.g. to hand its pool place over.
OnEnd = Callable[[RunSession], None]


class HostScheduler:
    """The runs of one host and the round-robin over them (see the module docstring).

    Args:
        on_end: called with each session once it ended and was closed.
    """

    def __init__(self, on_end: OnEnd | None = None):
        self.sessions: list[RunSession] = []
        self.on_end = on_end
        self.steps = 0  # `advance` calls that trained a step, over the host's life

    def __len__(self) -> int:
        return len(self.sessions)

    def run_ids(self) -> list[int]:
        """The ids of the runs held now, in round order."""
        return [s.run_id for s in self.sessions]

    def add(self, session: RunSession) -> None:
        """Hold a session whose `open` returned None (ready to advance); it is visited last in
        the current round order."""
        self.sessions.append(session)

    def open_and_add(self, session: RunSession) -> str | None:
        """`session.open()` and hold it; a run stopped while starting, or one whose open
        raised (`failed`, logged), is not held. Returns None when held, else its status."""
        try:
            ended = session.open()
        except Exception as error:  # noqa: BLE001 - this run failed, the host goes on
            self._failed(session, error)
            return "failed"
        if ended is not None:
            self._finish(session)
            return ended
        self.add(session)
        return None

    def round(self) -> int:
        """Advance every due run once, in order; returns how many ran a step or ended."""
        did = 0
        for session in list(self.sessions):
            if session.next_wake() > time.monotonic():
                continue
            before = session.run.step if session.run is not None else 0
            try:
                end = session.advance()
                if end is not None:
                    session.end(*end)
            except Exception as error:  # noqa: BLE001 - this run failed, the others go on
                self._failed(session, error)
                self._remove(session)
                did += 1
                continue
            if end is not None:
                self._remove(session)
                did += 1
            elif session.run is not None and session.run.step != before:
                self.steps += 1
                did += 1
        return did

    def next_wake(self, default: float) -> float:
        """The earliest monotonic time any held run is due, or `default` with none held."""
        return min((s.next_wake() for s in self.sessions), default=default)

    def stop_all(self, message: str) -> None:
        """Ask every held run to stop at its next advance (`RunSession.stop`)."""
        for session in self.sessions:
            session.stop(message.format(step=session.run.step if session.run else 0))

    def stop_run(self, run_id: int, message: str) -> None:
        """Ask one held run to stop (e.g. its status was set final by a page)."""
        for session in self.sessions:
            if session.run_id == run_id:
                session.stop(message)

    def run_until_empty(self, idle_sleep_s: float = 0.05) -> None:
        """Rounds until no run is held (a host's drain, and the in-process tests)."""
        while self.sessions:
            if not self.round():
                time.sleep(max(0.0, min(idle_sleep_s,
                                        self.next_wake(time.monotonic()) - time.monotonic())))

    def _failed(self, session: RunSession, error: BaseException) -> None:
        log(f"run {session.run_id} failed in its host: {type(error).__name__}: {error}\n"
            + "".join(traceback.format_exception(error)))
        session.fail(error)

    def _remove(self, session: RunSession) -> None:
        self.sessions.remove(session)
        self._finish(session)

    def _finish(self, session: RunSession) -> None:
        try:
            session.close()
        finally:
            if self.on_end is not None:
                self.on_end(session)
