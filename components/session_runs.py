"""This browser session's identity for the run service, and the session's heartbeat.

Many people can use one server at once. Every session sees the shared runs list; only the runs
it owns are steered from its pages. Ownership is NOT decided here: `runs.service.ownership.authorize`
checks every command against the owner stored with the run; this module only says who the
caller is (`caller()`) and asks the store what it owns (`owns`, `my_runs`).

Identity: a random per-browser token (`session_token`). It is kept in the browser as the
cookie `COOKIE` (`SameSite=Strict`, 30 days, set by a one-line script in every full script run
until the browser sends it; read back from `st.context.cookies` on the next visit), so that
after a reload the SAME browser regains its runs without asking; another browser has another
token. The token is never put in the URL (a share link carries only the setup). Where the
cookie cannot be set (AppTest, cookies blocked) the token lives for the session only; the
server may then enable the fallback `OPTIMIZER_LAB_TAKEOVER_AFTER_S`: "Take control" of a
live run whose owner has been silent that long (see `runs.service.ownership`; recorded with the run).
Runs with no owner (CLI, old stores) can always be taken over.

The heartbeat (`keep_alive`, a fragment of `app.py` that runs on every page) tells the run
processes and `runs.service.ownership` that the session is still open (`RunStore.touch_viewers`; a run
started with `OPTIMIZER_LAB_ON_TAB_CLOSE=stop` stops itself once its session has been silent
for `runs.process.run_loop.TAB_CLOSED_AFTER_S`) and starts queued runs when a place in the pool is free
(a run killed with SIGKILL cannot hand its place over itself).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import streamlit as st

from runs.service.ownership import Caller
from runs.protocol import LIVE_STATUSES
from runs.store.files import default_store
from runs.store.run_store import RunStore

HEARTBEAT_EVERY_S = 10.0
COOKIE = "optimizer_lab_browser"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
_TOKEN = "session_token"
_TEACHER = "teacher_secret"
_TOKEN_FORMAT = re.compile(r"[A-Za-z0-9_-]{32,64}")


@st.cache_resource(show_spinner=False)
def _store(path: str) -> RunStore:
    return RunStore(path)


def _default_store() -> RunStore:
    return _store(str(default_store()))


def session_token() -> str:
    """This browser's token: the `COOKIE` it sent, else a new random one (kept in session
    state; `remember_browser` asks the browser to keep it)."""
    state = st.session_state
    if _TOKEN not in state:
        try:
            sent = st.context.cookies.get(COOKIE)
        except Exception:  # noqa: BLE001 - no request context (AppTest): no cookie
            sent = None
        state[_TOKEN] = sent if isinstance(sent, str) and _TOKEN_FORMAT.fullmatch(sent) else \
            secrets.token_urlsafe(32)
    return state[_TOKEN]


def caller() -> Caller:
    """The run-service caller of this session (its token and any teacher secret entered)."""
    return Caller(session_token(), st.session_state.get(_TEACHER, ""))


def set_teacher_secret(secret: str) -> bool:
    """Keep what the session entered as the teacher secret; True when it is right."""
    st.session_state[_TEACHER] = secret or ""
    return caller().is_teacher


def my_runs(store: RunStore | None = None) -> list[int]:
    """The ids of the runs this session owns (in the store), oldest first."""
    return (store or _default_store()).owned_runs(caller().owner)


def owns(run: int | dict[str, Any] | None, store: RunStore | None = None) -> bool:
    """True when the store says this session owns `run` (an id or a `store.run` dict)."""
    if run is None:
        return False
    if not isinstance(run, dict):
        try:
            run = (store or _default_store()).run(int(run))
        except KeyError:
            return False
    return run.get("owner") == caller().owner


def adopt(run_id: int, store: RunStore | None = None) -> str:
    """Take control of `run_id` (`runs.service.control.take_control`: only a run with no owner, or a
    live one whose owner has been silent for long; recorded); returns why it was allowed.

    Raises:
        runs.service.ownership.NotOwner: the owner session is still around.
    """
    from runs.service import control

    return control.take_control(store or _default_store(), int(run_id), caller())


def remember_browser() -> None:
    """Ask the browser to keep this session's token as the cookie `COOKIE`, in every full
    script run until the browser sends that token back (a later session of it).

    Not once per session: a script run that a rerun request interrupts (a click, a widget
    moved, the page's rerun when its background checks end; likely while a loaded server
    draws the first page) raises at the next element it adds, and a run that the next one
    replaces before the browser drew it never runs its script either. A session marked as
    done after such a run never set its cookie, and a reopened page (a new session without
    the cookie) then got a new token and saw its own runs as another browser's, view only.
    The script sets the same cookie each time; an unchanged element is not drawn again."""
    token = session_token()
    try:
        sent = st.context.cookies.get(COOKIE)
    except Exception:  # noqa: BLE001 - no request context
        sent = None
    if isinstance(sent, str) and sent == token:
        return
    st.html(f"<script>document.cookie = '{COOKIE}={token}; path=/; "
            f"max-age={COOKIE_MAX_AGE_S}; SameSite=Strict';</script>",
            unsafe_allow_javascript=True)


def beat(store: RunStore) -> None:
    """Touch this session's live runs and start queued runs if the pool has room."""
    from runs.service import pool, warm_pool

    # The first run host starts with the server's first page: a Start then waits for that
    # host's TensorFlow import to finish (it is given the run while warming) instead of paying
    # a cold process's import, 13-20 s, after the click.
    try:
        warm_pool.keep_warm(store)  # idempotent
    except ValueError as error:  # a refused OPTIMIZER_LAB_WARM_WORKERS: runs go cold
        st.sidebar.caption(f"run hosts off: {error}")
    pool.check_processes(store)  # runs whose process is gone are interrupted, not live
    live = store.runs()
    live = live[live["status"].isin(LIVE_STATUSES)]
    mine = set(store.owned_runs(caller().owner))
    touched = [int(i) for i in live["id"] if int(i) in mine]
    if touched:
        store.touch_viewers(touched)
    if (live["status"] == "queued").any():
        pool.dispatch(store)


def keep_alive(store: RunStore) -> None:
    """Call once per script run (app.py): `beat` now and every `HEARTBEAT_EVERY_S` while the
    tab is open, on whatever page it shows."""
    st.fragment(run_every=HEARTBEAT_EVERY_S)(_keep_alive_body)(str(store.path))


def _keep_alive_body(path: str) -> None:
    try:
        beat(RunStore(path))
    except Exception as error:  # noqa: BLE001 - a heartbeat must never break a page
        st.sidebar.caption(f"heartbeat skipped: {error}")
