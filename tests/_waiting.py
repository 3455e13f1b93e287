"""Polling a condition in tests, with a deadline that names what did not happen."""

from __future__ import annotations

import time


def wait_until(condition, timeout_s: float, what: str):
    """Call `condition()` every 50 ms until it returns something truthy, and return that.

    Raises:
        AssertionError: still falsy after `timeout_s` seconds (the message names `what`).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)
