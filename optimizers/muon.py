"""Muon (momentum orthogonalised by Newton-Schulz) with an AdamW fallback, as a pure rule plus
its OptimizerV2 adapter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf
import tf_keras

from optimizers import catalog  # HYPERPARAMETERS / OPTIONS: declared once, TF-free
from optimizers.base import DensifiedSparse, RuleOptimizer
from optimizers.routing import muon_route
from optimizers.rules import keras_epsilon, safe_sqrt

# Keras 3.15 divides by (||X||_F + 1e-7) before the iteration; a fixed constant, not epsilon.
NORM_FLOOR = 1e-7


class MuonSlots(NamedTuple):
    """Muon's slots for one variable (the `add_slot` names, in creation order).

    Which branch of the rule a variable takes (`routes_to_adamw`) is written into the shape of
    `v`: a Muon variable's `v` is a scalar placeholder (0, never updated; Keras 3 creates no
    velocity for it), an AdamW variable's `v` is shaped like the variable. The pure rule reads
    the branch from that static shape, so the hyper-gradient engine, which sees tensors only,
    takes the branch the variable took.
    """

    m: tf.Tensor  # [*var.shape], var.dtype: momentum (Muon: m + g + (mu-1) m; AdamW: first moment)
    v: tf.Tensor  # AdamW variable: [*var.shape], var.dtype, second moment; Muon variable: []


def variable_path(var: Any) -> str:
    """The name routing reads: a Keras 3 variable's `path` ("embedding/embeddings"), else a
    `tf.Variable`'s `name` ("embedding/embeddings:0")."""
    return str(getattr(var, "path", None) or getattr(var, "name", ""))


def routes_to_adamw(var: Any, exclude_embeddings: bool = True,
                    exclude_layers: Sequence[str] = ()) -> bool:
    """True when Keras 3.15's Muon sends `var` to its AdamW step (`routing.muon_route`: every
    variable that is not 2-D, 2-D ones named "...embedding..." or matched by `exclude_layers`),
    False for the Muon step (every other 2-D variable, the output layer's kernel included)."""
    return muon_route(var.shape.rank, variable_path(var), exclude_embeddings,
                      exclude_layers) == "adamw"


def muon_coefficients(hypers: Mapping[str, tf.Tensor], step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Muon's scalars at 1-based step t = `step`.

    Returns:
        dict with `learning_rate`, `momentum`, `momentum_minus_one`, `muon_a`, `muon_b`,
        `muon_c`, `rms_rate`, `decay = learning_rate * weight_decay` (Muon variables),
        `adam_decay = learning_rate * adam_weight_decay` (AdamW variables, with the un-scaled
        learning rate, as Keras decays), and the AdamW step's `alpha = learning_rate *
        adam_lr_ratio * sqrt(1 - adam_beta_2**t) / (1 - adam_beta_1**t)` (Kingma & Ba 2015,
        sec. 2, the epsilon-hat form), `one_minus_beta_1`, `one_minus_beta_2`, `epsilon`.
        The powers are taken in the hyperparameters' dtype (float32 in a float32 run), as Keras
        does: Python-float bias corrections drift 1.5e-6 from Keras in 20 float32 steps.
    """
    lr = hypers["learning_rate"]
    beta_1, beta_2 = hypers["adam_beta_1"], hypers["adam_beta_2"]
    alpha = lr * hypers["adam_lr_ratio"] * safe_sqrt(1 - beta_2**step) / (1 - beta_1**step)
    return {"learning_rate": lr, "momentum": hypers["momentum"],
            "momentum_minus_one": hypers["momentum"] - 1, "muon_a": hypers["muon_a"],
            "muon_b": hypers["muon_b"], "muon_c": hypers["muon_c"],
            "rms_rate": hypers["rms_rate"], "weight_decay": hypers["weight_decay"],
            "adam_weight_decay": hypers["adam_weight_decay"], "alpha": alpha,
            "one_minus_beta_1": 1 - beta_1, "one_minus_beta_2": 1 - beta_2,
            "epsilon": hypers["epsilon"]}


def _transpose(x: tf.Tensor) -> tf.Tensor:
    return tf.linalg.matrix_transpose(x)


def newton_schulz(x: tf.Tensor, a: tf.Tensor, b: tf.Tensor, c: tf.Tensor, steps: int) -> tf.Tensor:
    """The quintic Newton-Schulz iteration towards the orthogonal factor U V^T of x = U S V^T.

        X  = x / (||x||_F + 1e-7)           (transposed first when rows > columns)
        repeat `steps` times:  A = X X^T;  X = a X + (b A + c A A) X

    With Keras's (a, b, c) = (3.4445, -4.7750, 2.0315) each singular value s in (0, 1] moves to
    p(s) = a s + b s^3 + c s^5, which maps small values up fast (slope a at 0) but does not
    converge to 1: after 5 steps the singular values lie in about [0.7, 1.2] (Jordan et al. 2024,
    "Muon: An optimizer for hidden layers", kellerjordan.github.io/posts/muon).

    Args:
        x: tensor [rows, columns] (or a batch [..., rows, columns]), real float dtype.
        a, b, c: scalars of x's dtype (the polynomial's coefficients).
        steps: number of iterations (Python int, >= 0).

    Returns:
        Tensor shaped like `x`. Differentiable everywhere (the norm uses `safe_sqrt`).
    """
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = _transpose(x)
    x = x / (safe_sqrt(tf.reduce_sum(tf.square(x), axis=(-2, -1), keepdims=True))
             + tf.cast(NORM_FLOOR, x.dtype))
    for _ in range(steps):
        gram = x @ _transpose(x)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return _transpose(x) if tall else x


def muon_update(
    grad: tf.Tensor,
    var: tf.Tensor,
    slots: Mapping[str, tf.Tensor],
    coeffs: Mapping[str, tf.Tensor],
    nesterov: bool = True,
    ns_steps: int = 5,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One step on one variable: the Muon step or the AdamW step, as `slots["v"]` says.

    Muon variable (2-D, `v` a scalar placeholder):
        var <- var - var * weight_decay * lr                    (decay first, as Keras 3)
        m   <- m + (grad + (momentum - 1) m)                    (= momentum m + grad)
        d    = grad + momentum m   if nesterov, else m
        var <- var - lr * NS(d) * sqrt(max(rows, columns)) * rms_rate
    The last factor makes the update's RMS about rms_rate, like AdamW's (Liu et al. 2025,
    "Muon is Scalable for LLM Training", arXiv:2502.16982, sec. 2.2).

    AdamW variable:
        var <- var - var * adam_weight_decay * lr
        m   <- m + (grad - m)(1 - adam_beta_1);  v <- v + (grad**2 - v)(1 - adam_beta_2)
        var <- var - m * alpha / (sqrt(v) + epsilon)            (alpha: `muon_coefficients`)

    Args:
        grad, var: tensors of one shape, real float dtype.
        slots: `m` shaped like `var`; `v` shaped like `var` (AdamW) or [] (Muon).
        coeffs: from `muon_coefficients`.
        nesterov, ns_steps: the class's options.

    Returns:
        (new_var, {"m", "v"}), shapes and dtype as given; a Muon variable's `v` is returned
        unchanged.
    """
    m, v = slots["m"], slots["v"]
    lr = coeffs["learning_rate"]
    if var.shape.rank == 2 and v.shape.rank == 0:
        decayed = var - var * coeffs["weight_decay"] * lr
        m = m + (grad + m * coeffs["momentum_minus_one"])
        direction = grad + coeffs["momentum"] * m if nesterov else m
        orthogonal = newton_schulz(direction, coeffs["muon_a"], coeffs["muon_b"],
                                   coeffs["muon_c"], ns_steps)
        # Keras's order of the products, so that float32 rounds alike
        side = tf.sqrt(tf.cast(max(var.shape[0], var.shape[1]), var.dtype))
        return decayed - lr * orthogonal * side * coeffs["rms_rate"], {"m": m, "v": v}
    decayed = var - var * coeffs["adam_weight_decay"] * lr
    m = m + (grad - m) * coeffs["one_minus_beta_1"]
    v = v + (tf.square(grad) - v) * coeffs["one_minus_beta_2"]
    return decayed - m * coeffs["alpha"] / (safe_sqrt(v) + coeffs["epsilon"]), {"m": m, "v": v}


@tf_keras.saving.register_keras_serializable(package="OptimizerLab")
class Muon(DensifiedSparse, RuleOptimizer):
    """Muon (Jordan et al. 2024; Liu et al. 2025, arXiv:2502.16982): SGD-momentum whose update
    matrix is orthogonalised by a Newton-Schulz iteration, AdamW for the other variables.

    Routing (`routes_to_adamw`, as Keras 3.15): every 2-D variable takes the Muon step, the
    output layer's kernel included; 0-D, 1-D and >= 3-D variables, 2-D variables whose name
    contains "embedding" (`exclude_embeddings`) and those matched by `exclude_layers` take the
    AdamW step. The route is fixed when the slots are created (`slot_shape`) and shown per
    variable by `route_of` (the Slots view).

    Muon step on a [rows, columns] variable at step t (`muon_update`):

        var = var - lr * weight_decay * var                     # decoupled decay, first
        m   = momentum * m + grad
        d   = grad + momentum * m            (nesterov; else d = m)
        var = var - lr * NS5(d) * sqrt(max(rows, columns)) * rms_rate

    AdamW step (learning rate lr * adam_lr_ratio, decay adam_weight_decay):
    var = var - lr * adam_weight_decay * var, then Adam's epsilon-hat update.

    Keras 3 parity: `keras.optimizers.Muon` (slots `momentums`, `adam_velocities` = this `m`,
    `v`) gives the same weights and slots step for step, in float32 to 1e-6 after 20 steps
    (tests/test_keras3_algorithms.py). Keras's `rms_rate=None` (no scaling) is not offered: set
    it through the scale instead.

    Sparse gradients: the Newton-Schulz iteration mixes every row, so an `IndexedSlices`
    gradient is densified and the dense rule runs (as Keras 3 does).

    Hyper-gradients: every hyperparameter has one; the Frobenius norm uses the finite-derivative
    square root. `muon_a`, `muon_b`, `muon_c` reach the loss through the iteration's polynomial.
    Measured on the hyper-gradient test model (float64, 20 steps, ns_steps 2): forward = reverse
    to 1e-10 and = finite differences to 1e-5 for all 12 (tests/test_keras3_algorithms.py
    follows five of them, one per role).

    Slots: `MuonSlots` (`m`, `v`; `v` a scalar placeholder on Muon variables).

    Args:
        {{hyperparameter_args}}
        nesterov: bool, default True: the Newton-Schulz input is grad + momentum * m.
        ns_steps: int in [0, 100], default 5: Newton-Schulz iterations.
        exclude_embeddings: bool, default True: 2-D variables named "...embedding..." use AdamW.
        exclude_layers: sequence of regular expressions (default none); a 2-D variable whose
            name matches one uses AdamW.

    {{allowed_values}}

    Raises:
        InvalidHyperparameter: a value `HyperSpec.library_check` refuses, or a negative `decay`.
        TypeError: `nesterov` or `exclude_embeddings` not a bool, `ns_steps` not an int,
            `exclude_layers` not a sequence of strings.
        ValueError: `ns_steps` outside [0, 100].
    """

    HYPERPARAMETERS = catalog.own_specs("muon")  # the one declaration: optimizers.catalog
    OPTIONS = catalog.option_names("muon")
    SLOTS = MuonSlots

    def __init__(self, learning_rate=1e-3, adam_beta_1=0.9, adam_beta_2=0.999,
                 adam_weight_decay=0.004, epsilon=1e-7, weight_decay=0.004, momentum=0.95,
                 muon_a=3.4445, muon_b=-4.7750, muon_c=2.0315, adam_lr_ratio=1.0,
                 rms_rate=0.2, nesterov=True, ns_steps=5, exclude_embeddings=True,
                 exclude_layers=(), name="Muon", **kwargs):
        for option, value in (("nesterov", nesterov), ("exclude_embeddings", exclude_embeddings)):
            if not isinstance(value, bool):
                raise TypeError(f"{option}={value!r} refused: must be True or False")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int):
            raise TypeError(f"ns_steps={ns_steps!r} refused: must be an int in [0, 100]")
        if not 0 <= ns_steps <= 100:
            raise ValueError(f"ns_steps={ns_steps!r} refused: must be an int in [0, 100]")
        if isinstance(exclude_layers, str) or not all(
                isinstance(p, str) for p in exclude_layers):
            raise TypeError(f"exclude_layers={exclude_layers!r} refused: must be a list of "
                            "regular expressions (strings)")
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        for hyper, value in (("adam_beta_1", adam_beta_1), ("adam_beta_2", adam_beta_2),
                             ("adam_weight_decay", adam_weight_decay),
                             ("epsilon", keras_epsilon(epsilon)), ("weight_decay", weight_decay),
                             ("momentum", momentum), ("muon_a", muon_a), ("muon_b", muon_b),
                             ("muon_c", muon_c), ("adam_lr_ratio", adam_lr_ratio),
                             ("rms_rate", rms_rate)):
            self._set_hyper(hyper, value)
        self.nesterov, self.ns_steps = nesterov, ns_steps
        self.exclude_embeddings = exclude_embeddings
        self.exclude_layers = list(exclude_layers)

    def route_of(self, var: Any) -> str:
        """"muon" or "adamw": the step `var` takes (`routes_to_adamw`)."""
        adamw = routes_to_adamw(var, self.exclude_embeddings, self.exclude_layers)
        return "adamw" if adamw else "muon"

    def slot_shape(self, name, var):
        """A Muon variable's `v` is a scalar placeholder (see `MuonSlots`)."""
        if name == "v" and self.route_of(var) == "muon":
            return tf.TensorShape([])
        return var.shape

    def coefficients(self, hypers, step):
        return muon_coefficients(hypers, step)

    def update(self, grad, var, slots, coeffs):
        return muon_update(grad, var, slots, coeffs, self.nesterov, self.ns_steps)


    def get_config(self):
        """`RuleOptimizer.get_config` plus `exclude_layers` (a list, not a catalog option)."""
        config = super().get_config()
        config["exclude_layers"] = list(self.exclude_layers)
        return config
