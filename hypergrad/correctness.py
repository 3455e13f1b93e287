"""The proof on screen: forward mode = reverse mode = central finite differences.

`check(optimizer, hypers, options)` trains a small float64 tanh model for `steps` steps with the
optimizer's pure rule while carrying forward-mode tangents (`ForwardModeTrainer`), then
computes the same hyper-gradients dE(w_T)/dlambda by reverse mode over the whole trajectory
(`reverse_hypergradient`, no truncation) and by central finite differences
(`central_difference`), for every hyperparameter of the optimizer and, when the run's learning
rate is a schedule (`lr_schedule`, with the legacy `decay`), for every float parameter of the
schedule (`lr_schedule.<param>` rows; `learning_rate` is then the schedule, not a number).

Why tanh and float64: forward and reverse mode compute the same derivative (Franceschi et al.
2017, sec. 3) and agree to round-off; finite differences only approximate the derivative when
the loss is a smooth function of lambda. With ReLU units (and Adam's sign-like normalised steps)
a tiny change of lambda can switch a unit on or off somewhere along the trajectory: the loss is
piecewise in lambda and the difference quotient measures the jumps, not the slope. A smooth
activation removes the kinks; float64 keeps the quotient's round-off (~1e-16 / h) small.

CLI (used by the Hyper-gradients page as a subprocess, so the page does no TensorFlow maths):
`python -m hypergrad.correctness --optimizer adam [--hypers JSON] [--options JSON] [--steps N]
[--lr-schedule JSON] [--decay D]` prints a JSON object `{"rows": [...], "passed": bool,
"tolerances": {...}, "learning_rate": "<how the learning rate is made>", "labels": {...}}`.
"""

from __future__ import annotations



import argparse
import json
import sys
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # TensorFlow is imported when a check runs, not with the module
    import tensorflow as tf
    import tf_keras

# Relative tolerances of the check (the "proof" tolerances).
FORWARD_REVERSE_TOLERANCE = 1e-8
FORWARD_FD_TOLERANCE = 1e-4
FD_RELATIVE_STEP = 1e-7
COLUMNS = ("hyperparameter", "forward", "reverse", "finite_difference",
           "rel_err_forward_reverse", "rel_err_forward_fd", "passed")


def _problem(optimizer: str, hypers: Mapping[str, float], options: Mapping[str, Any],
             steps: int, dtype: str, seed: int, lr_schedule: Mapping[str, Any] | None = None,
             decay: float = 0.0
             ) -> tuple[tf_keras.Model, Any, list[tf.Tensor], list[np.ndarray]]:
    import tensorflow as tf
    import tf_keras

    from optimizers import registry
    from optimizers.hyperparams import check_decay
    from optimizers.keras_schedules import schedule_from_config

    tf_keras.backend.set_floatx(dtype)
    try:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(160, 5))
        y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 0.8)
        tensors = [tf.constant(a) for a in (x[:120].astype(dtype), y[:120],
                                            x[120:].astype(dtype), y[120:])]
        tf_keras.utils.set_random_seed(seed)
        model = tf_keras.Sequential([
            tf_keras.layers.Dense(6, activation="tanh", input_shape=(5,)),
            tf_keras.layers.Dense(3),
        ])
        opt = registry.create(optimizer, dict(hypers), dict(options))
        if lr_schedule is not None:
            # As the run does (engine.train_step): the schedule replaces learning_rate's value.
            opt._set_hyper("learning_rate", schedule_from_config("lr_schedule", lr_schedule))
        opt._initial_decay = check_decay(decay)  # what OptimizerV2.__init__ does with decay=
        opt._create_all_weights(model.trainable_variables)
    finally:
        tf_keras.backend.set_floatx("float32")
    batches = [rng.choice(120, 24, replace=False).astype("int32") for _ in range(steps)]
    return model, opt, tensors, batches


def check(optimizer: str, hypers: Mapping[str, float] | None = None,
          options: Mapping[str, Any] | None = None, steps: int = 30, dtype: str = "float64",
          seed: int = 0, lr_schedule: Mapping[str, Any] | None = None,
          decay: float = 0.0) -> pd.DataFrame:
    """Forward, reverse and finite-difference hyper-gradients of every parameter.

    Args:
        optimizer: a registry name; `hypers` / `options` as in `RunConfig` (missing hypers take
            the spec defaults).
        lr_schedule: a Keras serialized schedule (`RunConfig.lr_schedule`) or None; its float
            parameters get rows named `lr_schedule.<param>`.
        decay: the legacy decay, lr / (1 + decay * iterations), a float >= 0.
        steps: training steps of the trajectory (T), each on a batch of 24 of 120 examples.
        dtype: "float64" (the check) or "float32" (to see round-off take over).

    Returns:
        One row per parameter (`ParameterPlan.names` order) with the columns of `COLUMNS`;
        `frame.attrs["learning_rate"]` says how the learning rate is made and
        `frame.attrs["labels"]` maps each name to its label; `passed` is True when
        rel_err_forward_reverse <= FORWARD_REVERSE_TOLERANCE and rel_err_forward_fd <=
        FORWARD_FD_TOLERANCE.
    """
    model, opt, (xt, yt, xv, yv), batches = _problem(
        optimizer, hypers or {}, options or {}, steps, dtype, seed, lr_schedule, decay)
    return compare(model, opt, xt, yt, xv, yv, batches)


def compare(model: tf_keras.Model, opt: Any, xt: tf.Tensor, yt: tf.Tensor, xv: tf.Tensor,
            yv: tf.Tensor, batches: list[np.ndarray]) -> pd.DataFrame:
    """Forward, reverse and finite-difference hyper-gradients of every parameter of `opt`
    over the steps on `batches` from the model's and optimizer's current state.

    Args:
        model, opt: a model whose variables (and `opt`'s slots) hold the start state; `opt` a
            `RuleOptimizer` with its slots created. Both are trained by the check (use copies).
        xt, yt: training inputs [n, ...] and int labels [n]; `batches` index them, one int32
            array [batch] per step.
        xv, yv: validation inputs and labels: E = their mean cross-entropy after the steps.

    Returns:
        As `check`.
    """
    import tensorflow as tf

    from hypergrad.forward import ForwardModeTrainer
    from hypergrad.parameters import describe_schedule
    from hypergrad.reverse import (
        central_difference,
        read_state,
        relative_error,
        reverse_hypergradient,
    )

    start = read_state(model, opt)
    trainer = ForwardModeTrainer(model, opt, _every_parameter(model, opt), xt, yt, xv, yv)
    plan, followed = trainer.plan, trainer.followed
    for index in batches:
        trainer.step(index)
    _, forward, _ = trainer.hypergradients()
    window = [(tf.gather(xt, i), tf.gather(yt, i)) for i in batches]
    reverse = reverse_hypergradient(model, opt, start, window, followed, xv, yv, plan=plan)
    finite = central_difference(model, opt, start, window, followed, xv, yv,
                                relative_step=FD_RELATIVE_STEP, plan=plan)
    rows = []
    for name in followed:
        err_r = relative_error(forward[name], reverse[name])
        err_fd = relative_error(forward[name], finite[name])
        rows.append((name, forward[name], reverse[name], finite[name], err_r, err_fd,
                     bool(err_r <= FORWARD_REVERSE_TOLERANCE and err_fd <= FORWARD_FD_TOLERANCE)))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame.attrs["learning_rate"] = describe_schedule(plan.schedule, plan.decay)
    frame.attrs["labels"] = {name: plan.label(name) for name in followed}
    return frame


def _every_parameter(model: tf_keras.Model, opt: Any) -> list[str]:
    """Every differentiable parameter of `opt` (hyperparameters, schedule parameters)."""
    from hypergrad.parameters import ParameterPlan

    return ParameterPlan(opt, model.trainable_variables[0].dtype).names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Forward = reverse = finite differences check.")
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--hypers", default="{}", help="JSON object name -> value")
    parser.add_argument("--options", default="{}", help="JSON object of optimizer options")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--lr-schedule", default="null",
                        help="JSON serialized schedule {class_name, config} or null")
    parser.add_argument("--decay", type=float, default=0.0, help="legacy decay, >= 0")
    args = parser.parse_args(argv)
    from optimizer_plugins import plugin_discovery as plugins

    plugins.ensure_registered(args.optimizer)
    try:
        frame = check(args.optimizer, json.loads(args.hypers), json.loads(args.options),
                      steps=args.steps, dtype=args.dtype,
                      lr_schedule=json.loads(args.lr_schedule), decay=args.decay)
    except Exception as error:  # noqa: BLE001 - reported as JSON for the page
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps({
        "rows": frame.to_dict(orient="records"),
        "passed": bool(frame["passed"].all()),
        "tolerances": {"forward_reverse": FORWARD_REVERSE_TOLERANCE,
                       "forward_fd": FORWARD_FD_TOLERANCE},
        "steps": args.steps, "dtype": args.dtype, "optimizer": args.optimizer,
        "learning_rate": frame.attrs["learning_rate"], "labels": frame.attrs["labels"],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
