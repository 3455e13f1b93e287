"""The run service the pages and the CLI call: `control` (start, steer, stop; the one validation
of a command), `ownership`, `pool`, `warm_pool`, `worker_table`, `waiting`. No Streamlit, no
TensorFlow."""
