"""What a run records and when, with bounded storage, plus the in-graph statistics.

Decimation (`should_record(step)`, steps are 1-based):

| steps              | stride | rows per series in that range |
|--------------------|--------|-------------------------------|
| 1 .. 1,000         | 1      | 1,000                         |
| 1,001 .. 10,000    | 10     | 900                           |
| 10,001 .. 100,000  | 100    | 900                           |
| beyond 100,000     | 1,000  | (N - 100,000) / 1,000         |

so a series of N steps has at most `record_bound(N)` rows (formula there; the `+ 1` is the last
step, always recorded): 2,901 for 200,000 steps, 3,701 for the 1,000,000-step maximum, i.e.
about 900 rows per decade of steps (O(log N)) up to 100,000 steps, then one row per 1,000 steps.
Histograms are recorded every `HISTOGRAM_FACTOR` (20) strides (`should_histogram`) and at step 1.

A run with a learning-rate schedule or `decay` also records, on every recorded step, the
EFFECTIVE learning rate the step used (what `_decayed_lr` returned, the schedule at
`iterations = step - 1` divided by 1 + decay * iterations) as a scalar series named
`EFFECTIVE_LR` (beside `train_loss`: one value per recorded step, not a change), while the
schedule's own parameters are `hyper_changes` rows `lr_schedule.<name>` (`hyper_change_rows`).

`train_loss` is written as the MEAN of the per-step losses since the previously recorded step
(`LossMeter`), so a spike between two recorded steps still moves the curve.

In-graph statistics (called inside the compiled train step, no host transfer per variable):

* `slot_series(variables, optimizer)`: the Python list of `(variable_label, slot)` in the order
  of the rows of the packed tensors: for every variable its slots
  (`optimizer.slot_names_for_rule()`) then `update`.
* `packed_stats(variables, optimizer, before)`: float32 [n_series, 3] = (L2 norm, mean, std).
  `update` is `var_before - var_after`, the effective per-parameter step (for Adam
  `lr_t * m / (sqrt(v) + eps)`).
* `packed_histograms(...)`: float32 [n_series, 2 + BINS] = (lo, hi, counts...) with
  `tf.histogram_fixed_width` over [lo, hi]; when lo == hi every element falls in bin 0. Counts
  are exact integers in float32 up to 2**24 elements per tensor.
"""

from __future__ import annotations



from typing import Any
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from engine.models import variable_label
from optimizers.fused_kernels import in_xla_context
from engine.record_rows import HistogramRow, HyperChangeRow, SlotStatRow

from schedules.table import EFFECTIVE_LR  # noqa: F401  (the series name, TF-free)

BINS = 32
HISTOGRAM_FACTOR = 20
# the smallest normal float32: the divisor of an all-zero tensor in `series_stats`
_TINY = float(np.finfo(np.float32).tiny)


def stride(step: int) -> int:
    """Recording stride in effect at 1-based `step` (1, 10, 100 or 1,000)."""
    if step <= 1_000:
        return 1
    if step <= 10_000:
        return 10
    if step <= 100_000:
        return 100
    return 1_000


def should_record(step: int) -> bool:
    """True when scalars and slot statistics are recorded at 1-based `step` (see the table)."""
    return step % stride(step) == 0 or step == 1


def should_histogram(step: int) -> bool:
    """True when histograms are recorded at `step`: every 20 strides, and at step 1."""
    return step == 1 or step % (HISTOGRAM_FACTOR * stride(step)) == 0


def record_bound(steps: int) -> int:
    """Upper bound on the rows one series gets in a run of `steps` steps (last step included).

    `min(N, 1000) + [N > 1000] (min(N, 10^4) // 10 - 100) + [N > 10^4] (min(N, 10^5) // 100 - 100)
    + [N > 10^5] (N // 1000 - 100) + 1`; e.g. 2,901 for 200,000 steps, 3,701 for 1,000,000.
    """
    rows = min(steps, 1_000)
    if steps > 1_000:
        rows += min(steps, 10_000) // 10 - 100
    if steps > 10_000:
        rows += min(steps, 100_000) // 100 - 100
    if steps > 100_000:
        rows += steps // 1_000 - 100
    return rows + 1


class LossMeter:
    """Running mean of the per-step losses since the last `take()`."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, loss: float) -> None:
        self.total += float(loss)
        self.count += 1

    def take(self) -> float:
        """The mean since the previous `take()` (NaN when nothing was added); resets."""
        mean = self.total / self.count if self.count else float("nan")
        self.total, self.count = 0.0, 0
        return mean


# The series an optimizer derives beside its slots: a schedule-free optimizer's variables hold
# the gradients' point y, and the point it is evaluated on, x, is no slot (Keras 3 keeps only
# z); `eval_weights` recovers it (Defazio et al. 2024, arXiv:2405.15682, Algorithm 1), and the
# Slots view shows it beside y's slots.
EVAL_POINT_SERIES = "x"


def _derived(optimizer: Any) -> tuple[str, ...]:
    return (EVAL_POINT_SERIES,) if callable(getattr(optimizer, "eval_weights", None)) else ()


def slot_series(variables: Sequence[tf.Variable], optimizer: Any) -> list[tuple[str, str]]:
    """Labels of the packed rows: `(variable_label, slot)` for each variable, its slots, then
    `update`, then `EVAL_POINT_SERIES` for an optimizer with `eval_weights`."""
    slots = tuple(optimizer.slot_names_for_rule()) + ("update",) + _derived(optimizer)
    return [(variable_label(var), slot) for var in variables for slot in slots]


def _series_tensors(variables: Sequence[tf.Variable], optimizer: Any,
                    before: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    derived = _derived(optimizer)
    out = []
    for var, old in zip(variables, before):
        for slot in optimizer.slot_names_for_rule():
            out.append(optimizer.get_slot(var, slot).read_value())
        out.append(old - var.read_value())
        if derived:
            out.append(optimizer.eval_weights([var])[0])
    return out


def tensor_stats(tensor: tf.Tensor) -> tf.Tensor:
    """float32 [3] = (L2 norm, mean, std) of all elements of `tensor` (population std): the one
    row of `series_stats([tensor])`."""
    return series_stats([tensor])[0]


def series_stats(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """float32 [len(tensors), 3] = (L2 norm, mean, std) of all elements of each tensor
    (population std), any shapes and real dtypes (cast to float32).

    Each tensor is scaled by `s = max|x|` first: `sum(x * x)` overflows float32 once |x|
    reaches ~1e19 although every value is finite, which would report a finite slot as
    diverged. On `y = x / s`: mean `mu = mean(y)`, variance `var = mean((y - mu)**2)` (two
    passes: accurate when |mean| >> std), and the norm from them, `||x|| = s * sqrt(n * (var +
    mu**2))` (= s * sqrt(sum y**2), no cancellation: both terms are >= 0). Per tensor only
    three element-wise passes and three reductions run; everything scalar runs once on [n]
    vectors (fewer kernels: the statistics of a fully recorded step of the digits MLP cost
    ~20 % less than with one chain of ~20 scalar ops per tensor, measured side by side).

    The norm can still exceed float32's range for finite values (an Adagrad accumulator
    started at 1e37 over 4096 weights: 6.4e38): it then saturates at float32's max (3.4e38).
    A NaN/inf element gives non-finite statistics (NaN mean and std).
    """
    scales, means, variances, counts = [], [], [], []
    for tensor in tensors:
        x = tf.cast(tf.reshape(tensor, [-1]), tf.float32)
        scale = tf.reduce_max(tf.abs(x))
        y = x / tf.maximum(scale, _TINY)  # all zeros: 0 / tiny = 0, nothing to scale
        mean = tf.reduce_mean(y)
        scales.append(scale)
        means.append(mean)
        variances.append(tf.reduce_mean(tf.math.squared_difference(y, mean)))
        counts.append(tf.cast(tf.size(x), tf.float32))  # also when the static shape is unknown
    scale, mean, variance = tf.stack(scales), tf.stack(means), tf.stack(variances)
    norm = scale * tf.sqrt(tf.stack(counts) * (variance + mean * mean))
    norm = tf.where(tf.math.is_nan(norm), norm, tf.minimum(norm, tf.float32.max))
    return tf.stack([norm, scale * mean, scale * tf.sqrt(variance)], axis=1)


def tensor_histogram(tensor: tf.Tensor, bins: int = BINS) -> tf.Tensor:
    """float32 [2 + bins] = (lo, hi, counts) over [min, max]; lo == hi puts everything in bin 0.

    Any finite values are binned, whatever their magnitude: the bin edges are computed in
    float64, where `hi - lo` of two float32 numbers (at most 6.8e38) is finite and the upper end
    of a constant tensor's range, `lo + max(1, |lo|)`, differs from `lo`. In float32 both fail:
    `lo + 1.0 == lo` from |lo| = 2**24 (1.7e7) on, which `HistogramFixedWidth` refuses as an
    empty range (an Adagrad accumulator started at 1e37), and `hi - lo` overflows to inf
    beyond 3.4e38.

    Outside XLA one `HistogramFixedWidth` kernel counts (measured: the histogram step 4.9 ms
    against 2.2 ms for a statistics-only step with the op-by-op form below, in graph mode);
    under XLA, which has no kernel for it, the same bins are counted with ops XLA compiles.
    """
    x = tf.cast(tf.reshape(tensor, [-1]), tf.float32)
    lo, hi = tf.reduce_min(x), tf.reduce_max(x)
    wide, wide_lo, wide_hi = (tf.cast(t, tf.float64) for t in (x, lo, hi))
    if not in_xla_context():
        # [lo, lo + max(1, |lo|)] when lo == hi: every element falls in bin 0, as below
        top = tf.where(wide_hi > wide_lo, wide_hi,
                       wide_lo + tf.maximum(tf.constant(1.0, tf.float64), tf.abs(wide_lo)))
        counts = tf.cast(tf.histogram_fixed_width(wide, tf.stack([wide_lo, top]), nbins=bins),
                         tf.float32)
        return tf.concat([tf.stack([lo, hi]), counts], axis=0)
    width = tf.where(wide_hi > wide_lo, wide_hi - wide_lo, tf.constant(1.0, tf.float64))
    # Same bins as tf.histogram_fixed_width (the last bin closed), written with ops XLA
    # compiles: HistogramFixedWidth has no XLA kernel and the train step is jit-compiled.
    index = tf.clip_by_value(tf.cast(tf.floor((wide - wide_lo) / width * bins), tf.int32), 0,
                             bins - 1)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(x), index, bins)
    return tf.concat([tf.stack([lo, hi]), counts], axis=0)


def packed_stats(variables: Sequence[tf.Variable], optimizer: Any,
                 before: Sequence[tf.Tensor]) -> tf.Tensor:
    """float32 [n_series, 3] statistics of every series of `slot_series` (call after the step).

    Args:
        variables: the trainable variables, in the order of `slot_series`.
        optimizer: a `RuleOptimizer` whose slots exist (after a step or `_create_all_weights`).
        before: the variables' values before the step (tensors, same order and shapes).
    """
    return series_stats(_series_tensors(variables, optimizer, before))


def finite_guard(variables: Sequence[tf.Variable], optimizer: Any) -> tf.Tensor:
    """float32 [n_series, 3]: zeros where a series of `slot_series` is all finite, NaN where it
    holds a NaN or an inf (`0 * max|t|`), for the steps that record nothing.

    Why: an Adagrad accumulator (or Adam's `v`) can overflow to inf while the loss stays
    finite; checking this every step lets a run stop at the first non-finite slot, at one
    fused max-reduction per series instead of the three moments of `packed_stats`. The
    `update` row checks the variable's new value: `before - after` is finite when both are,
    and `before` passed this guard at the previous step. So the step needs no copy of the
    variables' old values when it records nothing (`engine.train_step`: +3-8 % steps/s on the
    digits MLP, measured side by side).
    """
    derived = _derived(optimizer)
    tensors = []
    for var in variables:
        tensors += [optimizer.get_slot(var, slot).read_value()
                    for slot in optimizer.slot_names_for_rule()]
        tensors.append(var.read_value())
        if derived:  # x is finite when y and z are; the row count must match `slot_series`
            tensors.append(var.read_value())
    peaks = tf.stack([tf.cast(tf.reduce_max(tf.abs(t)), tf.float32) for t in tensors])
    return tf.zeros([len(tensors), 3], tf.float32) * peaks[:, None]  # 0 * inf/NaN = NaN


def packed_histograms(variables: Sequence[tf.Variable], optimizer: Any,
                      before: Sequence[tf.Tensor], bins: int = BINS) -> tf.Tensor:
    """float32 [n_series, 2 + bins] histograms of every series of `slot_series` (see above)."""
    return tf.stack(
        [tensor_histogram(t, bins) for t in _series_tensors(variables, optimizer, before)]
    )


def stats_rows(step: int, series: Sequence[tuple[str, str]], stats: np.ndarray
               ) -> list[SlotStatRow]:
    """`slot_stats` rows from a float [n_series, 3] array (norm, mean, std per series)."""
    return [SlotStatRow(step, v, s, norm, mean, std)  # `tolist`: Python floats in one call
            for (v, s), (norm, mean, std) in zip(series, stats.tolist())]


def histogram_rows(step: int, series: Sequence[tuple[str, str]], hists: np.ndarray
                   ) -> list[HistogramRow]:
    """`histograms` rows from a float [n_series, 2 + BINS] array (lo, hi, counts per series)."""
    return [
        HistogramRow(step, v, s, float(r[0]), float(r[1]), [int(c) for c in r[2:]])
        for (v, s), r in zip(series, hists)
    ]


def schedule_parameter_values(schedule: Mapping[str, Any] | None) -> dict[str, float]:
    """`lr_schedule.<name>` -> value for each number of a serialized schedule (a list as
    `lr_schedule.<name>[i]`); bools and None are left out (they are not numbers on a trace)."""
    out: dict[str, float] = {}
    started = (schedule or {}).get("start_step")
    if started:  # a schedule started mid-run: where its clock began
        out["lr_schedule.start_step"] = float(started)
    config = (schedule or {}).get("config", {})
    for name, value in config.items():
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, (list, tuple)):
            out.update({f"lr_schedule.{name}[{i}]": float(v) for i, v in enumerate(value)})
        else:
            out[f"lr_schedule.{name}"] = float(value)
    return out


def hyper_change_rows(rows: Iterable[Sequence[Any]]) -> list[HyperChangeRow]:
    """`hyper_changes` rows the store can hold: a row whose value is a serialized schedule
    (`optimizer.hyper_values()["learning_rate"]` when the rate is a schedule) becomes one row
    per schedule number (`schedule_parameter_values`), with no old value."""
    out: list[HyperChangeRow] = []
    for row in rows:
        row = HyperChangeRow._make(row)
        if isinstance(row.new, Mapping) or isinstance(row.old, Mapping):
            new = schedule_parameter_values(row.new if isinstance(row.new, Mapping) else None)
            out += [HyperChangeRow(row.step, name, None, value, row.source)
                    for name, value in new.items()]
        else:
            out.append(row)
    return out
