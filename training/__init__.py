"""The engine: datasets, models, the run process, the run store. Never imports Streamlit."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
