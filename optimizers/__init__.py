"""The optimizer library: pure update rules, their OptimizerV2 adapters and a registry.

Importing this package selects Keras 2 (`TF_USE_LEGACY_KERAS=1`) when nothing chose before,
because the `_set_hyper` / `add_slot` API exists only in `tf_keras`, not in Keras 3.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
