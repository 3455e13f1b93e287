"""The run processes (TensorFlow): `run_host` (a warm process that trains many runs, interleaved by
`host_scheduler`), `worker` (a cold process for one run), `run_session.RunSession` (one run's life
in either), `run_loop.RunLoop` (steppable: `advance`) and the command `handlers` it is given."""
