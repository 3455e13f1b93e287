"""The `HyperSpec`s of Keras 3's Muon and ScheduleFreeAdamW (their defaults are Keras 3.15's).

Plain data, TensorFlow-free, read by `optimizers.catalog` (the classes take their
`HYPERPARAMETERS` from the catalog).
"""

from __future__ import annotations

import dataclasses

from optimizers.hyperparams import BETA_1, BETA_2, EPSILON, LEARNING_RATE, MOMENTUM, HyperSpec

MUON_REFERENCE = (
    "Jordan, Jin, Boza, You, Cesista, Newhouse & Bernstein 2024, 'Muon: An optimizer for hidden "
    "layers in neural networks', kellerjordan.github.io/posts/muon; Liu et al. 2025, 'Muon is "
    "Scalable for LLM Training', arXiv:2502.16982, sec. 2"
)
MUON_MOMENTUM = dataclasses.replace(
    MOMENTUM, default=0.95, help="momentum mu of m = mu m + grad (Muon variables)",
    reference=MUON_REFERENCE)
MUON_WEIGHT_DECAY = HyperSpec(
    "weight_decay", 0.004, 0.0, 1.0,
    "fraction of a Muon variable removed each step, scaled by the learning rate",
    reference=MUON_REFERENCE)
ADAM_WEIGHT_DECAY = dataclasses.replace(
    MUON_WEIGHT_DECAY, name="adam_weight_decay",
    help="fraction of an AdamW variable removed each step, scaled by the learning rate")
ADAM_BETA_1 = dataclasses.replace(BETA_1, name="adam_beta_1")
ADAM_BETA_2 = dataclasses.replace(BETA_2, name="adam_beta_2")
MUON_A = HyperSpec("muon_a", 3.4445, 0.0, 10.0,
                   "a of the Newton-Schulz polynomial p(s) = a s + b s**3 + c s**5 (slope at 0)",
                   reference=MUON_REFERENCE)
MUON_B = HyperSpec("muon_b", -4.7750, -10.0, 0.0, "b of the Newton-Schulz polynomial",
                   reference=MUON_REFERENCE)
MUON_C = HyperSpec("muon_c", 2.0315, 0.0, 10.0, "c of the Newton-Schulz polynomial",
                   reference=MUON_REFERENCE)
ADAM_LR_RATIO = HyperSpec("adam_lr_ratio", 1.0, 0.0, 10.0,
                          "learning rate of the AdamW variables / learning_rate",
                          reference=MUON_REFERENCE, low_inclusive=False)
RMS_RATE = HyperSpec(
    "rms_rate", 0.2, 0.0, 10.0,
    "target RMS of a Muon update: NS(d) is scaled by sqrt(max(rows, columns)) * rms_rate",
    reference="Liu et al. 2025, arXiv:2502.16982, sec. 2.2 (matching AdamW's update RMS)",
    low_inclusive=False)
MUON_SPECS = (LEARNING_RATE, ADAM_BETA_1, ADAM_BETA_2, ADAM_WEIGHT_DECAY, EPSILON,
              MUON_WEIGHT_DECAY, MUON_MOMENTUM, MUON_A, MUON_B, MUON_C, ADAM_LR_RATIO, RMS_RATE)

SCHEDULE_FREE_REFERENCE = (
    "Defazio, Yang, Mehta, Mishchenko, Khaled & Cutkosky 2024, 'The Road Less Scheduled', "
    "arXiv:2405.15682, Algorithm 1 (Schedule-Free AdamW)"
)
SCHEDULE_FREE_LEARNING_RATE = dataclasses.replace(LEARNING_RATE, default=0.0025)
SCHEDULE_FREE_BETA_1 = dataclasses.replace(
    BETA_1, help="interpolation y = (1 - beta_1) z + beta_1 x: where the gradient is taken",
    reference=SCHEDULE_FREE_REFERENCE, low_inclusive=False)
SCHEDULE_FREE_EPSILON = dataclasses.replace(EPSILON, default=1e-8)
SCHEDULE_FREE_WEIGHT_DECAY = HyperSpec(
    "weight_decay", 0.0, 0.0, 1.0,
    "lambda: decay of z by lr * lambda * y each step (Keras 3: of y, before the step)",
    reference=SCHEDULE_FREE_REFERENCE)
SCHEDULE_FREE_SPECS = (SCHEDULE_FREE_LEARNING_RATE, SCHEDULE_FREE_BETA_1, BETA_2,
                       SCHEDULE_FREE_EPSILON, SCHEDULE_FREE_WEIGHT_DECAY)

__all__ = ["MUON_SPECS", "SCHEDULE_FREE_SPECS", "MUON_REFERENCE", "SCHEDULE_FREE_REFERENCE"]
