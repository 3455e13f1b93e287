"""The compiled pieces of a run: data on the device, model, optimizer, train and eval steps.

`Engine(config, device)` builds everything from a `RunConfig` alone, so a run is reproducible
from (config, seed): the initial weights come from `build_model(seed)` and the batch order from
`BatchOrder(n_train, batch_size, seed)` (a NumPy `RandomState(seed)` permutation per epoch).

The train step has three recording levels: 0 nothing (a finiteness guard only), 1 slot
statistics, 2 statistics and histograms. Its input signature is fixed (int32 batch indices
[batch]), so each compile of the step traces once per level and never again: live
hyperparameter changes assign the optimizer's existing `tf.Variable`s and do not retrace
(`Engine.traces` counts compiles). In graph mode every level is its own `tf.function`, traced
on its first use: a `tf.cond` on a level tensor would keep the untaken branches in the graph,
and the executor still passes a dead tensor through each of their nodes on every step (digits
MLP: 215 ops at level 0, 453 at 1, 801 at 2; the step that records nothing cost 1.11-1.16x the
same step without the conds, measured side by side). A level's first use pays its trace and
graph optimisation once, 0.15-0.3 s here: at a run's step 2 (statistics) and step 1,001
(nothing, `recording.stride`); a warm worker's prepared engine pays them ahead
(`engine.prepared`). Under XLA one function takes the level as an int32 tensor behind
`tf.cond`s, which XLA compiles as conditionals: three programs would triple its 2.4-8 s
compile.

A config's `lr_schedule` is built as an `optimizers.schedules.LiveSchedule` (its numbers in
variables) and passed as `learning_rate=`; `decay` sets OptimizerV2's legacy `_initial_decay`.
`Engine.set_schedule` changes them live: same class and structure = variable assigns, no
retrace; another class, constant <-> schedule, or a new `decay` (a plain Python attribute the
trace bakes in) = a new compiled step, one more trace.
The training and validation sets live on the device as constants; a step gathers its batch.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers.base import shortest_float
from optimizers.hyperparams import check_decay
from schedules.live import LiveSchedule
from engine.compiled import compiled
from engine import recording
from settings.run_config import RunConfig
from engine.data import load_dataset
from engine.eval_point import at_eval_point
from engine.models import build_model


# Recording levels of the train step: nothing, slot statistics, statistics + histograms.
NOTHING, STATISTICS, HISTOGRAMS = 0, 1, 2
_LEVEL_TENSORS = (tf.constant(0), tf.constant(1), tf.constant(2))  # the XLA step's argument


def _by_level(level: int | tf.Tensor, at_least: int, then: Callable[[], Any],
              otherwise: Callable[[], Any]) -> Any:
    """`then()` when the recording `level` is >= `at_least`, else `otherwise()`: chosen in
    Python when `level` is an int (graph mode: the traced step holds only the branch it runs),
    by a `tf.cond` when it is a tensor (XLA: one program for every level)."""
    if isinstance(level, int):
        return then() if level >= at_least else otherwise()
    return tf.cond(level >= at_least, then, otherwise)


class BatchOrder:
    """Batches of training-set indices: consecutive slices of per-epoch permutations.

    Epochs are concatenated, so every batch has exactly `batch_size` indices (a batch may
    straddle two epochs, and `batch_size` may exceed the training-set size).
    """

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size = int(n), int(batch_size)
        self.rng = np.random.RandomState(seed)
        self.buffer = np.empty(0, np.int32)

    def next(self) -> np.ndarray:
        """int32 array [batch_size] of indices in 0..n-1."""
        while self.buffer.size < self.batch_size:
            epoch = self.rng.permutation(self.n).astype(np.int32)
            self.buffer = np.concatenate([self.buffer, epoch])
        out, self.buffer = self.buffer[: self.batch_size], self.buffer[self.batch_size:]
        return out


def _learning_rate_owner(optimizer: Any) -> Any:
    """The optimizer whose `_hyper` holds `learning_rate` (a wrapper's inner optimizer)."""
    if "learning_rate" in getattr(optimizer, "_hyper", {}):
        return optimizer
    inner = getattr(optimizer, "inner", None)
    return inner if inner is not None and "learning_rate" in inner._hyper else optimizer


def cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Mean sparse categorical cross-entropy (nats) of int labels [b] and logits [b, classes]."""
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    )


class Engine:
    """Model, optimizer and compiled functions of one run.

    Args:
        config: the run config.
        device: logical device name (`engine.devices.choose_device`); data, variables and
            steps are placed on it.

    Attributes:
        series: `(variable_label, slot)` list naming the rows of the packed stats/histograms.
        traces: number of compiles of the train step (1 in a healthy run; + 1 per retrace).
    """

    def __init__(self, config: RunConfig, device: str):
        self.config, self.device = config, device
        self.dataset = data = load_dataset(config.dataset, config.dtype, config.label_noise)
        with tf.device(device):
            tf_keras.utils.set_random_seed(config.seed)
            self.model = build_model(config.model, data, config.seed, config.dtype)
            self.optimizer = registry.create(
                config.optimizer, config.hyperparameters, config.options
            )
            self.lr_owner = _learning_rate_owner(self.optimizer)
            self.live_schedule: LiveSchedule | None = None
            if config.lr_schedule is not None:
                self.live_schedule = LiveSchedule(config.lr_schedule)
                self.lr_owner._set_hyper("learning_rate", self.live_schedule.schedule)
            self.decay = check_decay(config.decay)
            self.lr_owner._initial_decay = self.decay  # read by `_decayed_lr` at trace time
            self.x_train, self.y_train = tf.constant(data.x_train), tf.constant(data.y_train)
            self.x_val, self.y_val = tf.constant(data.x_val), tf.constant(data.y_val)
            self.variables = list(self.model.trainable_variables)
            # Hyper variables, slots and `iterations` exist before the first trace, so the
            # traced function creates no variables and the series list is known up front.
            self.optimizer._create_all_weights(self.variables)
        self.series = recording.slot_series(self.variables, self.optimizer)
        self.order = BatchOrder(data.n_train, config.batch_size, config.seed)
        self.traces = 0
        # per compile of the train step (oldest first): level -> its tf.function
        self.train_functions: list[dict[int, Any]] = []
        # level -> the current compile's step
        self._steps: dict[int, Callable[[tf.Tensor], Any]] = {}
        self._last_level = HISTOGRAMS  # a retrace traces the level last used right away
        self._compile_train(HISTOGRAMS)  # a run's step 1 records histograms
        self._eval = compiled(self._eval_step).get_concrete_function()
        # an optimizer with its own evaluation point (schedule-free: the average x) is also
        # evaluated where its gradients are taken (y, what the variables hold), traced lazily
        self._eval_at_variables: Callable[[], Any] | None = None

    def _compile_train(self, level: int) -> None:
        """Start a new compile of the train step (`traces` + 1) and trace `level`'s function
        now; the other levels trace on their first use. A retrace needs NEW functions: the old
        ones would return their cached trace for the same input signature."""
        self.traces += 1
        self.train_functions.append({})
        self._steps = {}
        self._step_function(level)

    def _step_function(self, level: int) -> Callable[[tf.Tensor], Any]:
        """The current compile's train step at recording `level`, traced on first use: a
        callable of int32 batch indices [batch] returning (loss, stats, histograms)."""
        step = self._steps.get(level)
        if step is not None:
            return step
        functions = self.train_functions[-1]
        indices = tf.TensorSpec([self.config.batch_size], tf.int32)
        if self.config.compiler == "xla":
            # `config.compiler`: XLA compiles for 2.4-8 s before the first step (measured
            # here), for about the same steps/s on these models, so a run starts in graph mode
            # by default. One program serves every level (see the module docstring).
            if not functions:
                functions[HISTOGRAMS] = compiled(
                    self._train_step, jit_compile=True,
                    input_signature=[indices, tf.TensorSpec([], tf.int32)])
            concrete = functions[HISTOGRAMS].get_concrete_function()
            level_tensor = _LEVEL_TENSORS[level]
            step = lambda batch: concrete(batch, level_tensor)  # noqa: E731
        else:
            functions[level] = compiled(lambda batch: self._train_step(batch, level),
                                        input_signature=[indices])
            step = functions[level].get_concrete_function()  # called without argument binding
        self._steps[level] = step
        return step

    def retrace(self) -> None:
        """Rebuild the train step (one more compile, `traces` + 1): after a change of Python
        state the old trace baked in (`optimizers.base.trace_signature`), e.g. SGD/RMSprop
        momentum crossing 0 on the fused path."""
        self._compile_train(self._last_level)

    def tracing_count(self) -> int:
        """Traces of the train step counted from TensorFlow: per compile, the most traces of any
        of its functions (1 when nothing retraced behind `traces`' back), summed (equals
        `traces`)."""
        return sum(max((f.experimental_get_tracing_count() for f in functions.values()),
                       default=0) for functions in self.train_functions)

    def effective_learning_rate(self) -> float:
        """What `_decayed_lr` returns now (schedule at `iterations`, then / (1 + decay *
        iterations)): the learning rate of the NEXT step, a Python float."""
        with tf.device(self.device):
            return float(self.lr_owner._decayed_lr(tf.as_dtype(self.config.dtype)))

    def schedule_values(self) -> dict[str, Any] | None:
        """The running schedule as a plain serialized dict, or None (constant learning rate)."""
        if self.live_schedule is None:
            return None
        return self.live_schedule.serialized()

    def set_schedule(self, schedule: dict[str, Any] | None, decay: float,
                     learning_rate: float | None) -> tuple[str, dict[str, tuple[Any, Any]]]:
        """Change the learning-rate schedule and/or `decay` between two steps.

        Args:
            schedule: a validated serialized schedule (`settings`' `lr_schedule`), or None for a
                constant learning rate.
            decay: the legacy decay (>= 0).
            learning_rate: the constant rate when `schedule` is None and the run had a schedule
                (None: the schedule's current value, so the curve stays continuous).

        Returns:
            ("assign", {param: (old, new)}) when only numbers of the same schedule changed (no
            retrace), else ("retrace", {"lr_schedule": (old class, new class), ...}): the train
            step was recompiled (`traces` + 1).

        Raises:
            InvalidHyperparameter: the schedule is refused (nothing is changed).
        """
        decay = check_decay(decay)
        old_class = self.live_schedule.class_name if self.live_schedule else "constant"
        if decay == self.decay:
            if schedule is None and self.live_schedule is None:
                return "assign", {}  # nothing to change
            if (schedule is not None and self.live_schedule is not None
                    and self.live_schedule.same_structure(schedule)):
                return "assign", self.live_schedule.assign(schedule)
        changes: dict[str, tuple[Any, Any]] = {}
        if schedule is None and self.live_schedule is None:  # a new decay only
            changes["decay"] = (self.decay, decay)
            self.decay = self.lr_owner._initial_decay = decay
            self._compile_train(self._last_level)
            return "retrace", changes
        with tf.device(self.device):
            if schedule is not None:
                live = LiveSchedule(schedule)  # refused before anything changes
                value = live.schedule
            else:
                live = None
                now = self.effective_learning_rate() * (1.0 + self.decay * float(
                    self.lr_owner.iterations.numpy()))  # the schedule's value, decay undone
                rate = now if learning_rate is None else float(learning_rate)
                value = tf.Variable(rate, dtype=tf.float32, trainable=False,
                                    name="learning_rate")
            self.lr_owner._set_hyper("learning_rate", value)  # a new object: a retrace
        changes["lr_schedule"] = (old_class, schedule["class_name"] if schedule else "constant")
        if decay != self.decay:
            changes["decay"] = (self.decay, decay)
        self.live_schedule, self.decay = live, decay
        self.lr_owner._initial_decay = decay
        self._compile_train(self._last_level)
        return "retrace", changes

    def _train_step(self, indices: tf.Tensor, level: int | tf.Tensor
                    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        with tf.device(self.device):
            return self._train_body(indices, level)

    def _train_body(self, indices: tf.Tensor, level: int | tf.Tensor
                    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        x, y = tf.gather(self.x_train, indices), tf.gather(self.y_train, indices)
        if recording.in_xla_context():  # XLA needs one shape per value; it elides copies
            before = [v.read_value() for v in self.variables]
        else:  # graph mode: copy the old values (for `update`) only on steps that record
            before = _by_level(level, STATISTICS,
                               lambda: [v.read_value() for v in self.variables],
                               lambda: [tf.zeros([0], v.dtype) for v in self.variables])
        with tf.GradientTape() as tape:
            loss = cross_entropy(y, self.model(x, training=True))
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        n = len(self.series)
        stats = _by_level(  # only a finiteness guard on steps that record nothing (decimation)
            level, STATISTICS,
            lambda: recording.packed_stats(self.variables, self.optimizer, before),
            lambda: recording.finite_guard(self.variables, self.optimizer),
        )
        hists = _by_level(
            level, HISTOGRAMS,
            lambda: recording.packed_histograms(self.variables, self.optimizer, before),
            lambda: tf.zeros([n, 2 + recording.BINS], tf.float32),
        )
        return loss, stats, hists

    def _eval_step(self) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.device(self.device):
            return self._eval_body()

    def _eval_body(self) -> tuple[tf.Tensor, tf.Tensor]:
        # a schedule-free optimizer is evaluated at its average x (engine.eval_point)
        return at_eval_point(self.variables, self.optimizer, self._eval_here)

    def _eval_here(self) -> tuple[tf.Tensor, tf.Tensor]:
        logits = self.model(self.x_val, training=False)
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predicted, self.y_val), tf.float32))
        return cross_entropy(self.y_val, logits), accuracy

    def step(self, record: bool = True, with_histograms: bool = False
             ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """One optimizer step on the next batch.

        Returns:
            (loss scalar of the model dtype, stats float32 [n_series, 3],
             histograms float32 [n_series, 2 + BINS], zeros unless `with_histograms`); when
            neither `record` nor `with_histograms`, the stats are `recording.finite_guard`
            (zeros, NaN rows for non-finite series).
        """
        level = HISTOGRAMS if with_histograms else STATISTICS if record else NOTHING
        self._last_level = level
        step = self._step_function(level)  # cached after the level's first use
        with tf.device(self.device):  # an XLA-compiled call runs where it is called from
            return step(tf.constant(self.order.next()))

    def evaluate(self) -> tuple[float, float]:
        """(validation loss in nats, validation accuracy in [0, 1]) on the whole split, at the
        optimizer's evaluation point (`engine.eval_point`)."""
        loss, accuracy = self._eval()
        return float(loss), float(accuracy)

    def has_eval_point(self) -> bool:
        """True when the optimizer answers with another point than its variables (a
        schedule-free optimizer's average x, `eval_weights`)."""
        return getattr(self.optimizer, "eval_weights", None) is not None

    def evaluate_at_variables(self) -> float:
        """The validation loss (nats) at what the variables hold (a schedule-free optimizer's
        y, where its gradients are taken), beside `evaluate`'s loss at x."""
        if self._eval_at_variables is None:
            def at_variables() -> tf.Tensor:
                with tf.device(self.device):
                    return self._eval_here()[0]
            self._eval_at_variables = compiled(at_variables).get_concrete_function()
        return float(self._eval_at_variables())

    def hyper_variables(self) -> list[dict[str, Any]]:
        """`{name, variable, dtype, shape, value}` for every `_hyper` entry that is a variable,
        and every variable of the live schedule (`lr_schedule.<name>`, lists `[i]`)."""
        out = []
        hypers = dict(self.optimizer._hyper)
        inner = getattr(self.optimizer, "inner", None)  # a wrapper's inner optimizer (Lookahead)
        if isinstance(inner, tf_keras.optimizers.legacy.Optimizer):
            hypers.update({k: v for k, v in inner._hyper.items() if k not in hypers})
        if self.live_schedule is not None:  # the schedule's numbers are variables too
            for name, var in self.live_schedule.variables.items():
                for index, one in enumerate(var if isinstance(var, list) else [var]):
                    hypers[f"lr_schedule.{name}" + (f"[{index}]" if isinstance(var, list)
                                                     else "")] = one
        for name, var in hypers.items():
            if isinstance(var, tf.Variable):
                out.append({
                    "name": name, "variable": var.name, "dtype": var.dtype.name,
                    "shape": list(var.shape), "value": shortest_float(var.numpy()),
                })
        return out
