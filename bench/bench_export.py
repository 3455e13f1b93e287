"""Export of a long run: the run store -> config, CSV/Parquet tables, TensorBoard events, zip.

Builds a store holding one 50,000-step run recorded the way a real run records it (the
`engine.recording` schedule: every step up to 1,000, then every 10th, then every 100th;
validation every 25 steps; slot statistics of 6 variables x 3 slots on recorded steps;
histograms on histogram steps; hyper-gradients every 5 steps of 2 hyperparameters), then times
`runs.io.export.export_run` with and without TensorBoard events, and the TensorBoard part alone:
TensorBoard protos written as TFRecords (what the export does) against one eager `tf.summary`
op per row (the previous writer, kept here as the reference), side by side in one run.

    python bench/bench_export.py [--steps 50000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads)
import numpy as np  # noqa: E402

from engine import recording  # noqa: E402
from runs.io import export  # noqa: E402
from runs.store.run_store import RunStore  # noqa: E402
from settings.run_config import RunConfig  # noqa: E402

VARIABLES = ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "dense_2/kernel",
             "dense_2/bias")
SLOTS = ("m", "v", "update")


def build_store(path: Path, steps: int) -> tuple[RunStore, int]:
    """A store with one `steps`-step run recorded on the real schedule (see the docstring)."""
    store = RunStore(path)
    config = RunConfig(optimizer="adam", steps=min(steps, 1_000_000), hypergradients=[
        "learning_rate", "beta_1"])
    run_id = store.create_run(config.to_json_dict(), name="bench")
    rng = np.random.default_rng(0)
    recorded = [s for s in range(1, steps + 1) if recording.should_record(s)]
    hist_steps = [s for s in range(1, steps + 1) if recording.should_histogram(s)]
    scalars = [(s, "train_loss", 2.3 * math.exp(-s / 5e3)) for s in recorded]
    scalars += [(s, name, float(v)) for s in range(0, steps + 1, 25)
                for name, v in (("val_loss", 2.0 * math.exp(-s / 6e3)), ("val_accuracy", 0.9))]
    changes = [(1, "learning_rate", None, 1e-3, "init"), (1, "beta_1", None, 0.9, "init"),
               (steps // 2, "learning_rate", 1e-3, 5e-4, "user")]
    stats = [(s, var, slot, *map(float, rng.random(3))) for s in recorded for var in VARIABLES
             for slot in SLOTS]
    hists = [(s, var, slot, -1.0, 1.0, rng.integers(0, 50, recording.BINS).tolist())
             for s in hist_steps for var in VARIABLES for slot in SLOTS]
    grads = [(s, name, float(rng.normal()), float(rng.normal()), None, 1.0)
             for s in range(1, steps + 1, 5) for name in ("learning_rate", "beta_1")]
    store.append(run_id, scalars=scalars, hyper_changes=changes, slot_stats=stats,
                 histograms=hists, hypergradients=grads, step=steps)
    store.set_status(run_id, "finished", "bench")
    print(f"store: {len(scalars):,} scalar rows, {len(stats):,} slot-stat rows, "
          f"{len(hists):,} histograms, {len(grads):,} hyper-gradient rows")
    return store, run_id


def tf_ops_writer(logdir: Path, scalars, stats) -> None:
    """The previous TensorBoard writer (reference only): one eager `tf.summary` op per row."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for name, rows in scalars.groupby("name", sort=False):
            for step, value in zip(rows["step"], rows["value"]):
                tf.summary.scalar(f"metrics/{name}", float(value), step=int(step))
        for (variable, slot), rows in stats.groupby(["variable", "slot"], sort=False):
            for column in ("norm", "mean", "std"):
                for step, value in zip(rows["step"], rows[column]):
                    tf.summary.scalar(f"slots/{variable}/{slot}/{column}", float(value),
                                      step=int(step))
    writer.close()


def timed(function, repeats: int) -> float:
    """Median seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-export-"))
    store, run_id = build_store(home / "runs.sqlite", args.steps)
    import tensorflow  # noqa: F401  (imported once, outside every timing)

    full = timed(lambda: export.export_run(store, run_id, home / "out"), args.repeats)
    bare = timed(lambda: export.export_run(store, run_id, home / "out2", tensorboard=False),
                 args.repeats)
    scalars, stats = store.scalars(run_id), store.slot_stats(run_id)
    changes = store.hyper_changes(run_id)
    hists = export.all_histograms(store, run_id, stats)
    protos = timed(lambda: export.write_tensorboard(home / "tb-proto", {}, scalars, changes,
                                                    stats, hists), args.repeats)
    ops = timed(lambda: tf_ops_writer(home / "tb-ops", scalars, stats), 1)
    from runs.io.bundle_import import read_run_bundle

    data = (home / "out" / f"run-{run_id}.zip").read_bytes()
    bundle = read_run_bundle(data)
    read = timed(lambda: read_run_bundle(data), args.repeats)
    stored = timed(lambda: store.import_run(bundle.config.to_json_dict(), bundle.tables),
                   args.repeats)
    print(f"{args.steps:,}-step run, median of {args.repeats}:")
    print(f"  export with TensorBoard events    {full:7.2f} s   (target <= 5 s)")
    print(f"  export without TensorBoard        {bare:7.2f} s")
    print(f"  TensorBoard: protos as TFRecords (every tag) {protos:7.2f} s vs per-row "
          f"tf.summary ops (scalars + slots only) {ops:7.2f} s: x{ops / protos:.1f} faster")
    print(f"  import with its records ({len(data) / 2**20:.2f} MiB zip, {bundle.rows:,} rows): "
          f"read + checked {read:7.2f} s, stored {stored:7.2f} s, total {read + stored:7.2f} s")


if __name__ == "__main__":
    main()
