"""The landscape along the path (Li et al. 2018; Goodfellow et al. 2015): the grid the run
process stores equals the loss evaluated directly (NumPy) at those weights, the directions are
filter-normalised and shared by runs from the same start, and a second run reuses the grid."""

from __future__ import annotations

import numpy as np
import pytest

from engine import path_landscape as pl
from engine.train_step import Engine
from runs.process.handlers import HANDLERS
from runs.process.landscape_hook import path_every
from runs.process.run_loop import RunLoop
from runs.store import landscape_cache
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

SEED = 7


def numpy_loss(weights: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy (nats) of a stack of Dense layers (ReLU between them) in float64:
    the lab's `logistic` (one layer) and `mlp` models."""
    h = x
    for index in range(0, len(weights), 2):
        h = h @ weights[index] + weights[index + 1]
        if index + 2 < len(weights):
            h = np.maximum(h, 0.0)
    logits = h
    logits = logits - logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


def unflatten(flat: np.ndarray, shapes: list[tuple]) -> list[np.ndarray]:
    out, offset = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(flat[offset:offset + size].reshape(shape))
        offset += size
    return out


def make_run(store: RunStore, optimizer: str, steps: int) -> tuple[RunLoop, int]:
    # the logistic model keeps the 441 grid losses cheap (a 64x10 kernel: filter-normalised
    # like any Dense kernel); the maths is the same for the MLP
    config = RunConfig(optimizer=optimizer, dataset="digits", model="logistic", dtype="float64",
                       batch_size=64, steps=steps, eval_every=1000, seed=1,
                       label_noise=0.3, path_landscape=SEED)
    run_id = store.create_run(config.to_json_dict())
    run = RunLoop(run_id, store, Engine(config, "/CPU:0"), total=steps, eval_every=1000,
                  record=lambda s: False, histogram=lambda s: False, handlers=HANDLERS)
    return run, run_id


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("landscape") / "runs.sqlite")
    out = []
    for optimizer in ("adam", "sgd"):  # the second starts after the first's grid is stored
        run, run_id = make_run(store, optimizer, steps=24)
        theta0 = [v.numpy().copy() for v in run.engine.model.trainable_variables]
        while run.step < run.total:
            run.one_step()
        run.flush(wait=True)
        out.append((run, run_id, theta0))
    yield store, out
    for run, *_ in out:
        run.close()


def test_grid_values_equal_direct_loss_evaluations(two_runs):
    store, [(run, run_id, theta0), _] = two_runs
    grid = store.landscape(run_id, "grid")
    assert len(grid) == pl.GRID_POINTS ** 2 == landscape_cache.GRID_CELLS
    d1, d2 = pl.directions(theta0, SEED)
    shapes = [w.shape for w in theta0]
    flat0 = np.concatenate([w.ravel() for w in theta0])
    data = run.engine.dataset
    rng = np.random.default_rng(0)
    picked = grid.iloc[np.r_[0, len(grid) - 1, len(grid) // 2, rng.choice(len(grid), 5)]]
    for _, cell in picked.iterrows():
        direct = numpy_loss(unflatten(flat0 + cell.x * d1 + cell.y * d2, shapes),
                            data.x_train, data.y_train)
        assert cell.loss == pytest.approx(direct, abs=1e-6)
    centre = grid[(grid.x == 0) & (grid.y == 0)].loss.item()
    path = store.landscape(run_id, "path")
    assert path.iloc[0][["step", "x", "y"]].tolist() == [0, 0.0, 0.0]
    assert path.iloc[0].loss == pytest.approx(centre, abs=1e-12)


def test_path_and_line_are_the_run_seen_in_the_plane(two_runs):
    store, [(run, run_id, theta0), _] = two_runs
    d1, d2 = pl.directions(theta0, SEED)
    flat0 = np.concatenate([w.ravel() for w in theta0])
    theta = np.concatenate([v.numpy().ravel() for v in run.engine.model.trainable_variables])
    path = store.landscape(run_id, "path")
    assert path["step"].tolist() == list(range(0, 25, path_every(24)))
    last = path.iloc[-1]
    x, y = pl.project(theta - flat0, d1, d2)
    assert (last.x, last.y) == pytest.approx((x, y), abs=1e-12)
    # the least-squares projection: the residual is orthogonal to both directions
    residual = theta - flat0 - x * d1 - y * d2
    assert abs(residual @ d1) < 1e-8 * np.linalg.norm(d1) * np.linalg.norm(residual)
    data = run.engine.dataset
    assert last.loss == pytest.approx(numpy_loss(unflatten(theta, [w.shape for w in theta0]),
                                                 data.x_train, data.y_train), abs=1e-6)
    line = store.landscape(run_id, "line")
    end = line[line.step == 24].set_index("x").loss
    assert {6, 12, 18, 24} <= set(line.step) and len(end) == len(pl.LINE_T)
    assert end.loc[0.0] == pytest.approx(path.iloc[0].loss, abs=1e-9)  # t = 0: the start
    assert end.loc[1.0] == pytest.approx(last.loss, abs=1e-9)  # t = 1: where the run is
    # random directions see only a small part of the distance travelled (Li et al. 2018, §7)
    share = pl.captured(theta - flat0, d1, d2)
    assert 0.0 < share < 0.1
    distance = store.landscape(run_id, "distance").set_index("step")
    assert distance.loc[24, "x"] == pytest.approx(np.linalg.norm(theta - flat0), rel=1e-12)
    assert distance.loc[24, "y"] == pytest.approx(share, rel=1e-9)


def test_directions_are_filter_normalised_and_fixed_by_the_seed(two_runs):
    _, [(_, _, theta0), (_, _, other0)] = two_runs
    for a, b in zip(theta0, other0):  # same model and seed: the same start for both runs
        np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(SEED)
    first = pl.filter_normalized_direction(theta0, rng)
    for w, d in zip(theta0, first):
        if w.ndim == 1:
            assert not d.any()  # biases are not perturbed
        else:
            np.testing.assert_allclose(np.linalg.norm(d, axis=0), np.linalg.norm(w, axis=0),
                                       rtol=1e-12)
    d1, _ = pl.directions(theta0, SEED)
    np.testing.assert_array_equal(d1, np.concatenate([d.ravel() for d in first]))
    assert not np.array_equal(d1, pl.directions(theta0, SEED + 1)[0])


def test_a_second_run_from_the_same_start_reuses_the_stored_grid(two_runs):
    store, [(_, first_id, _), (_, second_id, _)] = two_runs
    assert store.landscape(second_id, "grid").empty  # nothing computed twice
    assert landscape_cache.grid_source(store, store.run(second_id)["config"]) == first_id
    assert len(store.landscape(second_id, "path")) == len(store.landscape(first_id, "path"))
    other = dict(store.run(second_id)["config"], path_landscape=SEED + 1)
    assert landscape_cache.grid_source(store, other) is None
