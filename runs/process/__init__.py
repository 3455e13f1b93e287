"""The run process (TensorFlow): `worker` (a cold process for one run), `warm_worker`,
`run_loop.RunLoop` and the command `handlers` it is given."""
