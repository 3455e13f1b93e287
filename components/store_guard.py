"""One line instead of a traceback when the run store cannot be written or opened.

A full disk or a read-only data directory makes every store call raise
`runs.store.files.StoreUnavailable` (its message says what happened and what to do). A page wraps
its body, or each part that touches the store, so that the part shows one `st.error` line and
the rest of the page still renders:

    with store_guard():                    # a section
        table = store().runs()

    @guard_page                            # a whole page function (or a live fragment)
    def show() -> None: ...

Nothing is cached on failure, so the next rerun (or fragment tick) after the disk is writable
again works without a restart. Other exceptions pass through unchanged.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TypeVar
from collections.abc import Callable, Iterator

import streamlit as st

from runs.store.files import StoreUnavailable

T = TypeVar("T")
ICON = ":material/error:"


def show_unavailable(error: StoreUnavailable) -> None:
    """The one-line message of `error` as an `st.error`."""
    st.error(f"The run store is unavailable: {error}", icon=ICON)


@contextlib.contextmanager
def store_guard() -> Iterator[None]:
    """Run the block; a `StoreUnavailable` raised in it becomes one `st.error` line and the
    page goes on after the block."""
    try:
        yield
    except StoreUnavailable as error:
        show_unavailable(error)


def guard_page(page: Callable[..., T]) -> Callable[..., T | None]:
    """Decorate a page function or fragment: a `StoreUnavailable` shows one line and returns
    None instead of a traceback."""

    @functools.wraps(page)
    def wrapper(*args, **kwargs):
        try:
            return page(*args, **kwargs)
        except StoreUnavailable as error:
            show_unavailable(error)
            return None

    return wrapper
