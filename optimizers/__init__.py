"""optimizers: pure update rules, their Keras 2 OptimizerV2 adapters, the fused fast path
(`fused_kernels`), wrappers, the registry, the Keras 3 twins. The bottom of
the layering; no module imports itself back (the registry is handed a plugin loader, wrappers
are handed their inner optimizer's class).

May import: nothing of the lab (only TensorFlow, tf_keras, NumPy).

TensorFlow-free at import (pages and the CLI use only these): `catalog` (every optimizer's
specs, options and kind as data), `hyperparams`, `rule_source`, `registry` (it imports a class
only in `get` / `create`). The contract check and plugin discovery live one floor up, in
`optimizer_plugins`. The rule and class modules (`adam`, `base`, `fused_kernels`, `wrapping`,
`keras_schedules`, ...) import TensorFlow.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads: `_set_hyper` is tf_keras only)
