"""The lab's models: small Keras 2 (`tf_keras`) classifiers that output logits [batch, n_classes].

| name        | layers (variable labels)                                                     |
|-------------|------------------------------------------------------------------------------|
| `logistic`  | `dense_1` (n_classes)                                                        |
| `mlp`       | `dense_1` 256 relu, `dense_2` 256 relu, `dense_3` n_classes (64-256-256-10)  |
| `cnn`       | Reshape 8x8x1, `conv_1` 16 3x3 relu, `conv_2` 32 3x3 relu, Flatten,          |
|             | `dense_1` 64 relu, `dense_2` n_classes                                       |
| `embedding` | `embedding` Embedding(64, 16), GlobalAveragePooling1D, `dense_1` n_classes   |

Initial weights are a pure function of the seed: every initialiser gets its own explicit seed
derived from the run seed, so two models built with the same seed are identical whatever was
built before in the process. Layers are named explicitly so variable names read
`dense_1/kernel:0`; `variable_label` shortens them to `dense_1/kernel`.
"""

from __future__ import annotations



import tensorflow as tf
import tf_keras

from engine.data import Dataset

MODELS = ("logistic", "mlp", "cnn", "embedding")
L = tf_keras.layers


class _Seeds:
    """Distinct, deterministic initialiser seeds derived from the run seed."""

    def __init__(self, seed: int):
        self.seed, self.count = int(seed), 0

    def glorot(self) -> tf_keras.initializers.Initializer:
        self.count += 1
        return tf_keras.initializers.GlorotUniform(seed=(self.seed * 1009 + self.count) % 2**31)

    def uniform(self) -> tf_keras.initializers.Initializer:
        self.count += 1
        return tf_keras.initializers.RandomUniform(
            -0.05, 0.05, seed=(self.seed * 1009 + self.count) % 2**31
        )


def build_model(
    name: str, dataset: Dataset, seed: int = 0, dtype: str = "float32"
) -> tf_keras.Model:
    """Build model `name` for `dataset` (weights created, seeded).

    Args:
        name: one of `MODELS`.
        dataset: gives `input_shape`, `image_shape` and `n_classes`.
        seed: initial-weights seed (0..2**31-1).
        dtype: `float32` or `float64`: the dtype of every layer's variables and computations.

    Returns:
        A `tf_keras.Sequential` mapping [batch, *input_shape] to logits [batch, n_classes] of
        `dtype` (token inputs are int32 ids).

    Raises:
        ValueError: unknown `name`, or `cnn` on a dataset without an image shape.
    """
    if name not in MODELS:
        raise ValueError(f"model={name!r} refused: must be one of {', '.join(MODELS)}")
    tf_keras.utils.set_random_seed(seed)
    seeds = _Seeds(seed)
    n = dataset.n_classes

    def dense(units: int, index: int, activation: str | None = None) -> tf_keras.layers.Layer:
        return L.Dense(units, activation=activation, kernel_initializer=seeds.glorot(),
                       name=f"dense_{index}", dtype=dtype)

    input_dtype = "int32" if name == "embedding" else dtype
    layers: list[tf_keras.layers.Layer] = [
        L.InputLayer(input_shape=dataset.input_shape, dtype=input_dtype)]
    if name == "logistic":
        layers += [dense(n, 1)]
    elif name == "mlp":
        layers += [dense(256, 1, "relu"), dense(256, 2, "relu"), dense(n, 3)]
    elif name == "cnn":
        if dataset.image_shape is None:
            raise ValueError(f"model='cnn' refused for dataset={dataset.name!r}: no image shape")
        layers += [
            L.Reshape(dataset.image_shape, name="reshape", dtype=dtype),
            L.Conv2D(16, 3, activation="relu", kernel_initializer=seeds.glorot(),
                     name="conv_1", dtype=dtype),
            L.Conv2D(32, 3, activation="relu", kernel_initializer=seeds.glorot(),
                     name="conv_2", dtype=dtype),
            L.Flatten(name="flatten", dtype=dtype),
            dense(64, 1, "relu"),
            dense(n, 2),
        ]
    else:  # embedding
        layers += [
            L.Embedding(64, 16, embeddings_initializer=seeds.uniform(), name="embedding",
                        dtype=dtype),
            L.GlobalAveragePooling1D(name="pool", dtype=dtype),
            dense(n, 1),
        ]
    return tf_keras.Sequential(layers, name=name)


def variable_label(var: tf.Variable) -> str:
    """Short label of a model variable: `dense_1/kernel:0` -> `dense_1/kernel`.

    Only the last two path components are kept (layer/weight), so a model-name prefix
    (`mlp/dense_1/kernel:0`) is dropped as well.
    """
    parts = var.name.split(":")[0].split("/")
    return "/".join(parts[-2:])
