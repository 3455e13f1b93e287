"""Export round trips on two short real runs (digits MLP, 60 steps) trained in-process.

Export -> import gives the identical RunConfig; the imported config with the same seed gives
identical losses; the TensorBoard event file read back with TensorBoard's own EventAccumulator
holds the expected tags and step counts; CSV and Parquet tables have the expected columns and
rows; the zip holds everything.
"""

from __future__ import annotations

import json
import os
import zipfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from settings.run_config import RunConfig  # noqa: E402
from runs.io.export import load_import  # noqa: E402
from runs.io.export import (  # noqa: E402
    export_run, histogram_buckets, hyper_values_at, wide_metrics)
from runs.store.run_store import RunStore  # noqa: E402

STEPS, EVAL_EVERY = 60, 20
CONFIG = RunConfig(optimizer="adam", hyperparameters={"learning_rate": 0.01}, dataset="digits",
                   model="mlp", batch_size=64, steps=STEPS, seed=5, eval_every=EVAL_EVERY)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Run CONFIG, export it, import the config, run it again; (store, ids, paths, imported)."""
    from runs.process import worker

    home = tmp_path_factory.mktemp("export")
    store = RunStore(home / "runs.sqlite")
    first = store.create_run(CONFIG.to_json_dict(), name="original")
    assert worker.train(first, store) == "finished"
    paths = export_run(store, first, home / "exports")
    imported = load_import(str(paths.config))
    second = store.create_run(imported.to_json_dict(), name="reimported")
    assert worker.train(second, store) == "finished"
    return store, (first, second), paths, imported


def test_export_then_import_gives_the_identical_config(exported):
    store, (first, _), paths, imported = exported
    assert imported == CONFIG
    document = json.loads(paths.config.read_text())
    assert document["optimizer"]["class_name"] == "Adam"
    assert document["optimizer"]["config"]["learning_rate"] == pytest.approx(0.01)
    assert {"tensorflow", "tf_keras", "numpy", "python"} <= set(document["versions"])
    assert document["device"].endswith("CPU:0") and document["seed"] == 5
    assert document["batch_size"] == 64 and document["steps"] == STEPS


def test_same_seed_gives_identical_first_50_losses(exported):
    store, (first, second), _, _ = exported
    losses = [store.scalars(r, ["train_loss"])["value"].to_numpy()[:50] for r in (first, second)]
    assert len(losses[0]) == 50
    np.testing.assert_array_equal(losses[0], losses[1])
    assert losses[0][-1] < losses[0][0]  # it trained


def _accumulator(logdir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(logdir), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


def test_tensorboard_events_read_back_with_tensorboard(exported):
    from tensorboard.util import tensor_util

    store, (first, _), paths, _ = exported
    assert list(paths.logdir.glob("events.out.tfevents.*"))
    acc = _accumulator(paths.logdir)
    tags = set(acc.Tags()["tensors"])
    for name in ("train_loss", "val_loss", "val_accuracy"):
        assert f"metrics/{name}" in tags
        assert acc.SummaryMetadata(f"metrics/{name}").plugin_data.plugin_name == "scalars"
    assert [e.step for e in acc.Tensors("metrics/train_loss")] == list(range(1, STEPS + 1))
    assert [e.step for e in acc.Tensors("metrics/val_loss")] == [0, 20, 40, 60]
    first_loss = tensor_util.make_ndarray(acc.Tensors("metrics/train_loss")[0].tensor_proto)
    assert float(first_loss) == pytest.approx(store.scalars(first, ["train_loss"])["value"][0])
    for name in ("learning_rate", "beta_1", "beta_2", "epsilon"):
        events = acc.Tensors(f"hyper/{name}")
        assert len(events) == STEPS + 1  # steps 0..60
    lr = tensor_util.make_ndarray(acc.Tensors("hyper/learning_rate")[-1].tensor_proto)
    assert float(lr) == pytest.approx(0.01)
    stats = store.slot_stats(first)
    pairs = set(zip(stats["variable"], stats["slot"]))
    hist_tags = {t for t in tags if t.startswith("hist/")}
    assert hist_tags == {f"hist/{v}/{s}" for v, s in pairs}
    assert {"m", "v", "update"} <= {t.rsplit("/", 1)[-1] for t in hist_tags}
    variable, slot = sorted(pairs)[0]
    stored = store.histograms(first, variable, slot)
    events = acc.Tensors(f"hist/{variable}/{slot}")
    assert acc.SummaryMetadata(f"hist/{variable}/{slot}").plugin_data.plugin_name == "histograms"
    assert [e.step for e in events] == list(stored["step"]) == [1, 20, 40, 60]
    buckets = tensor_util.make_ndarray(events[-1].tensor_proto)
    assert buckets.shape[1] == 3
    assert buckets[:, 2].sum() == sum(stored["counts"].iloc[-1])
    assert f"slots/{variable}/{slot}/norm" in tags and "config" in tags


def test_event_records_pass_tensorflows_crc_checks(exported, tmp_path):
    """`RecordFile` frames records as `tf.io.TFRecordWriter` does: TensorFlow's reader (which
    checks both CRCs of every record) reads the export's events back, and a file written by
    TensorFlow with the same records is byte for byte the same; one flipped byte is refused."""
    import tensorflow as tf

    from runs.io.export import RecordFile

    _, _, paths, _ = exported
    (events,) = paths.logdir.glob("events.out.tfevents.*")
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(events))]
    assert len(records) > 100
    with tf.io.TFRecordWriter(str(tmp_path / "tf")) as reference:
        for record in records:
            reference.write(record)
    ours = RecordFile(tmp_path / "ours")
    for record in records:
        ours.write(record)
    ours.close()
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "tf").read_bytes() == \
        events.read_bytes()
    assert RecordFile.masked_crc(b"") == 0xA282EAD8  # CRC-32C of nothing is 0: the mask alone
    broken = bytearray(events.read_bytes())
    broken[40] ^= 0xFF
    (tmp_path / "broken").write_bytes(bytes(broken))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(tmp_path / "broken")))


def test_csv_and_parquet_tables(exported):
    store, (first, _), paths, _ = exported
    wide_csv = pd.read_csv(paths.tables["metrics"])
    wide_parquet = pd.read_parquet(paths.tables["metrics"].with_suffix(".parquet"))
    hypers = ["hyper/learning_rate", "hyper/beta_1", "hyper/beta_2", "hyper/epsilon"]
    # every run records the effective learning rate (`_decayed_lr`) on its recorded steps
    assert list(wide_csv.columns) == ["step", "train_loss", "val_loss", "val_accuracy",
                                      "learning_rate (effective)", *hypers]
    assert wide_csv["learning_rate (effective)"].dropna().tolist() == pytest.approx(
        [0.01] * wide_csv["train_loss"].notna().sum(), rel=1e-6)
    assert list(wide_parquet.columns) == list(wide_csv.columns)
    assert len(wide_csv) == len(wide_parquet) == STEPS + 1
    assert wide_csv["step"].tolist() == list(range(STEPS + 1))
    assert wide_csv["val_loss"].notna().sum() == 4 and wide_csv["train_loss"].notna().sum() == STEPS
    pd.testing.assert_frame_equal(wide_csv, wide_parquet, check_exact=False, rtol=1e-12)
    scalars = store.scalars(first)
    long_csv = pd.read_csv(paths.tables["scalars"])
    assert list(long_csv.columns) == ["step", "name", "value"] and len(long_csv) == len(scalars)
    hist = pd.read_parquet(paths.tables["histograms"].with_suffix(".parquet"))
    assert list(hist.columns) == ["step", "variable", "slot", "lo", "hi", "counts"]
    hist_csv = pd.read_csv(paths.tables["histograms"])
    assert len(hist) == len(hist_csv) == 4 * hist[["variable", "slot"]].drop_duplicates().shape[0]
    assert json.loads(hist_csv["counts"][0]) == list(hist["counts"][0])
    stats = pd.read_parquet(paths.tables["slot_stats"].with_suffix(".parquet"))
    assert list(stats.columns) == ["step", "variable", "slot", "norm", "mean", "std"]
    assert len(stats) == len(store.slot_stats(first))
    with zipfile.ZipFile(paths.zip) as archive:
        names = archive.namelist()
    assert f"run-{first}/config.json" in names
    assert any("/tensorboard/" in n and "tfevents" in n for n in names)
    # + hypergradients, response slices, diagnostics, learning-rate range tests, landscape along
    # the path
    assert sum(n.endswith(".parquet") for n in names) == 10


def test_hypergradients_go_into_the_tables_and_tensorboard(tmp_path):
    """A run's hyper-gradients are exported as a table and as `hypergrad/<name>/<kind>` scalars
    (written by TensorBoard's proto writer, read back by TensorBoard's EventAccumulator)."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    from fake_runs import add_fake_run

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = add_fake_run(store, steps=30)
    rows = [(s, "learning_rate", 0.5 * s, 0.4 * s, (0.45 * s if s in (11, 21) else None), 1.0)
            for s in range(1, 31, 5)]
    store.append(run_id, hypergradients=rows, step=30)
    paths = export_run(store, run_id, tmp_path / "out")
    table = pd.read_csv(paths.tables["hypergradients"])
    assert table["exact"].tolist() == [0.5 * s for s in range(1, 31, 5)]
    acc = ea.EventAccumulator(str(paths.logdir), size_guidance={k: 0 for k in
                                                                 ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    exact = acc.Tensors("hypergrad/learning_rate/exact")
    assert [e.step for e in exact] == list(range(1, 31, 5))
    assert float(tensor_util.make_ndarray(exact[-1].tensor_proto)) == pytest.approx(13.0)
    assert [e.step for e in acc.Tensors("hypergrad/learning_rate/reverse")] == [11, 21]
    assert "config" in acc.Tags()["tensors"]


def test_hyper_values_at_is_the_step_function():
    changes = pd.DataFrame({"step": [1, 1, 11, 11], "name": ["lr", "b", "lr", "lr"],
                            "new": [0.1, 0.9, 0.05, 0.02]})
    values = hyper_values_at(changes, [0, 1, 10, 11, 30])
    assert values["hyper/lr"].tolist() == [0.1, 0.1, 0.1, 0.02, 0.02]  # later row at 11 wins
    assert values["hyper/b"].tolist() == [0.9] * 5
    wide = wide_metrics(pd.DataFrame({"step": [2, 1, 2], "name": ["a", "a", "b"],
                                      "value": [1.0, 2.0, 3.0]}), changes)
    assert wide.columns.tolist() == ["step", "a", "b", "hyper/lr", "hyper/b"]
    assert wide["a"].tolist() == [2.0, 1.0] and np.isnan(wide["b"][0])


def test_histogram_buckets_from_stored_bins():
    buckets = histogram_buckets(-1.0, 1.0, [1, 0, 3, 4])
    np.testing.assert_allclose(buckets[:, 0], [-1.0, -0.5, 0.0, 0.5])
    np.testing.assert_allclose(buckets[:, 1], [-0.5, 0.0, 0.5, 1.0])
    assert buckets[:, 2].tolist() == [1, 0, 3, 4]
    assert histogram_buckets(2.0, 2.0, [5, 0, 0]).tolist() == [[2.0, 2.0, 5.0]]


def _export_twice_at_once(export, store, run_id, out_dir, tensorboard):
    """Two threads export the same run into the same directory at the same moment; returns the
    errors raised and the paths returned."""
    import threading

    barrier = threading.Barrier(2)
    errors, results = [], []

    def one():
        barrier.wait()
        try:
            results.append(export(store, run_id, out_dir, tensorboard=tensorboard))
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors, results


@pytest.mark.parametrize("tensorboard", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_two_exports_of_the_same_run_at_once(tmp_path, tensorboard):
    from fake_runs import add_fake_run

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = add_fake_run(store, steps=60)
    out_dir = tmp_path / "exports"
    for trial in range(5):
        errors, results = _export_twice_at_once(export_run, store, run_id, out_dir, tensorboard)
        assert errors == [], f"trial {trial}: {errors!r}"
        assert len(results) == 2
        with zipfile.ZipFile(results[0].zip) as archive:
            names = set(archive.namelist())
            assert archive.testzip() is None
        assert f"run-{run_id}/config.json" in names and f"run-{run_id}/scalars.csv" in names
        assert json.loads(results[0].config.read_text())["run_id"] == run_id
        assert len(pd.read_csv(results[1].tables["scalars"])) == 60 + 2 * 7
        # nothing left behind but the run's directory and zip
        assert sorted(p.name for p in out_dir.iterdir()) == [f"run-{run_id}",
                                                              f"run-{run_id}.zip"]
