"""The compiled pieces of a run: data on the device, model, optimizer, train and eval steps.

`Engine(config, device)` builds everything from a `RunConfig` alone, so a run is reproducible
from (config, seed): the initial weights come from `build_model(seed)` and the batch order from
`BatchOrder(n_train, batch_size, seed)` (a NumPy `RandomState(seed)` permutation per epoch).

The train step is ONE `tf.function` with a fixed input signature (int32 batch indices [batch],
int32 recording level: 0 nothing, 1 slot statistics, 2 statistics and histograms, each behind a
`tf.cond`), so it traces exactly once (`Engine.traces` counts traces; live
hyperparameter changes assign the optimizer's existing `tf.Variable`s and do not retrace).

A config's `lr_schedule` is built as an `optimizers.schedules.LiveSchedule` (its numbers in
variables) and passed as `learning_rate=`; `decay` sets OptimizerV2's legacy `_initial_decay`.
`Engine.set_schedule` changes them live: same class and structure = variable assigns, no
retrace; another class, constant <-> schedule, or a new `decay` (a plain Python attribute the
trace bakes in) = a new compiled step, one more trace.
The training and validation sets live on the device as constants; a step gathers its batch.
"""

from __future__ import annotations



import numpy as np
import tensorflow as tf
import tf_keras

from optimizers import registry
from optimizers.base import shortest_float
from optimizers.hyperparams import check_decay
from optimizers.schedules import LiveSchedule
from engine import recording
from settings.run_config import RunConfig
from engine.data import load_dataset
from engine.models import build_model


# Recording levels passed to the train step: nothing, slot statistics, statistics + histograms.
_LEVELS = (tf.constant(0), tf.constant(1), tf.constant(2))


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


def _learning_rate_owner(optimizer):
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
        traces: number of times the train step was traced (1 in a healthy run).
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
        self.train_functions: list = []  # every tf.function of the train step, oldest first
        self._train = self._compile_train()
        self._eval = tf.function(self._eval_step).get_concrete_function()

    def _compile_train(self):
        """A new `tf.function` of the train step, traced now (concrete: called without
        tf.function's argument binding). A retrace needs a NEW function: the old one would
        return its cached trace for the same input signature."""
        spec = [tf.TensorSpec([self.config.batch_size], tf.int32), tf.TensorSpec([], tf.int32)]
        # `config.compiler`: XLA compiles for 2.4-8 s before the first step (measured here),
        # for about the same steps/s on these models, so a run starts in graph mode by default
        function = tf.function(self._train_step, input_signature=spec,
                               jit_compile=self.config.compiler == "xla")
        self.train_functions.append(function)
        return function.get_concrete_function()

    def retrace(self) -> None:
        """Rebuild the train step (one more trace, `traces` + 1): after a change of Python state
        the old trace baked in (`optimizers.base.trace_signature`), e.g. SGD/RMSprop momentum
        crossing 0 on the fused path."""
        self._train = self._compile_train()

    def tracing_count(self) -> int:
        """Traces of the train step: the sum of `experimental_get_tracing_count()` over its
        tf.functions (equals `traces`)."""
        return sum(f.experimental_get_tracing_count() for f in self.train_functions)

    def effective_learning_rate(self) -> float:
        """What `_decayed_lr` returns now (schedule at `iterations`, then / (1 + decay *
        iterations)): the learning rate of the NEXT step, a Python float."""
        with tf.device(self.device):
            return float(self.lr_owner._decayed_lr(tf.as_dtype(self.config.dtype)))

    def schedule_values(self) -> dict | None:
        """The running schedule as a plain serialized dict, or None (constant learning rate)."""
        if self.live_schedule is None:
            return None
        return {"class_name": self.live_schedule.class_name,
                "config": self.live_schedule.values()}

    def set_schedule(self, schedule: dict | None, decay: float, learning_rate: float | None
                     ) -> tuple[str, dict[str, tuple]]:
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
        changes: dict[str, tuple] = {}
        if schedule is None and self.live_schedule is None:  # a new decay only
            changes["decay"] = (self.decay, decay)
            self.decay = self.lr_owner._initial_decay = decay
            self._train = self._compile_train()
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
        self._train = self._compile_train()
        return "retrace", changes

    def _train_step(self, indices, level):
        self.traces += 1  # Python side effect: runs once per trace only
        with tf.device(self.device):
            return self._train_body(indices, level)

    def _train_body(self, indices, level):
        x, y = tf.gather(self.x_train, indices), tf.gather(self.y_train, indices)
        if recording.in_xla_context():  # XLA needs one shape per value; it elides copies
            before = [v.read_value() for v in self.variables]
        else:  # graph mode: copy the old values (for `update`) only on steps that record
            before = tf.cond(level >= 1, lambda: [v.read_value() for v in self.variables],
                             lambda: [tf.zeros([0], v.dtype) for v in self.variables])
        with tf.GradientTape() as tape:
            loss = cross_entropy(y, self.model(x, training=True))
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        n = len(self.series)
        stats = tf.cond(  # only a finiteness guard on steps that record nothing (decimation)
            level >= 1,
            lambda: recording.packed_stats(self.variables, self.optimizer, before),
            lambda: recording.finite_guard(self.variables, self.optimizer),
        )
        hists = tf.cond(
            level >= 2,
            lambda: recording.packed_histograms(self.variables, self.optimizer, before),
            lambda: tf.zeros([n, 2 + recording.BINS], tf.float32),
        )
        return loss, stats, hists

    def _eval_step(self):
        with tf.device(self.device):
            return self._eval_body()

    def _eval_body(self):
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
        level = _LEVELS[2 if with_histograms else 1 if record else 0]
        with tf.device(self.device):  # an XLA-compiled call runs where it is called from
            return self._train(tf.constant(self.order.next()), level)

    def evaluate(self) -> tuple[float, float]:
        """(validation loss in nats, validation accuracy in [0, 1]) on the whole split."""
        loss, accuracy = self._eval()
        return float(loss), float(accuracy)

    def hyper_variables(self) -> list[dict]:
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
