"""`python -m optimizer_lab ...`: see `optimizer_lab.cli`."""

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2 (tf_keras) before TensorFlow loads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from optimizer_lab.cli import main  # noqa: E402

sys.exit(main())
