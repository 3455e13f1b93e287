"""runs: the run service.

* `runs.protocol`: what crosses the process boundary (statuses, command payloads, `parse`);
  TensorFlow-free, shared by the server, the CLI and the run process.
* `runs.store`: the SQLite store (runs, the command queue, the named record rows).
* `runs.service`: what the pages and the CLI call: control (the one validation of a command),
  ownership, the run pool and warm pool, waiting. No TensorFlow.
* `runs.process`: the run process: its loop, the command handlers, the cold and warm workers.
* `runs.io`: export and bundle import.

Layers inside: protocol <- store <- service <- process (io reads the store). May import:
hypergrad, engine, settings, optimizers. Never imports Streamlit.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
