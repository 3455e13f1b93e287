"""pytest root configuration: Keras 2 (`tf_keras`) must be selected before TensorFlow loads."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
