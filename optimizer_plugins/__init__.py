"""Plugin optimizers: the contract an OptimizerV2 must keep (`contract`), finding and checking
plugin files in a child process (`plugin_discovery`, `plugin_process`).

Sits just above `optimizers/` (it imports the registry and the base classes, never the other
way round); the pages, the CLI, the run process and the teaching modules import it.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads: plugin files are OptimizerV2s)
