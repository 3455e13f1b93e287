"""The loss landscape along a run's path: a 2-D slice through the initial weights, the path
projected onto it, and the straight line from the start to where the run is.

Li et al. (2018, "Visualizing the Loss Landscape of Neural Nets", arXiv:1712.09913, §4): the
slice is

    f(x, y) = L(theta_0 + x d_1 + y d_2)

with two random Gaussian directions d_1, d_2, each FILTER-NORMALISED: every filter j of every
weight array (here the slice along the last axis: a Dense kernel's column, the weights into one
unit; a Conv2D kernel's output channel) is rescaled to the norm of the same filter of theta_0,

    d_{i,j} <- d_{i,j} / ||d_{i,j}|| * ||theta_{0,i,j}||,

and the 1-D arrays (biases) get a zero direction, as their paper's code does. The directions
come from `numpy.random.default_rng(seed)` over the initial weights alone, so every run that
started from the same initial weights (same model, data, `seed`) gets the same plane whatever
its optimizer: the slices and the projected paths can be compared. (Li et al. §7 plot paths in
the plane of the path's own PCA directions, which depends on the path: two optimizers would get
two different planes.)

The path is projected every so many steps (the run asks for it with `path_landscape`, the seed):
the least-squares coordinates of theta_t - theta_0 in the plane,

    [x, y] = G^-1 [d_1 . delta, d_2 . delta],  G = [[d_1.d_1, d_1.d_2], [d_2.d_1, d_2.d_2]],

two dot products per point, recorded with the loss at the REAL weights theta_t (not at the
projected point: random directions in ~85,000 dimensions are nearly orthogonal to the path, so
the projection shows only a small part of the distance travelled; `captured` says how much).
Projecting in the run process costs two dot products per recorded point; storing weight
snapshots instead would cost ~85,000 floats per point (the digits MLP) and a reader with
TensorFlow.

The 1-D interpolation (Goodfellow, Vinyals & Saxe 2015, "Qualitatively characterizing neural
network optimization problems", arXiv:1412.6544, §2) is L(theta_0 + t (theta_T - theta_0)) for
t in `LINE_T`.

Every loss is the mean cross-entropy (nats) over the whole training set (the noisy labels the
run trains on), inference mode, in the run's dtype, evaluated on a separate probe model: the
run's own variables are never written.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from engine.compiled import compiled
from engine.models import build_model
from engine.record_rows import LandscapeRow
from engine.train_step import cross_entropy

GRID_POINTS = 21  # per axis: a 21 x 21 grid
SPAN = 1.0  # x and y in [-SPAN, SPAN] (units of the filter norms)
LINE_T = tuple(np.round(np.linspace(-0.25, 1.25, 25), 6))  # Goodfellow et al. show t in [0, 1]+


def filter_normalized_direction(weights: Sequence[np.ndarray],
                                rng: np.random.Generator) -> list[np.ndarray]:
    """One random direction, filter-normalised to `weights` (Li et al. 2018, §4).

    Args:
        weights: the initial weights, one array per trainable variable (any float dtype).
        rng: draws a standard normal per element, in the order of `weights`.

    Returns:
        float64 arrays of the shapes of `weights`; zeros for 1-D arrays (biases) and for a
        filter whose weights are all 0.
    """
    out = []
    for w in weights:
        w = np.asarray(w, dtype=np.float64)
        d = rng.standard_normal(w.shape)
        if w.ndim <= 1:
            out.append(np.zeros_like(w))
            continue
        axes = tuple(range(w.ndim - 1))  # one filter per index of the last axis
        d_norm = np.sqrt((d * d).sum(axis=axes, keepdims=True))
        w_norm = np.sqrt((w * w).sum(axis=axes, keepdims=True))
        out.append(np.where(d_norm > 0, d / np.where(d_norm > 0, d_norm, 1.0), 0.0) * w_norm)
    return out


def directions(weights: Sequence[np.ndarray], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(d_1, d_2): two filter-normalised directions of `seed`, flattened and concatenated in
    the order of `weights` (float64 [n_parameters] each)."""
    rng = np.random.default_rng(int(seed))
    first = filter_normalized_direction(weights, rng)
    second = filter_normalized_direction(weights, rng)
    return (np.concatenate([a.ravel() for a in first]),
            np.concatenate([a.ravel() for a in second]))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum, not BLAS: inside a TensorFlow process BLAS's threads wait for the cores TF's
    # thread pools spin on (a 2-core machine: 180 ms for 4 dot products of 85,000, measured)
    return float(np.einsum("i,i->", a, b))


def project(delta: np.ndarray, d1: np.ndarray, d2: np.ndarray) -> tuple[float, float]:
    """Least-squares coordinates (x, y) of `delta` (float [n]) in the plane of d_1, d_2."""
    g11, g12, g22 = _dot(d1, d1), _dot(d1, d2), _dot(d2, d2)
    r1, r2 = _dot(d1, delta), _dot(d2, delta)
    det = g11 * g22 - g12 * g12  # > 0: two independent random directions
    return (g22 * r1 - g12 * r2) / det, (g11 * r2 - g12 * r1) / det


def captured(delta: np.ndarray, d1: np.ndarray, d2: np.ndarray) -> float:
    """||projection of delta onto the plane|| / ||delta|| in [0, 1] (0 for delta = 0)."""
    norm = math.sqrt(_dot(delta, delta))
    if norm == 0.0:
        return 0.0
    x, y = project(delta, d1, d2)
    plane = x * d1 + y * d2
    return math.sqrt(_dot(plane, plane)) / norm


def grid_axis(points: int = GRID_POINTS, span: float = SPAN) -> np.ndarray:
    """float64 [points]: the grid's x (and y) values, -span..span."""
    return np.linspace(-span, span, points)


class PathLandscape:
    """The slice, projections and line of one run (see the module docstring).

    Args:
        model: the run's model, AT ITS INITIAL WEIGHTS when this is built (step 0).
        model_name, dataset, seed, dtype: rebuild a probe model of the same architecture
            (`engine.models.build_model`).
        x_train, y_train: the training set the losses average over.
        direction_seed: the seed of d_1, d_2 (`RunConfig.path_landscape`).
        device: where the probe model and its loss run.
    """

    def __init__(self, model: Any, model_name: str, dataset: Any, seed: int, dtype: str,
                 x_train: tf.Tensor, y_train: tf.Tensor, direction_seed: int,
                 device: str = "/CPU:0"):
        self.model, self.device, self.dtype = model, device, dtype
        self.shapes = [tuple(v.shape) for v in model.trainable_variables]
        initial = [v.numpy() for v in model.trainable_variables]
        self.theta0 = np.concatenate([w.ravel().astype(np.float64) for w in initial])
        self.d1, self.d2 = directions(initial, direction_seed)
        with tf.device(device):
            self.probe = build_model(model_name, dataset, seed, dtype)
            x, y = x_train, y_train

            def loss_at(flat: tf.Tensor) -> tf.Tensor:
                offset = 0
                for variable, shape in zip(self.probe.trainable_variables, self.shapes):
                    size = int(np.prod(shape))
                    variable.assign(tf.reshape(flat[offset:offset + size], shape))
                    offset += size
                return cross_entropy(y, self.probe(x, training=False))

            self._loss = compiled(loss_at, input_signature=[
                tf.TensorSpec([self.theta0.size], tf.as_dtype(dtype))])
        self.points = GRID_POINTS
        # grid cells (i, j) not computed yet, row by row (j = the y index)
        self.pending = [(i, j) for j in range(GRID_POINTS) for i in range(GRID_POINTS)]

    # ----- losses -------------------------------------------------------------------------
    def loss(self, flat: np.ndarray) -> float:
        """Mean training cross-entropy (nats) at the weights `flat` (float [n_parameters])."""
        with tf.device(self.device):
            return float(self._loss(tf.constant(flat, dtype=self.dtype)))

    def weights(self) -> np.ndarray:
        """float64 [n_parameters]: the run's current weights, flattened."""
        return np.concatenate([v.numpy().ravel().astype(np.float64)
                               for v in self.model.trainable_variables])

    # ----- rows -------------------------------------------------------------------------
    def grid_rows(self, count: int) -> list[LandscapeRow]:
        """The next `count` grid points not yet computed (row by row), as `grid` rows."""
        axis = grid_axis()
        rows = []
        for i, j in self.pending[:count]:
            x, y = float(axis[i]), float(axis[j])
            rows.append(LandscapeRow(0, "grid", x, y, self.loss(self.theta0 + x * self.d1
                                                                 + y * self.d2)))
        del self.pending[:count]
        return rows

    def path_row(self, step: int) -> LandscapeRow:
        """The run's weights now, projected (x, y), with the loss at the real weights."""
        theta = self.weights()
        x, y = project(theta - self.theta0, self.d1, self.d2)
        return LandscapeRow(step, "path", x, y, self.loss(theta))

    def line_rows(self, step: int) -> list[LandscapeRow]:
        """L(theta_0 + t (theta_step - theta_0)) for t in `LINE_T`, as `line` rows (y = 0)."""
        delta = self.weights() - self.theta0
        return [LandscapeRow(step, "line", float(t), 0.0, self.loss(self.theta0 + t * delta))
                for t in LINE_T]

    def distance_row(self, step: int) -> LandscapeRow:
        """A `distance` row: x = ||theta_step - theta_0||, y = the share of it the plane shows
        (`captured`), loss None."""
        delta = self.weights() - self.theta0
        return LandscapeRow(step, "distance", math.sqrt(_dot(delta, delta)),
                            captured(delta, self.d1, self.d2), None)

    def captured(self) -> float:
        """The share of the distance from theta_0 to the run's weights now that the plane
        shows (`captured`)."""
        return captured(self.weights() - self.theta0, self.d1, self.d2)
