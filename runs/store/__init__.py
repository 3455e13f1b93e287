"""The run store: one SQLite file, the bus and the memory of the lab (`run_store.RunStore`: runs
and the command queue; `records`: the record tables; `schema`, `files`, `admission`,
`processes`). No Streamlit, no TensorFlow."""
