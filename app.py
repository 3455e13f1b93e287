"""Optimizer Lab: the Streamlit entry point (`streamlit run app.py`). Pages live in `views/`."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2 (tf_keras) before TensorFlow loads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import streamlit as st  # noqa: E402

st.set_page_config(page_title="Optimizer Lab", layout="wide")

PAGES = [
    st.Page("views/train.py", title="Train", icon=":material/model_training:", default=True),
]

pg = st.navigation(PAGES)
pg.run()
