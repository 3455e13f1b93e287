"""The run loop driven in-process: accuracy, records, reproducibility, divergence."""

import numpy as np
import pytest

from runs.process import worker
from settings.run_config import RunConfig
from runs.store.run_store import RunStore

ACCURACY_STEPS = 600


def _run(store, **fields):
    config = RunConfig(**fields)
    run_id = store.create_run(config.to_json_dict())
    status = worker.train(run_id, store)
    return run_id, status


@pytest.mark.slow
def test_adam_digits_mlp_accuracy_and_records(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    run_id, status = _run(store, optimizer="adam", hyperparameters={"learning_rate": 1e-3},
                          dataset="digits", model="mlp", batch_size=128,
                          steps=ACCURACY_STEPS, seed=0, eval_every=50)
    run = store.run(run_id)
    assert status == run["status"] == "finished", run["message"]
    assert run["step"] == ACCURACY_STEPS and run["traces"] == 1
    assert run["device"].startswith("/device:") and set(run["versions"]) == {
        "tensorflow", "tf_keras", "numpy", "python"}
    scalars = store.scalars(run_id)
    val = scalars[scalars.name == "val_accuracy"].set_index("step").value
    assert val.index.min() == 0 and val.index.max() == ACCURACY_STEPS
    assert val.loc[ACCURACY_STEPS] >= 0.95, val.tail()
    train_loss = scalars[scalars.name == "train_loss"]
    assert len(train_loss) == ACCURACY_STEPS and np.isfinite(train_loss.value).all()
    stats = store.slot_stats(run_id)
    variables = {"dense_1/kernel", "dense_1/bias", "dense_2/kernel", "dense_2/bias",
                 "dense_3/kernel", "dense_3/bias"}
    last = stats[stats.step == ACCURACY_STEPS]
    assert set(zip(last.variable, last.slot)) == {(v, s) for v in variables
                                                  for s in ("m", "v", "update")}
    # Adam's first step moves each parameter by ~lr * sign(g): `update` = before - after
    first = stats[(stats.step == 1) & (stats.variable == "dense_3/bias")].set_index("slot")
    assert first.loc["update", "norm"] == pytest.approx(1e-3 * np.sqrt(10), rel=1e-3)
    hist = store.histograms(run_id, "dense_1/kernel", "update")
    assert hist.step.tolist()[:2] == [1, 20] and hist.step.iloc[-1] == ACCURACY_STEPS
    assert sum(hist.counts.iloc[-1]) == 64 * 256
    changes = store.hyper_changes(run_id)
    assert set(changes.name) == {"learning_rate", "beta_1", "beta_2", "epsilon"}
    assert (changes.step == 1).all() and (changes.source == "init").all()
    assert changes.set_index("name").new["learning_rate"] == pytest.approx(1e-3)
    assert run["optimizer_config"]["learning_rate"] == 0.001
    assert {h["name"] for h in run["hyper_variables"]} == set(changes.name)
    assert all(h["shape"] == [] and h["dtype"] == "float32" for h in run["hyper_variables"])


@pytest.mark.slow
def test_same_config_and_seed_reproduce(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    losses = []
    for _ in range(2):
        run_id, status = _run(store, dataset="moons", model="mlp", steps=50, seed=3)
        assert status == "finished"
        frame = store.scalars(run_id, ["train_loss"])
        losses.append(frame.value.to_numpy())
    assert len(losses[0]) == 50
    np.testing.assert_array_equal(losses[0], losses[1])
    other, _ = _run(store, dataset="moons", model="mlp", steps=50, seed=4)
    assert not np.array_equal(store.scalars(other, ["train_loss"]).value.to_numpy(), losses[0])


@pytest.mark.slow
def test_divergence_stops_with_status_diverged(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    run_id, status = _run(store, optimizer="sgd", hyperparameters={"learning_rate": 10.0},
                          dataset="digits", model="mlp", steps=2000, eval_every=10)
    run = store.run(run_id)
    assert status == run["status"] == "diverged", run["message"]
    assert "diverged at step" in run["message"] and "not finite" in run["message"]
    scalars = store.scalars(run_id)
    assert len(scalars) > 0 and np.isfinite(scalars.value).all()  # only finite records kept


@pytest.mark.slow
@pytest.mark.parametrize("dataset,model,dtype", [
    ("tokens", "embedding", "float32"), ("digits", "cnn", "float32"),
    ("breast_cancer", "logistic", "float64")])
def test_other_models_train(tmp_path, dataset, model, dtype):
    store = RunStore(tmp_path / "runs.sqlite")
    run_id, status = _run(store, dataset=dataset, model=model, steps=30, eval_every=10,
                          dtype=dtype)
    assert status == "finished", store.run(run_id)["message"]
    assert store.run(run_id)["traces"] == 1
    assert not store.slot_stats(run_id).empty


def _optimizer_params():
    from optimizers import registry

    return registry.names()


@pytest.mark.slow
@pytest.mark.parametrize("name", _optimizer_params())
def test_every_registered_optimizer_runs(tmp_path, name):
    store = RunStore(tmp_path / "runs.sqlite")
    run_id, status = _run(store, optimizer=name, dataset="moons", model="mlp", steps=12,
                          eval_every=5)
    run = store.run(run_id)
    assert status == "finished", run["message"]
    assert run["traces"] == 1
    slots = set(store.slot_stats(run_id).slot)
    assert "update" in slots
    if name == "lookahead":  # own slot and the inner (default adam) optimizer's
        assert {"slow", "m", "v"} <= slots
    assert "learning_rate" in {h["name"] for h in run["hyper_variables"]}


def test_failure_marks_run_failed(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    config = RunConfig(dataset="moons", model="mlp", steps=5, device="/device:GPU:7")
    run_id = store.create_run(config.to_json_dict())
    with pytest.raises(ValueError, match="device="):
        worker.train(run_id, store)
    run = store.run(run_id)
    assert run["status"] == "failed" and "device=" in run["message"]
    assert worker.main(["--store", str(store.path), "--run-id", str(run_id)]) == 1
