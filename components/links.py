"""Links between pages, by URL path (`"train"`, `"runs"`).

`app.py` registers its `st.Page` objects (`register`); a link to a page the current navigation
routes is an `st.page_link` (client-side: the session is kept). Where no navigation routes it
(a page drawn alone, as the tests do), Streamlit refuses a link to another page, so the link
becomes a plain Markdown link to the same URL.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping
from urllib.parse import urlencode

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

_PAGES: dict[str, st.Page] = {}  # URL path -> the app's page


def register(pages: Mapping[str, st.Page]) -> None:
    """Remember the app's pages by URL path (`app.py` calls it before `st.navigation`)."""
    _PAGES.update(pages)


def routed(path: str) -> bool:
    """Whether this script run's navigation routes the page at URL path `path`."""
    ctx = get_script_run_ctx()
    return ctx is not None and any(info.get("url_pathname") == path
                                   for info in ctx.pages_manager.get_pages().values())


def page_link(path: str, label: str, query_params: dict[str, Any] | None = None,
              icon: str | None = None) -> None:
    """A link to the page at URL path `path` (`st.page_link`), or a Markdown link to its URL
    when the current navigation does not route it.

    Args:
        path: a URL path of `views.PAGES` (`"train"`).
        label: the link text.
        query_params: added to the URL (`{"lesson": "adam"}` -> `?lesson=adam`).
        icon: a Material icon or an emoji, as `st.page_link` takes it.
    """
    page = _PAGES.get(path)
    if page is not None and routed(path):
        st.page_link(page, label=label, icon=icon, query_params=query_params)
    else:
        query = f"?{urlencode(query_params)}" if query_params else ""
        st.markdown(f"[{label}]({path}{query})")


__all__ = ["page_link", "register", "routed"]
