"""Names, settings and thresholds of the training-dynamics diagnostics, TensorFlow-free.

The run process writes `engine.record_rows.DiagnosticRow`s named here; the pages, the export
and the Runs page read them by these names. The stability thresholds are plain arithmetic on
the optimizer's hyperparameters, so the figures can draw them too.

Row names (`DiagnosticRow.name`), `variable` is "" unless said:

| name                        | value                                                          |
|-----------------------------|----------------------------------------------------------------|
| `sharpness`                 | top eigenvalue of the training-loss Hessian (nats / weight^2)  |
| `sharpness_threshold`       | its stability threshold at the step's learning rate            |
| `preconditioned_sharpness`  | top eigenvalue of P^-1 H (Adam, RMSprop)                       |
| `preconditioned_threshold`  | its threshold, e.g. (2 + 2 beta_1) / ((1 - beta_1) lr)         |
| `update_ratio`              | ||delta w|| / ||w|| of one variable (`variable` = its label)   |
| `gradient_noise`            | tr(Sigma), the per-example gradient covariance's trace         |
| `gradient_norm_sq`          | |G|^2, unbiased estimate of the squared true-gradient norm     |
| `noise_scale`               | B_simple = tr(Sigma) / |G|^2 from running means of both        |
| `step_seconds`              | median wall time of a training step without diagnostics        |

`seconds` of a row: wall time the diagnostic took at that step (on its main row; 0 else).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SHARPNESS = "sharpness"
SHARPNESS_THRESHOLD = "sharpness_threshold"
PRECONDITIONED = "preconditioned_sharpness"
PRECONDITIONED_THRESHOLD = "preconditioned_threshold"
UPDATE_RATIO = "update_ratio"
GRADIENT_NOISE = "gradient_noise"
GRADIENT_NORM_SQ = "gradient_norm_sq"
NOISE_SCALE = "noise_scale"
STEP_SECONDS = "step_seconds"

# The settings of each diagnostic: its on/off field and its every-K field (`RunConfig`).
SWITCHES = {"sharpness": "sharpness_every", "noise_scale": "noise_scale_every",
            "update_ratio": None}
# The main row of each diagnostic (the one whose `seconds` is its cost).
MAIN_ROW = {"sharpness": SHARPNESS, "noise_scale": GRADIENT_NOISE, "update_ratio": UPDATE_RATIO}
# The usual rule of thumb for ||delta w|| / ||w|| (Karpathy, CS231n notes, "ratio of weights:
# updates", about 1e-3): a band of one decade around it is drawn on the chart.
RATIO_BAND = (3e-4, 3e-3)
RATIO_TARGET = 1e-3
# Preconditioned sharpness is defined for the optimizers whose step is lr * P^-1 * (momentum)
# with a diagonal P (Cohen et al. 2022, arXiv:2207.14484, sec. 2).
PRECONDITIONED_OPTIMIZERS = ("adam", "adamw", "rmsprop")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def sharpness_threshold(optimizer: str, hypers: Mapping[str, Any], options: Mapping[str, Any],
                        learning_rate: float) -> float | None:
    """The stability threshold of the plain sharpness (top Hessian eigenvalue), 1/lr units.

    Gradient descent on a quadratic with curvature lambda diverges once lambda > 2/lr; with
    Polyak momentum beta once lambda > (2 + 2 beta)/lr; with Nesterov momentum once
    lambda > (2 + 2 beta)/((1 + 2 beta) lr) (Cohen et al. 2021, arXiv:2103.00065, sec. 2 and
    appendix for momentum). RMSprop without momentum is gradient descent in the preconditioned
    geometry: its plain sharpness has no threshold; neither have other adaptive optimizers.

    Args:
        optimizer: registry name; hypers: its hyperparameter values (`momentum`);
        options: its options (`nesterov`); learning_rate: the step's effective rate (> 0).

    Returns:
        The threshold, or None when the optimizer has none (or lr <= 0).
    """
    if optimizer != "sgd" or not learning_rate > 0:
        return None
    beta = float(hypers.get("momentum", 0.0) or 0.0)
    if beta <= 0:
        return _finite(2.0 / learning_rate)
    if options.get("nesterov"):
        return _finite((2.0 + 2.0 * beta) / ((1.0 + 2.0 * beta) * learning_rate))
    return _finite((2.0 + 2.0 * beta) / learning_rate)


def preconditioned_threshold(optimizer: str, hypers: Mapping[str, Any],
                             learning_rate: float) -> float | None:
    """The stability threshold of the preconditioned sharpness, top eigenvalue of P^-1 H.

    Adam with beta_1 (P as in `engine.diagnostics.sharpness.preconditioner`): the momentum
    recursion on a quadratic with preconditioned curvature lambda is stable while
    lambda < (2 + 2 beta_1) / ((1 - beta_1) lr) = 38/lr for beta_1 = 0.9 (Cohen et al. 2022,
    arXiv:2207.14484, sec. 2, eq. 2). RMSprop with momentum beta (heavy ball on
    lr P^-1 g): (2 + 2 beta) / lr; without momentum 2/lr (beta_1 = 0 in Adam's formula).

    Returns:
        The threshold, or None for an optimizer without a preconditioner here.
    """
    if optimizer not in PRECONDITIONED_OPTIMIZERS or not learning_rate > 0:
        return None
    if optimizer == "rmsprop":
        beta = float(hypers.get("momentum", 0.0) or 0.0)
        return _finite((2.0 + 2.0 * max(beta, 0.0)) / learning_rate)
    beta_1 = float(hypers.get("beta_1", 0.9))
    if beta_1 >= 1:
        return None
    return _finite((2.0 + 2.0 * beta_1) / ((1.0 - beta_1) * learning_rate))


def threshold_formula(optimizer: str, options: Mapping[str, Any], preconditioned: bool) -> str:
    """The threshold's formula as text for a chart legend ("" when none)."""
    if preconditioned:
        return {"adam": "(2+2β₁)/((1−β₁)·lr)", "adamw": "(2+2β₁)/((1−β₁)·lr)",
                "rmsprop": "2(1+β)/lr"}.get(optimizer, "")
    if optimizer != "sgd":
        return ""
    return "(2+2β)/((1+2β)·lr)" if options.get("nesterov") else "2(1+β)/lr (2/lr at β=0)"


def noise_scale_sentence(noise_scale: float | None, batch_size: int) -> str:
    """What B_simple predicts about the run's batch size (McCandlish et al. 2018,
    arXiv:1812.06162, eq. 2.11-2.12: steps S = S_min (1 + B_noise/B), examples
    E = E_min (1 + B/B_noise))."""
    if noise_scale is None or not math.isfinite(noise_scale) or noise_scale <= 0:
        return ("No noise-scale estimate yet: B_simple = tr(Σ)/|G|² is measured every K steps "
                "from per-example gradients.")
    ratio = batch_size / noise_scale
    # S(2B) / S(B) = (1 + N / 2B) / (1 + N / B)
    cut = 1.0 - (1.0 + noise_scale / (2 * batch_size)) / (1.0 + noise_scale / batch_size)
    text = (f"B_simple ≈ {noise_scale:,.0f} examples against a batch of {batch_size:,}: "
            f"doubling the batch would cut the steps needed by about {100 * cut:.0f}% ")
    if ratio < 0.5:
        return text + ("(the batch is well below the noise scale: larger batches still buy "
                       "almost proportionally fewer steps).")
    if ratio > 2:
        return text + ("(the batch is above the noise scale: larger batches mostly spend more "
                       "examples for few saved steps).")
    return text + "(the batch is near the noise scale: the compute-efficient trade-off)."
