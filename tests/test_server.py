"""The real server starts: `streamlit run app.py` answers /_stcore/health with "ok"."""

from __future__ import annotations

import urllib.request

import pytest

from _streamlit_server import streamlit_server


@pytest.mark.slow
def test_streamlit_server_starts_and_serves(tmp_path):
    with streamlit_server(tmp_path) as url:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as resp:
            assert resp.read().decode().strip() == "ok"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
