"""optimizers: pure update rules, their Keras 2 OptimizerV2 adapters, wrappers, the registry,
the contract check and plugin loading. The bottom of the layering.

May import: nothing of the lab (only TensorFlow, tf_keras, NumPy).

TensorFlow-free at import (pages and the CLI use only these): `catalog` (every optimizer's
specs, options and kind as data), `hyperparams`, `registry` (it imports a class only in
`get` / `create`), `plugin_discovery`, `plugin_process` and `contract` (TensorFlow loads when a check
runs). The rule and class modules (`adam`, `base`, `wrapping`, ...) import TensorFlow.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads: `_set_hyper` is tf_keras only)
