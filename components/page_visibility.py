"""Whether the browser tab showing this session is hidden (the Page Visibility API).

A live page refreshes its run twice a second; a tab in the background (another tab in front,
a minimised window) shows nothing, so it need not. An invisible components-v2 element listens
to `document.visibilitychange` and sets its state `hidden` when the tab hides or shows again:
that change reruns the page (the element is outside every fragment), which sets the live
fragment's timer from `hidden()` (`components.live_area`). Nothing is sent on load: a page
starts visible, and a page opened in a background tab says so at its first change.

Source: W3C Page Visibility Level 2 (2022), `document.visibilityState` and the
`visibilitychange` event.
"""

from __future__ import annotations

import streamlit as st

KEY = "_page_visibility"

_JS = """
export default function (component) {
  const { setStateValue } = component;
  const report = () => setStateValue("hidden", document.visibilityState === "hidden");
  document.addEventListener("visibilitychange", report);
  return () => document.removeEventListener("visibilitychange", report);
}
"""

_visibility = st.components.v2.component("optimizer_lab_page_visibility", js=_JS)


def _changed() -> None:
    """The page reruns on the change itself: the state carries the news."""


def hidden() -> bool:
    """Draw the listener (in the sidebar: no gap in the page) and return True while the tab is
    hidden; False before the browser has reported anything."""
    with st.sidebar:
        result = _visibility(key=KEY, default={"hidden": False}, on_hidden_change=_changed)
    return bool(getattr(result, "hidden", False))


__all__ = ["KEY", "hidden"]
