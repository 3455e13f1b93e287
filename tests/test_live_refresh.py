"""How often a live area refreshes: twice a second on a shown tab, every few seconds on a hidden
one (`components.page_visibility`), never once its run has ended (`components.live_area`)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components.live_area import HIDDEN_REFRESH_S, REFRESH_S, refresh_every
from components.page_visibility import KEY


def test_the_timer_follows_the_run_and_the_tab():
    assert refresh_every(active=True, hidden=False) == REFRESH_S == 0.5
    assert refresh_every(active=True, hidden=True) == HIDDEN_REFRESH_S == 5.0
    assert refresh_every(active=False, hidden=False) is None
    assert refresh_every(active=False, hidden=True) is None


def visibility_script():
    import streamlit as st

    from components import page_visibility

    st.write(f"hidden={page_visibility.hidden()}")


def test_the_tab_state_reported_by_the_browser_reaches_the_page():
    at = AppTest.from_function(visibility_script, default_timeout=60).run()
    assert not at.exception
    assert [m.value for m in at.markdown] == ["hidden=False"]  # nothing reported: shown
    assert [n.proto.id for n in at.sidebar.get("bidi_component")][0].endswith(KEY)
    at.session_state[KEY] = {"hidden": True}  # what the element's setStateValue sends
    at.run()
    assert [m.value for m in at.markdown] == ["hidden=True"]
