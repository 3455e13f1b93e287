"""The lab's datasets: small, fixed, in memory, split the same way in every run.

`load_dataset(name, dtype)` returns a frozen `Dataset` of NumPy arrays:

| name            | examples | x                                  | classes |
|-----------------|----------|------------------------------------|---------|
| `digits`        | 1,797    | 64 standardised pixels (8x8 image) | 10      |
| `breast_cancer` | 569      | 30 standardised features           | 2       |
| `moons`         | 2,000    | 2 standardised coordinates         | 2       |
| `tokens`        | 4,000    | 12 int32 token ids from a vocab 64 | 4       |

The train/validation split is stratified (`train_test_split`, `test_size=0.25`) with the FIXED
seed `SPLIT_SEED = 0`, independent of the run seed, so validation numbers of different runs are
measured on the same examples. Float features are standardised with a `StandardScaler` fitted on
the training part only (no validation statistics leak into training).

Digits stay flat (64 features, row-major 8x8); `Dataset.image_shape` is `(8, 8, 1)` and the CNN
model starts with a `Reshape` to it.

Label noise (`label_noise` = f in [0, 0.9]): exactly round(f * n_train) TRAINING labels, chosen
with the fixed seed `NOISE_SEED` (the same examples in every run), are replaced by another class
drawn uniformly from the other n_classes - 1; validation labels stay clean, so the validation
loss shows how much of the noise a model memorised (Zhang et al. 2017, "Understanding deep
learning requires rethinking generalization", arXiv:1611.03530, sec. 2: random labels are fitted
perfectly, at a cost to generalisation).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, make_moons
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SPLIT_SEED = 0
NOISE_SEED = 1
MAX_LABEL_NOISE = 0.9
TEST_SIZE = 0.25
TOKEN_VOCAB = 64
TOKEN_LENGTH = 12
TOKEN_GROUPS = 4
TOKEN_EXAMPLES = 4000
MOONS_EXAMPLES = 2000
DATASETS = ("digits", "breast_cancer", "moons", "tokens")


@dataclass(frozen=True)
class Dataset:
    """One dataset split into train and validation parts (arrays are read-only).

    Attributes:
        name: the dataset name (`DATASETS`).
        description: one line for the UI.
        x_train, x_val: float arrays [n, *input_shape] of the requested dtype, or int32 token
            ids [n, 12] for `tokens`.
        y_train, y_val: int32 class labels [n] in 0..n_classes-1.
        n_classes: number of classes (the model outputs this many logits).
        input_shape: shape of one example, e.g. `(64,)`.
        image_shape: `(8, 8, 1)` for digits (the CNN's view), else None.
    """

    name: str
    description: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    n_classes: int
    input_shape: tuple[int, ...]
    image_shape: tuple[int, ...] | None = None

    label_noise: float = 0.0
    noisy: np.ndarray | None = None  # int64 [round(label_noise * n_train)]: flipped rows

    @property
    def n_train(self) -> int:
        """Number of training examples."""
        return int(self.x_train.shape[0])


def noisy_labels(labels: np.ndarray, n_classes: int, fraction: float,
                 seed: int = NOISE_SEED) -> tuple[np.ndarray, np.ndarray]:
    """`labels` with exactly round(fraction * n) of them replaced by another class.

    Args:
        labels: int array [n] in 0..n_classes-1.
        n_classes: number of classes (>= 2).
        fraction: in [0, `MAX_LABEL_NOISE`].
        seed: which examples and which wrong classes (fixed: the same in every run).

    Returns:
        (new labels int32 [n], indices int64 [k] of the changed examples, sorted); every changed
        label differs from the original one.

    Raises:
        ValueError: `fraction` outside [0, 0.9] (names the field).
    """
    if isinstance(fraction, bool) or not 0.0 <= fraction <= MAX_LABEL_NOISE:
        raise ValueError(f"label_noise={fraction!r} refused: must be a float in "
                         f"[0, {MAX_LABEL_NOISE:g}]")
    labels = np.asarray(labels, dtype=np.int32)
    rng = np.random.RandomState(seed)
    count = int(round(fraction * labels.size))
    chosen = np.sort(rng.choice(labels.size, size=count, replace=False)).astype(np.int64)
    # a shift of 1..n_classes-1 modulo n_classes: uniform over the OTHER classes
    shift = rng.randint(1, n_classes, size=count).astype(np.int32)
    out = labels.copy()
    out[chosen] = (labels[chosen] + shift) % n_classes
    return out, chosen


def token_labels(tokens: np.ndarray) -> np.ndarray:
    """Label of each token sequence: the group `id % 4` occurring most often, ties to the lowest.

    Args:
        tokens: int array [n, length] of token ids in 0..63.

    Returns:
        int32 array [n] in 0..3.
    """
    groups = np.asarray(tokens) % TOKEN_GROUPS
    counts = np.stack([(groups == g).sum(axis=1) for g in range(TOKEN_GROUPS)], axis=1)
    return counts.argmax(axis=1).astype(np.int32)  # argmax returns the first maximum


def _tokens() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(1234)
    x = rng.randint(0, TOKEN_VOCAB, size=(TOKEN_EXAMPLES, TOKEN_LENGTH)).astype(np.int32)
    return x, token_labels(x)


def _raw(name: str) -> tuple[np.ndarray, np.ndarray, str]:
    if name == "digits":
        bunch = load_digits()
        return bunch.data, bunch.target, "8x8 handwritten digits (UCI), 64 pixels, 10 classes"
    if name == "breast_cancer":
        bunch = load_breast_cancer()
        return bunch.data, bunch.target, "Wisconsin breast cancer, 30 features, benign/malignant"
    if name == "moons":
        x, y = make_moons(n_samples=MOONS_EXAMPLES, noise=0.2, random_state=7)
        return x, y, "two interleaving half circles, 2 features, noise 0.2"
    if name == "tokens":
        x, y = _tokens()
        return x, y, ("synthetic sequences of 12 token ids (vocab 64); label = most frequent "
                      "id % 4 group, ties to the lowest")
    raise ValueError(f"dataset={name!r} refused: must be one of {', '.join(DATASETS)}")


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


@functools.lru_cache(maxsize=16)
def load_dataset(name: str, dtype: str = "float32", label_noise: float = 0.0) -> Dataset:
    """Load, split (fixed seed 0, stratified, 25 % validation) and standardise a dataset.

    Cached: repeated calls return the same (read-only) object.

    Args:
        name: one of `DATASETS`.
        dtype: `float32` or `float64`, the dtype of float features (token ids stay int32).
        label_noise: fraction of training labels replaced by another class (`noisy_labels`).

    Raises:
        ValueError: unknown `name` or `dtype`, `label_noise` outside [0, 0.9] (the message
            names the field).
    """
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype={dtype!r} refused: must be float32 or float64")
    x, y, description = _raw(name)
    y = np.asarray(y, dtype=np.int32)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=TEST_SIZE, stratify=y, random_state=SPLIT_SEED
    )
    if name == "tokens":
        x_train, x_val = x_train.astype(np.int32), x_val.astype(np.int32)
    else:
        scaler = StandardScaler().fit(x_train)
        x_train = scaler.transform(x_train).astype(dtype)
        x_val = scaler.transform(x_val).astype(dtype)
    n_classes = int(y.max()) + 1
    y_train, noisy = noisy_labels(y_train, n_classes, float(label_noise))
    return Dataset(
        name=name,
        description=description,
        x_train=_readonly(x_train),
        y_train=_readonly(y_train),
        x_val=_readonly(x_val),
        y_val=_readonly(y_val),
        n_classes=n_classes,
        input_shape=tuple(int(d) for d in x_train.shape[1:]),
        image_shape=(8, 8, 1) if name == "digits" else None,
        label_noise=float(label_noise),
        noisy=_readonly(noisy),
    )
