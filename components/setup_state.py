"""The Train page's Setup kept across page switches and reloads, and its Copy link.

Streamlit deletes the state of a widget that is not drawn in a script run, so leaving the Train
page (or choosing another optimizer) would reset the Setup. `remember` copies every Setup widget
value to a non-widget key `setup.<widget key>` after the page has drawn them; `restore` puts
them back before the widgets are drawn again. A reload starts a new session: the Setup then
comes back from the URL, which `components.train_setup.share_setup` keeps equal to the Setup.

The Setup's keys are generated from the settings table (`settings.fields`): one per
`RunConfig` field, the per-optimizer hyperparameter (`hp_...`), option (`opt_...`) and
followed-names (`hg_names_...`) keys, the schedule picker and its per-class parameters
(`lrs_class`, `lrs_<Class>_<param>`), and the page's `continuous` checkbox and `start_speed`.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping
from urllib.parse import urlencode

import streamlit as st

from settings import fields

PREFIX = "setup."
TYPED = "__typed"  # the number box beside a slider (`hyper_widgets.typed_key`): derived


def is_setup_key(key: str) -> bool:
    """True for a Setup widget key (see the module docstring)."""
    if key.startswith(PREFIX) or key.endswith(TYPED):
        return False
    prefixes = (fields.session_key("hyperparameters"), fields.session_key("options"), "hg_names_",
                fields.session_key("lr_schedule"))  # `lrs_class`, `lrs_<Class>_<param>`
    return (key in _field_keys() or key in ("continuous", "start_speed")
            or key.startswith(prefixes))


def _field_keys() -> set[str]:
    return set(fields.session_defaults())


def remember(state: Any = None) -> None:
    """Copy every Setup widget value in `state` (default: the session) to `setup.<key>`."""
    state = st.session_state if state is None else state
    for key in list(state.keys()):
        if isinstance(key, str) and is_setup_key(key):
            value = state[key]
            state[PREFIX + key] = list(value) if isinstance(value, list) else value


def restore(state: Any = None) -> list[str]:
    """Put back every remembered Setup value whose widget state Streamlit deleted; returns the
    keys restored. Values already in `state` (set this run, e.g. by a lesson) win."""
    state = st.session_state if state is None else state
    restored = []
    for key in list(state.keys()):
        if isinstance(key, str) and key.startswith(PREFIX):
            widget = key[len(PREFIX):]
            if widget not in state:
                value = state[key]
                state[widget] = list(value) if isinstance(value, list) else value
                restored.append(widget)
    return restored


def on_continuous() -> None:
    """The "continuous" checkbox moved: steps to the most allowed (1,000,000), or back to the
    number of steps set before (callback)."""
    state = st.session_state
    steps_key = fields.session_key("steps")
    if state["continuous"]:
        state["steps_before_continuous"] = state[steps_key]
        state[steps_key] = fields.bounds("steps")[1]
    else:
        state[steps_key] = state.get("steps_before_continuous", fields.default("steps"))


def page_url(params: Mapping[str, str]) -> str:
    """This page's address with the Setup's query parameters (`st.context.url`: scheme, host,
    port and path, without the query); a bare `?query` where the URL is unknown (tests)."""
    try:
        base = st.context.url or ""
    except Exception:  # noqa: BLE001 - no browser context (AppTest)
        base = ""
    return f"{base}?{urlencode(dict(params))}"


def copy_link(url: str | None) -> None:
    """A "Copy link" popover holding the share link in a code box (its copy icon copies it)."""
    if not url:
        return
    with st.popover("Copy link", width="stretch",
                    help="a link that opens the Train page with this Setup"):
        st.caption("Copy with the icon at the right of the box; the link opens this page with "
                   "this Setup (optimizer, hyperparameters, data, steps, hyper-gradients).")
        st.code(url, language=None, wrap_lines=True)
