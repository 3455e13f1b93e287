"""Datasets: shapes, class counts, standardisation, the fixed split, token labels."""

import numpy as np
import pytest

import pydantic

from engine.data import DATASETS, load_dataset, noisy_labels, token_labels
from settings.run_config import RunConfig


def test_digits_shapes_and_classes():
    ds = load_dataset("digits")
    assert len(ds.x_train) + len(ds.x_val) == 1797
    assert ds.x_train.shape[1:] == (64,) and ds.input_shape == (64,)
    assert ds.image_shape == (8, 8, 1) and ds.n_classes == 10
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert set(np.unique(ds.y_train)) == set(range(10))
    assert abs(len(ds.x_val) - 0.25 * 1797) <= 1
    # stratified: per-class proportions of train and validation agree
    p_train = np.bincount(ds.y_train) / len(ds.y_train)
    p_val = np.bincount(ds.y_val) / len(ds.y_val)
    assert np.abs(p_train - p_val).max() < 0.01


@pytest.mark.parametrize("name,total,classes,features", [
    ("breast_cancer", 569, 2, 30), ("moons", 2000, 2, 2), ("tokens", 4000, 4, 12)])
def test_other_datasets(name, total, classes, features):
    ds = load_dataset(name)
    assert len(ds.x_train) + len(ds.x_val) == total
    assert ds.n_classes == classes and ds.input_shape == (features,)
    assert set(np.unique(ds.y_val)) == set(range(classes))


def test_standardised_on_train():
    ds = load_dataset("breast_cancer")
    assert np.abs(ds.x_train.mean(axis=0)).max() < 1e-5
    assert np.allclose(ds.x_train.std(axis=0), 1.0, atol=1e-3)
    digits = load_dataset("digits")
    assert np.abs(digits.x_train.mean(axis=0)).max() < 1e-5


def test_split_fixed_and_cached():
    a = load_dataset("moons")
    assert load_dataset("moons") is a
    load_dataset.cache_clear()
    b = load_dataset("moons")
    assert b is not a
    np.testing.assert_array_equal(a.x_val, b.x_val)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    with pytest.raises(ValueError):
        a.x_train[0, 0] = 1.0  # read-only


def test_float64_and_tokens_dtype():
    assert load_dataset("digits", "float64").x_train.dtype == np.float64
    tokens = load_dataset("tokens")
    assert tokens.x_train.dtype == np.int32
    assert tokens.x_train.min() >= 0 and tokens.x_train.max() < 64


def test_token_labels_hand_made():
    # groups (id % 4): [1, 1, 2, 2, 2, 0, ...]
    seq = np.array([[1, 5, 2, 6, 10, 4, 8, 3, 7, 9, 14, 18]])  # groups 1,1,2,2,2,0,0,3,3,1,2,2
    assert token_labels(seq).tolist() == [2]
    tie = np.array([[0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10, 11]])  # 3 of each group: ties -> 0
    assert token_labels(tie).tolist() == [0]
    ds = load_dataset("tokens")
    assert np.array_equal(token_labels(ds.x_val), ds.y_val)


def test_unknown_dataset_refused():
    with pytest.raises(ValueError, match="dataset"):
        load_dataset("mnist")
    assert "tokens" in DATASETS


# ----- label noise (engine.data.noisy_labels) ------------------------------------------------
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.3, 0.9])
def test_label_noise_flips_exactly_the_fraction_of_training_labels_to_another_class(fraction):
    clean = load_dataset("digits")
    noisy = load_dataset("digits", label_noise=fraction)
    changed = np.flatnonzero(noisy.y_train != clean.y_train)
    assert changed.size == round(fraction * clean.n_train)  # exactly, and each to ANOTHER class
    np.testing.assert_array_equal(changed, noisy.noisy)
    np.testing.assert_array_equal(noisy.y_val, clean.y_val)  # validation stays clean
    np.testing.assert_array_equal(noisy.x_train, clean.x_train)
    assert noisy.y_train.min() >= 0 and noisy.y_train.max() < clean.n_classes
    assert noisy.label_noise == fraction


def test_label_noise_is_the_same_in_every_run_and_spreads_over_the_other_classes():
    a, _ = noisy_labels(np.zeros(9000, np.int32), 10, 0.5)
    b, _ = noisy_labels(np.zeros(9000, np.int32), 10, 0.5)
    np.testing.assert_array_equal(a, b)
    counts = np.bincount(a, minlength=10)
    assert counts[0] == 4500
    # 4,500 wrong labels over 9 classes: 500 each expected; a binomial sd of ~21
    assert np.all(np.abs(counts[1:] - 500) < 100), counts


@pytest.mark.parametrize("bad", [-0.1, 0.95, True])
def test_bad_label_noise_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"label_noise=.* refused: must be a float in \[0, 0\.9\]"):
        noisy_labels(np.zeros(10, np.int32), 2, bad)
    if not isinstance(bad, bool):
        with pytest.raises(pydantic.ValidationError, match="label_noise"):
            RunConfig(label_noise=bad)
