"""The lesson side panel: loads a lesson's setup once and walks through it.

A page calls `lesson_panel.show("<page>")` near its top (the panel is drawn there, above the
page's own content). When the URL carries `?lesson=<key>`
(a card on the home page links there) or the session has an open lesson, the panel:

* loads the lesson's setup ONCE per opening (not on every rerun, so the user can change it):
  `page_state` into session state, `run_setup` as a validated `RunConfig` handed to the Train
  page's `apply_config` (the function a shared link goes through);
* shows the question, the steps, the check question and a "show the answer" toggle, with a
  link to the page that answers it when this is another page.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import streamlit as st

from components import links
from settings import fields
from settings.run_config import RunConfig
from teaching import lessons

_OPEN = "lesson_open"  # key of the open lesson (non-widget state: survives page switches)
_LOADED = "lesson_loaded"  # (lesson key, page) pairs whose setup was loaded this opening


def _lesson_from_url() -> lessons.Lesson | None:
    key = st.query_params.get("lesson")
    if not key:
        return None
    try:
        return lessons.get(str(key))
    except KeyError as error:
        st.sidebar.warning(f"lesson link ignored: {error.args[0]}")
        return None


def run_setup_values(lesson: lessons.Lesson) -> dict[str, Any]:
    """Train-page session values for the lesson's `run_setup` (validated as a `RunConfig`).

    Raises:
        pydantic.ValidationError: the lesson's setup is not a valid run (a defect of the table).
    """
    return fields.session_values(RunConfig(**lesson.run_setup))


def _load(lesson: lessons.Lesson, page: str,
          apply_run_setup: Callable[[RunConfig], None] | None) -> None:
    loaded = st.session_state.setdefault(_LOADED, [])
    if (lesson.key, page) in loaded:
        return
    loaded.append((lesson.key, page))
    st.session_state.update(dict(lesson.page_state))
    if lesson.run_setup and apply_run_setup is not None:
        apply_run_setup(RunConfig(**lesson.run_setup))


def close() -> None:
    """Close the open lesson (button callback)."""
    st.session_state[_OPEN] = None
    st.session_state[_LOADED] = []
    if "lesson" in st.query_params:
        del st.query_params["lesson"]


def current() -> lessons.Lesson | None:
    """The open lesson of this session (from the URL first), or None."""
    from_url = _lesson_from_url()
    if from_url is not None and st.session_state.get(_OPEN) != from_url.key:
        st.session_state[_OPEN] = from_url.key
        st.session_state[_LOADED] = []
    key = st.session_state.get(_OPEN)
    return lessons.get(key) if key else None


def load(page: str, apply_run_setup: Callable[[RunConfig], None] | None = None
         ) -> lessons.Lesson | None:
    """Load the open lesson's setup for `page` (once per opening) without drawing anything:
    call it before the page's widgets exist. Returns the lesson (None when no lesson).

    Args:
        page: the calling page (a `lessons.PAGES` name).
        apply_run_setup: the Train page's function that sets its Setup to a `RunConfig`; the
            lesson's `run_setup` goes through it (other pages pass None).
    """
    lesson = current()
    if lesson is not None:
        _load(lesson, page, apply_run_setup)
    return lesson


def show(page: str, apply_run_setup: Callable[[RunConfig], None] | None = None
         ) -> lessons.Lesson | None:
    """Load (once, see `load`) and draw the open lesson's panel for `page`; returns it."""
    lesson = load(page, apply_run_setup)
    if lesson is None:
        return None
    # At the top of the page, not in the sidebar: there it pushed the Train page's Setup out of
    # view. An expander, so the reader can fold it away and keep the page.
    with st.expander(f"Lesson · {lesson.title}", expanded=True, icon=":material/school:"):
        st.caption(f"*{lesson.question}* · about {lesson.minutes} min")
        if lesson.page != page and not (lesson.run_setup and page == "train"):
            links.page_link(lessons.PAGE_URLS[lesson.page],
                            label="Go to the page of this lesson",
                            icon=":material/arrow_forward:")
        for number, step in enumerate(lesson.steps, 1):
            st.markdown(f"{number}. {step}")
            for claim in (c for c in lesson.claims if c.step == number):
                # what the step says the page shows, as the test measures it
                st.caption(f"You will see: {claim.quantity}: {claim.expected}")
        st.markdown(f"**Check:** {lesson.check}")
        if st.toggle("show the answer", key=f"lesson_answer_{lesson.key}"):
            st.success(lesson.answer)
        st.button("Close the lesson", key="lesson_close", on_click=close)
    return lesson


__all__ = ["close", "current", "load", "run_setup_values", "show"]
