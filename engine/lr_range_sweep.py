"""The learning-rate range test's sweep (Smith 2017, arXiv:1506.01186): train a COPY for a few
hundred steps at geometrically growing rates (`engine.lr_range.rates`), one loss per rate.

The run itself never moves: `copy_of_engine` builds a second model, optimizer and batch order
holding the run's current weights, slots, `iterations`, hyperparameter values and position in
the data order (deep copies: nothing is shared with the run), and `fresh_state` builds them
from a config as a new run would start (the same seeded initial weights). `sweep` then trains
that state, setting the learning rate with `_set_hyper` before each step (an assign to the
copy's own variable: one trace for the whole sweep).

Step k's row is the loss after the update at lr_k: the mean cross-entropy (nats) of the next
batch, read at the start of step k + 1 (one extra forward pass after the last step). A
schedule of the run is not copied: the sweep sets the rate itself.

Runs in a TensorFlow process (the run process, or the CLI's own for a sweep from the start).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterable

import numpy as np
import tensorflow as tf

from engine.compiled import compiled
from engine import lr_range
from engine.data import load_dataset
from engine.models import build_model
from engine.record_rows import LrRangeRow
from engine.train_step import BatchOrder, _learning_rate_owner, cross_entropy
from optimizers import registry
from settings.run_config import RunConfig


@dataclass
class SweepState:
    """What a sweep trains: a model, its optimizer (slots created), the learning-rate owner
    (a wrapper's inner optimizer), the training data on the device and a batch order."""

    model: Any
    optimizer: Any
    lr_owner: Any
    x_train: tf.Tensor
    y_train: tf.Tensor
    order: BatchOrder
    batch_size: int
    device: str


def _optimizer(config: RunConfig, hypers: dict[str, float]) -> Any:
    return registry.create(config.optimizer, hypers, config.options)


def fresh_state(config: RunConfig, device: str = "/CPU:0") -> SweepState:
    """The state a new run of `config` starts from: seeded initial weights, new slots,
    `iterations` 0, the seed's batch order (`engine.train_step.Engine` builds the same)."""
    data = load_dataset(config.dataset, config.dtype, config.label_noise)
    with tf.device(device):
        model = build_model(config.model, data, config.seed, config.dtype)
        optimizer = _optimizer(config, dict(config.hyperparameters))
        optimizer._create_all_weights(model.trainable_variables)
        x, y = tf.constant(data.x_train), tf.constant(data.y_train)
    return SweepState(model, optimizer, _learning_rate_owner(optimizer), x, y,
                      BatchOrder(data.n_train, config.batch_size, config.seed),
                      config.batch_size, device)


def copy_of_engine(engine: Any) -> SweepState:
    """A deep copy of a live run's state (`engine.train_step.Engine`): weights, every optimizer
    variable (`iterations`, slots) and hyperparameter value, the batch order's position.

    Raises:
        ValueError: the copy's optimizer variables do not match the run's (shapes or count),
            e.g. a plugin whose slots depend on more than the variables.
    """
    config = engine.config
    hypers = {k: float(v) for k, v in engine.optimizer.hyper_values().items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)
              and k in {s.name for s in registry.specs(config.optimizer, config.options)}} \
        if hasattr(engine.optimizer, "hyper_values") else dict(config.hyperparameters)
    with tf.device(engine.device):
        model = build_model(config.model, engine.dataset, config.seed, config.dtype)
        for mine, theirs in zip(model.variables, engine.model.variables, strict=True):
            mine.assign(theirs)
        optimizer = _optimizer(config, hypers)
        optimizer._create_all_weights(model.trainable_variables)
        source, target = list(engine.optimizer.variables()), list(optimizer.variables())
        if [v.shape for v in source] != [v.shape for v in target]:
            raise ValueError("lr_range refused: the copy's optimizer variables do not match the "
                             f"run's ({len(target)} vs {len(source)})")
        for mine, theirs in zip(target, source):
            mine.assign(theirs)
    return SweepState(model, optimizer, _learning_rate_owner(optimizer), engine.x_train,
                      engine.y_train, copy.deepcopy(engine.order), config.batch_size,
                      engine.device)


def state_functions(state: SweepState) -> tuple[Callable[[], float], Callable[[], float],
                                                  Callable[[float], None]]:
    """(train_step, next_loss, set_learning_rate) of `state` for `sweep`: one compiled step on
    the next batch (returns the batch's loss before the update), the loss of the next batch
    without an update (the batch is not consumed), and an assign of the learning rate."""
    indices = tf.TensorSpec([state.batch_size], tf.int32)
    variables = state.model.trainable_variables

    def body(batch: tf.Tensor) -> tf.Tensor:
        x, y = tf.gather(state.x_train, batch), tf.gather(state.y_train, batch)
        with tf.GradientTape() as tape:
            loss = cross_entropy(y, state.model(x, training=True))
        grads = tape.gradient(loss, variables)
        state.optimizer.apply_gradients(zip(grads, variables))
        return loss

    def loss_of(batch: tf.Tensor) -> tf.Tensor:
        x, y = tf.gather(state.x_train, batch), tf.gather(state.y_train, batch)
        return cross_entropy(y, state.model(x, training=True))

    with tf.device(state.device):
        step_function = compiled(body, input_signature=[indices])
        evaluate = compiled(loss_of, input_signature=[indices])
    peeked: list[np.ndarray] = []

    def train_step() -> float:
        batch = peeked.pop() if peeked else state.order.next()
        with tf.device(state.device):
            return float(step_function(tf.constant(batch)))

    def next_loss() -> float:
        if not peeked:
            peeked.append(state.order.next())
        with tf.device(state.device):
            return float(evaluate(tf.constant(peeked[-1])))

    def set_learning_rate(rate: float) -> None:
        state.lr_owner._set_hyper("learning_rate", rate)

    return train_step, next_loss, set_learning_rate


def sweep(train_step: Callable[[], float], next_loss: Callable[[], float],
          set_learning_rate: Callable[[float], None], learning_rates: Iterable[float],
          request_id: int = 0, emit: Callable[[list[LrRangeRow]], None] | None = None,
          emit_every_s: float = 0.25) -> list[LrRangeRow]:
    """Train at each rate in turn; stop early on a blow-up (`lr_range.should_stop`).

    Args:
        train_step: one update at the current rate; returns the loss before it (the loss after
            the previous update, in nats).
        next_loss: the loss now, without an update (after the last step).
        set_learning_rate: sets the rate of the next `train_step`.
        learning_rates: the rates of steps 1..n (`lr_range.rates`).
        request_id: written into every row (the command id in a run process).
        emit: called with the rows so far not yet emitted, about every `emit_every_s` seconds
            and at the end (progress for the pages).

    Returns:
        The `LrRangeRow`s (step k: the loss after the update at lr_k; None = not finite).
    """
    rows: list[LrRangeRow] = []
    losses: list[float] = []
    sent, last_emit = 0, time.monotonic()
    rates = [float(r) for r in learning_rates]
    for k, rate in enumerate(rates, start=1):
        set_learning_rate(rate)
        before = train_step()
        if k > 1:  # the loss after step k-1's update
            losses.append(before)
            rows.append(LrRangeRow(request_id, k - 1, rates[k - 2],
                                   before if math.isfinite(before) else None))
            if lr_range.should_stop(losses):
                break
        if emit is not None and time.monotonic() - last_emit >= emit_every_s:
            emit(rows[sent:])
            sent, last_emit = len(rows), time.monotonic()
    else:
        after = next_loss()
        rows.append(LrRangeRow(request_id, len(rates), rates[-1],
                               after if math.isfinite(after) else None))
    if emit is not None and rows[sent:]:
        emit(rows[sent:])
    return rows


def sweep_config(config: RunConfig, lr_min: float = lr_range.LR_MIN,
                 lr_max: float = lr_range.LR_MAX, steps: int = lr_range.STEPS,
                 device: str = "/CPU:0") -> list[LrRangeRow]:
    """A range test from the start of a run of `config`, in this process (the CLI's
    `train --lr-range`): `fresh_state` swept over `lr_range.rates(lr_min, lr_max, steps)`.

    Raises:
        ValueError: a sweep `lr_range.check` refuses.
    """
    learning_rates = lr_range.rates(lr_min, lr_max, steps)
    return sweep(*state_functions(fresh_state(config, device)), learning_rates)
