"""Optimizer Lab's command line: `python -m optimizer_lab {train,list,export,import} ...`.

See `optimizer_lab.cli` for the commands; the Streamlit app is `streamlit run app.py`.
"""
