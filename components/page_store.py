"""The run store every page reads, opened once per server process.

`st.cache_resource` keys it on the path, and the path is read per call, so a test that points
`$OPTIMIZER_LAB_HOME` elsewhere gets that store.
"""

from __future__ import annotations

import streamlit as st

from runs.store.files import default_store
from runs.store.run_store import RunStore


@st.cache_resource(show_spinner=False)
def _store(path: str) -> RunStore:
    return RunStore(path)


def store() -> RunStore:
    """The run store of `$OPTIMIZER_LAB_STORE`, else of `$OPTIMIZER_LAB_HOME`."""
    return _store(str(default_store()))
