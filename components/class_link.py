"""A challenge's link (the Train page at `?challenge=ID`) and its QR code (`segno`).

The address is the one the teacher's browser uses (`st.context.url`), which is often
`localhost`: the teacher may type the address the students' devices reach instead (e.g. the
machine's address on the class network); it is kept for the session.
"""

from __future__ import annotations

import io
from urllib.parse import urlencode, urlsplit

import segno
import streamlit as st

BASE_KEY = "challenge_link_base"
TRAIN_PATH = "train"


def server_base() -> str:
    """`scheme://host:port` (and any base path) of this app as the browser reached it; "" when
    unknown (tests)."""
    try:
        url = st.context.url or ""
    except Exception:  # noqa: BLE001 - no browser context (AppTest)
        url = ""
    return url.rsplit("/", 1)[0] if urlsplit(url).scheme else ""


def challenge_url(challenge_id: int, base: str) -> str:
    """The Train page's address locked to challenge `challenge_id`: `<base>/train?challenge=ID`
    (`base` without a trailing slash; "" gives a relative link)."""
    return f"{base.rstrip('/')}/{TRAIN_PATH}?{urlencode({'challenge': int(challenge_id)})}"


def qr_png(url: str, scale: int = 6) -> bytes:
    """A PNG of the QR code of `url` (error correction M, `scale` pixels per module)."""
    buffer = io.BytesIO()
    segno.make(url, error="m").save(buffer, kind="png", scale=scale, border=2)
    return buffer.getvalue()


def link_and_qr(challenge_id: int) -> str:
    """The challenge's address (editable host) and its QR code; returns the address."""
    state = st.session_state
    state.setdefault(BASE_KEY, server_base())
    st.text_input("address students use", key=BASE_KEY,
                  help="this server as the students' devices reach it, e.g. "
                       "http://192.168.1.20:8501 (localhost works only on this machine)")
    url = challenge_url(challenge_id, state[BASE_KEY] or "")
    st.code(url, language=None, wrap_lines=True)
    if urlsplit(url).scheme in ("http", "https"):
        st.image(qr_png(url), caption="scan to join", width=180)
    else:
        st.caption("type the address above to get a QR code")
    return url
