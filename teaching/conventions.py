"""One algorithm, several conventions: NumPy references of the forms that Keras, PyTorch and the
papers use, run on the same problem so the differences can be plotted over steps.

Every convention is a pure NumPy step `step(w, state, g, t, lr) -> (w, state)` (float64; t is
the 1-based step; `lr` may change between steps). The families:

* Adam: Keras's epsilon-hat form (the bias corrections folded into the step size, epsilon added
  to the uncorrected sqrt(v); Kingma & Ba 2015, arXiv:1412.6980, end of sec. 2) vs the paper's
  Algorithm 1 (epsilon added to sqrt(v-hat)) vs PyTorch's `torch.optim.Adam` (Algorithm 1's
  form, computed as `lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)`). The Keras form with
  epsilon-hat equals Algorithm 1 with epsilon_t = epsilon-hat / sqrt(1 - beta_2**t): early on
  Keras's epsilon weighs up to 1/sqrt(1 - beta_2) ~ 32x more than the paper's.
* RMSprop: epsilon outside the square root, `g / (sqrt(r) + eps)` (Keras 2 with momentum 0,
  PyTorch) vs inside, `g / sqrt(r + eps)` (Keras 3; Keras 2 with momentum > 0).
* SGD with momentum: Keras `v = m v - lr g; w = w + v` vs PyTorch `b = m b + g; w = w - lr b`
  (Sutskever et al. 2013 vs the "lr outside" form): identical while lr is constant, different
  as soon as lr changes, because Keras's buffer remembers the old learning rates.
* AdamW decay: scaled by the learning rate, `w -= lr * wd * w` (Keras 3, PyTorch) vs unscaled,
  `w -= wd * w` (TensorFlow Addons' DecoupledWeightDecayExtension) vs the schedule multiplier
  eta_t of Loshchilov & Hutter 2019 (arXiv:1711.05101, Algorithm 2, as keras-adamw implements it):
  `w -= eta_t * (lr * adam_direction + wd * w)`.
* Nadam's momentum schedule: mu_t = beta_1 (1 - 0.5 * 0.96**(t/250)) in Dozat 2016 (sec. 3,
  Algorithm 2) and Keras 2 (`schedule_decay` = 0.004 = 1/250) vs mu_t = beta_1 (1 - 0.5 *
  0.96**t) in Keras 3.15 (no 0.004): Keras 3's momentum reaches beta_1 within ~100 steps,
  Dozat's starts near beta_1 / 2 and needs thousands.
* Adamax's epsilon: Keras 2 and 3 divide by (u + eps); PyTorch folds it into the max,
  u = max(beta_2 u, |g| + eps); the paper (Kingma & Ba 2015, Algorithm 2) has none.
* Schedule-free AdamW: the paper's Algorithm 1 (Defazio et al. 2024, arXiv:2405.15682) vs
  Keras 3.15's formula with a snapshot of z (what `read_value()` would give) vs Keras 3.15 on
  TensorFlow, where `momentum.value` is a live reference, so x_old is rebuilt from the
  already-updated z and y becomes the running mean of the z iterates. The weights w are y.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import pandas as pd

State = dict[str, np.ndarray]
Step = Callable[[np.ndarray, State, np.ndarray, int, float], tuple[np.ndarray, State]]

BETA_1, BETA_2, EPSILON, MOMENTUM, RHO = 0.9, 0.999, 1e-7, 0.9, 0.9


def _moments(state: State, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = BETA_1 * state.get("m", 0.0) + (1 - BETA_1) * g
    v = BETA_2 * state.get("v", 0.0) + (1 - BETA_2) * g * g
    return m, v


def adam_keras(w, state, g, t, lr, eps=EPSILON):
    """Keras: lr_t = lr sqrt(1 - b2^t) / (1 - b1^t); w -= lr_t m / (sqrt(v) + eps)."""
    m, v = _moments(state, g)
    lr_t = lr * np.sqrt(1 - BETA_2 ** t) / (1 - BETA_1 ** t)
    return w - lr_t * m / (np.sqrt(v) + eps), {"m": m, "v": v}


def adam_algorithm1(w, state, g, t, lr, eps=EPSILON):
    """Kingma & Ba 2015, Algorithm 1: m^ = m / (1 - b1^t), v^ = v / (1 - b2^t);
    w -= lr m^ / (sqrt(v^) + eps)."""
    m, v = _moments(state, g)
    m_hat, v_hat = m / (1 - BETA_1 ** t), v / (1 - BETA_2 ** t)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps), {"m": m, "v": v}


def adam_pytorch(w, state, g, t, lr, eps=EPSILON):
    """torch.optim.Adam: denom = sqrt(v) / sqrt(bc2) + eps; w -= lr / bc1 * m / denom."""
    m, v = _moments(state, g)
    bc1, bc2 = 1 - BETA_1 ** t, 1 - BETA_2 ** t
    return w - (lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + eps), {"m": m, "v": v}


def rmsprop_outside(w, state, g, t, lr, eps=EPSILON):
    """Epsilon outside: w -= lr g / (sqrt(r) + eps) (Keras 2 with momentum 0, PyTorch)."""
    r = RHO * state.get("r", 0.0) + (1 - RHO) * g * g
    return w - lr * g / (np.sqrt(r) + eps), {"r": r}


def rmsprop_inside(w, state, g, t, lr, eps=EPSILON):
    """Epsilon inside: w -= lr g / sqrt(r + eps) (Keras 3; Keras 2 with momentum > 0)."""
    r = RHO * state.get("r", 0.0) + (1 - RHO) * g * g
    return w - lr * g / np.sqrt(r + eps), {"r": r}


def sgd_keras(w, state, g, t, lr):
    """Keras: v = m v - lr g; w = w + v (the buffer holds past learning rates)."""
    v = MOMENTUM * state.get("v", 0.0) - lr * g
    return w + v, {"v": v}


def sgd_pytorch(w, state, g, t, lr):
    """PyTorch: b = m b + g; w = w - lr b (the current learning rate scales the whole buffer)."""
    b = MOMENTUM * state.get("b", 0.0) + g
    return w - lr * b, {"b": b}


def adamw_lr_scaled(w, state, g, t, lr, wd=0.1):
    """Keras 3 / PyTorch AdamW: w -= lr wd w, then the Adam step (Keras form)."""
    return adam_keras(w - lr * wd * w, state, g, t, lr)


def adamw_unscaled(w, state, g, t, lr, wd=0.1):
    """TensorFlow Addons' AdamW: w -= wd w (wd is NOT multiplied by lr), then the Adam step."""
    return adam_keras(w - wd * w, state, g, t, lr)


def adamw_eta(w, state, g, t, lr, wd=0.1, eta=1.0):
    """Loshchilov & Hutter 2019, Algorithm 2 (keras-adamw): w -= eta_t (lr adam_dir + wd w);
    with a constant schedule multiplier eta_t = `eta`."""
    m, v = _moments(state, g)
    lr_t = np.sqrt(1 - BETA_2 ** t) / (1 - BETA_1 ** t)
    direction = lr * lr_t * m / (np.sqrt(v) + EPSILON)
    return w - eta * (direction + wd * w), {"m": m, "v": v}


def _nadam(w, state, g, t, lr, exponent_scale, eps=EPSILON):
    """Nadam (Dozat 2016, Algorithm 2) with mu_t = b1 (1 - 0.5 * 0.96**(exponent_scale t))."""
    mu = lambda step: BETA_1 * (1 - 0.5 * 0.96 ** (exponent_scale * step))  # noqa: E731
    m, v = _moments(state, g)
    product = state.get("product", 1.0) * mu(t)
    m_hat = (mu(t + 1) * m / (1 - product * mu(t + 1)) + (1 - mu(t)) * g / (1 - product))
    v_hat = v / (1 - BETA_2 ** t)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps), {"m": m, "v": v, "product": product}


def nadam_dozat(w, state, g, t, lr, eps=EPSILON):
    """Dozat 2016 and Keras 2 (schedule_decay 0.004): mu_t = b1 (1 - 0.5 * 0.96**(t/250))."""
    return _nadam(w, state, g, t, lr, 0.004, eps)


def nadam_keras3(w, state, g, t, lr, eps=EPSILON):
    """Keras 3.15: mu_t = b1 (1 - 0.5 * 0.96**t): the schedule is 250x faster."""
    return _nadam(w, state, g, t, lr, 1.0, eps)


def _adamax_moments(state: State, g: np.ndarray, eps: float = 0.0):
    m = BETA_1 * state.get("m", 0.0) + (1 - BETA_1) * g
    u = np.maximum(BETA_2 * state.get("u", 0.0), np.abs(g) + eps)
    return m, u


def adamax_keras(w, state, g, t, lr, eps=EPSILON):
    """Keras 2 (ResourceApplyAdaMax) and 3: w -= lr / (1 - b1^t) * m / (u + eps)."""
    m, u = _adamax_moments(state, g)
    return w - lr / (1 - BETA_1 ** t) * m / (u + eps), {"m": m, "u": u}


def adamax_pytorch(w, state, g, t, lr, eps=EPSILON):
    """torch.optim.Adamax: u = max(b2 u, |g| + eps); w -= lr / (1 - b1^t) * m / u."""
    m, u = _adamax_moments(state, g, eps)
    return w - lr / (1 - BETA_1 ** t) * m / u, {"m": m, "u": u}


def adamax_paper(w, state, g, t, lr, eps=EPSILON):
    """Kingma & Ba 2015, Algorithm 2: w -= lr / (1 - b1^t) * m / u (no epsilon; u > 0 here,
    the problem's gradients are never exactly 0). `eps` is accepted and unused."""
    del eps
    m, u = _adamax_moments(state, g)
    return w - lr / (1 - BETA_1 ** t) * m / u, {"m": m, "u": u}


SF_EPSILON = 1e-8


def _schedule_free(w, state, g, t, lr, form):
    """Schedule-free AdamW on y = `w` (no weight decay, no warm-up): `form` is "paper",
    "snapshot" or "live" (see the module docstring)."""
    z = state.get("z", w)  # z starts at the weights
    v = state.get("v", 0.0)
    if form == "paper":
        x = (w - (1 - BETA_1) * z) / BETA_1
        v = BETA_2 * v + (1 - BETA_2) * g * g
        gamma = lr * np.sqrt(1 - BETA_2 ** t)
        z_new = z - gamma * g / (np.sqrt(v) + SF_EPSILON)
        total = state.get("total", 0.0) + gamma * gamma
        c = gamma * gamma / total
        x = (1 - c) * x + c * z_new
        return (1 - BETA_1) * z_new + BETA_1 * x, {"z": z_new, "v": v, "total": total}
    v = v + (g * g - v) * (1 - BETA_2)
    z_new = z - lr * g / (np.sqrt(v / (1 - BETA_2 ** t)) + SF_EPSILON)
    x = (w - (1 - BETA_1) * (z_new if form == "live" else z)) / BETA_1
    x = (1 - 1 / t) * x + (1 / t) * z_new
    return (1 - BETA_1) * z_new + BETA_1 * x, {"z": z_new, "v": v}


def schedule_free_paper(w, state, g, t, lr):
    """Algorithm 1: x_old from the z before the step; c = gamma_t^2 / sum gamma_i^2."""
    return _schedule_free(w, state, g, t, lr, "paper")


def schedule_free_snapshot(w, state, g, t, lr):
    """Keras 3.15's formula with z_old a copy (`read_value()`): 1/t weights, eps outside."""
    return _schedule_free(w, state, g, t, lr, "snapshot")


def schedule_free_live(w, state, g, t, lr):
    """Keras 3.15 on TensorFlow: `momentum.value` is the variable, read after `assign_sub`."""
    return _schedule_free(w, state, g, t, lr, "live")


def schedule_free_live_mean(steps: int = 30, lr: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(y after `steps` steps of `schedule_free_live` on `problem()`, the mean of the z's it
    went through): equal, because the live reference makes y_{t+1} = (1 - 1/t) y_t + z_{t+1}/t."""
    w, gradient = problem()
    state: dict = {}
    zs = []
    for t in range(1, steps + 1):
        w, state = schedule_free_live(w, state, gradient(w, t), t, lr)
        zs.append(state["z"])
    return w, np.mean(zs, axis=0)


# Epsilon: the lab registers it with `_set_hyper` (a tf.Variable: live changes, hyper-gradients);
# Keras 2 keeps a plain float ("epsilon is set regularly, as it's never needed as a tensor
# variable"), a constant of the traced step. Its cost, measured with bench/bench_optimizers.py
# ("adam" vs "adam eps const": the lab's Adam with epsilon baked in), fused step / Keras's, both
# modes in one run; and what any extra variable costs an XLA step (bench/bench_variable_cost.py,
# the same MLP step reading K more scalar variables).
EPSILON_COST = {
    "command": "PYTHONPATH=. python bench/bench_optimizers.py --only 'adam,adam eps const'",
    "graph": "fused/Keras: adam 1.042x (float lr), 1.007x (schedule + decay); epsilon baked in "
             "1.009x, 1.031x; control row (Keras vs Keras) 1.018x: no difference beyond the "
             "noise",
    "xla": "fused/Keras: adam 1.009x, 1.004x; epsilon baked in 1.019x, 1.015x; control 1.007x: "
           "no difference beyond the noise",
    "per_variable": "2.7-3.0 us per extra scalar variable read (0.2 % of the 1.35 ms step), "
                    "4.9-7.7 us read and assigned (0.4-0.6 %): the price of each live "
                    "hyperparameter, or of a per-variable scalar state (Nadam's momentum cache "
                    "in the lab's rule) that Keras keeps as a constant or once",
    "per_variable_command": "PYTHONPATH=. python bench/bench_variable_cost.py",
}


@dataclass(frozen=True)
class Convention:
    """One form of an algorithm: `label`, the NumPy `step`, the formula (LaTeX), its source."""

    label: str
    step: Step
    latex: str
    source: str


FAMILIES: dict[str, tuple[Convention, ...]] = {
    "Adam epsilon": (
        Convention("Keras (epsilon-hat)", adam_keras,
                   r"w \mathrel{-}= \eta\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}"
                   r"\frac{m_t}{\sqrt{v_t}+\hat\epsilon}", "Kingma & Ba 2015, end of sec. 2"),
        Convention("paper Algorithm 1", adam_algorithm1,
                   r"w \mathrel{-}= \eta\frac{\hat m_t}{\sqrt{\hat v_t}+\epsilon}",
                   "Kingma & Ba 2015, Algorithm 1"),
        Convention("PyTorch", adam_pytorch,
                   r"w \mathrel{-}= \frac{\eta}{1-\beta_1^t}\frac{m_t}"
                   r"{\sqrt{v_t}/\sqrt{1-\beta_2^t}+\epsilon}", "torch.optim.Adam"),
    ),
    "RMSprop epsilon": (
        Convention("outside sqrt (Keras 2, momentum 0; PyTorch)", rmsprop_outside,
                   r"w \mathrel{-}= \eta\, g/(\sqrt{r}+\epsilon)", "tf_keras legacy RMSprop"),
        Convention("inside sqrt (Keras 3)", rmsprop_inside,
                   r"w \mathrel{-}= \eta\, g/\sqrt{r+\epsilon}", "keras.optimizers.RMSprop"),
    ),
    "SGD momentum (lr halved at the middle step)": (
        Convention("Keras", sgd_keras, r"v = \mu v - \eta g,\quad w \mathrel{+}= v",
                   "Sutskever et al. 2013, eq. 1-2"),
        Convention("PyTorch", sgd_pytorch, r"b = \mu b + g,\quad w \mathrel{-}= \eta b",
                   "torch.optim.SGD"),
    ),
    "AdamW decay": (
        Convention("scaled by lr (Keras 3, PyTorch)", adamw_lr_scaled,
                   r"w \mathrel{-}= \eta\lambda w", "Keras 3 AdamW; torch.optim.AdamW"),
        Convention("unscaled (TF Addons)", adamw_unscaled, r"w \mathrel{-}= \lambda w",
                   "tfa.optimizers.AdamW (DecoupledWeightDecayExtension)"),
        Convention("schedule multiplier eta_t (paper, keras-adamw)", adamw_eta,
                   r"w \mathrel{-}= \eta_t(\alpha\,\hat m/(\sqrt{\hat v}+\epsilon)+\lambda w)",
                   "Loshchilov & Hutter 2019, Algorithm 2"),
    ),
    "Nadam momentum schedule": (
        Convention("Dozat 2016 = Keras 2 (0.96**(t/250))", nadam_dozat,
                   r"\mu_t = \beta_1\left(1 - \tfrac12\, 0.96^{t/250}\right)",
                   "Dozat 2016, Algorithm 2; tf_keras legacy Nadam (schedule_decay 0.004)"),
        Convention("Keras 3 (0.96**t)", nadam_keras3,
                   r"\mu_t = \beta_1\left(1 - \tfrac12\, 0.96^{t}\right)",
                   "keras.optimizers.Nadam (3.15)"),
    ),
    "Adamax epsilon": (
        Convention("Keras 2 and 3: m / (u + eps)", adamax_keras,
                   r"w \mathrel{-}= \frac{\eta}{1-\beta_1^t}\frac{m_t}{u_t+\epsilon}",
                   "tf.raw_ops.ResourceApplyAdaMax; keras.optimizers.Adamax"),
        Convention("PyTorch: eps inside the max", adamax_pytorch,
                   r"u_t = \max(\beta_2 u_{t-1}, |g_t| + \epsilon),\ "
                   r"w \mathrel{-}= \frac{\eta}{1-\beta_1^t}\frac{m_t}{u_t}",
                   "torch.optim.Adamax"),
        Convention("paper Algorithm 2: no eps", adamax_paper,
                   r"w \mathrel{-}= \frac{\eta}{1-\beta_1^t}\frac{m_t}{u_t}",
                   "Kingma & Ba 2015, Algorithm 2"),
    ),
    "Schedule-free AdamW (live reference vs snapshot)": (
        Convention("paper Algorithm 1", schedule_free_paper,
                   r"x_{t+1} = (1-c_{t+1})x_t + c_{t+1} z_{t+1},\ "
                   r"c_{t+1} = \gamma_t^2/\textstyle\sum_i \gamma_i^2",
                   "Defazio et al. 2024, arXiv:2405.15682, Algorithm 1"),
        Convention("Keras 3 formula, z_old a snapshot (read_value)", schedule_free_snapshot,
                   r"x_{old} = \frac{y - (1-\beta_1) z_{t}}{\beta_1},\ c = 1/t",
                   "keras.optimizers.ScheduleFreeAdamW as written"),
        Convention("Keras 3 on TensorFlow: z_old a live reference", schedule_free_live,
                   r"x_{old} = \frac{y - (1-\beta_1) z_{t+1}}{\beta_1}"
                   r"\ \Rightarrow\ y_{t+1} = (1-\tfrac1t) y_t + \tfrac1t z_{t+1}",
                   "keras.optimizers.ScheduleFreeAdamW 3.15, TensorFlow backend (measured)"),
    ),
}


def problem(seed: int = 0) -> tuple[np.ndarray, Callable[[np.ndarray, int], np.ndarray]]:
    """(w0 [8], gradient(w, t) -> [8]): a noisy ill-conditioned quadratic, float64."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(-2, 1, 8)
    noise = rng.normal(0, 0.05, size=(100_000, 8))

    def gradient(w: np.ndarray, t: int) -> np.ndarray:
        return scales * w + noise[(t - 1) % len(noise)]

    return rng.normal(size=8), gradient


def run(step: Step, steps: int, lr: float, lr_change_at: int | None = None,
        seed: int = 0) -> np.ndarray:
    """Weights after each step, [steps, 8]; `lr` is halved from step `lr_change_at` on."""
    w, gradient = problem(seed)
    state: State = {}
    out = np.empty((steps, w.size))
    for t in range(1, steps + 1):
        rate = lr / 2 if lr_change_at is not None and t >= lr_change_at else lr
        w, state = step(w, state, gradient(w, t), t, rate)
        out[t - 1] = w
    return out


def takes_epsilon(family: str) -> bool:
    """True when the family's steps take an `eps` argument (the Adam and RMSprop families)."""
    return all("eps" in inspect.signature(c.step).parameters for c in FAMILIES[family])


def compare(family: str, steps: int = 200, lr: float = 0.01,
            epsilon: float | None = None) -> pd.DataFrame:
    """Each convention of `family` against the first: columns `step`, `convention`,
    `max_abs_difference` (max over the 8 weights), `loss` (0.5 sum scales w^2, noise-free).

    The SGD family halves the learning rate at `steps // 2` (its conventions differ only then).
    `epsilon` (default 1e-7) is used by the families that have one (`takes_epsilon`).

    Raises:
        KeyError: unknown family (the message lists them).
    """
    if family not in FAMILIES:
        raise KeyError(f"family={family!r} is unknown; known: {', '.join(FAMILIES)}")
    change = steps // 2 if family.startswith("SGD") else None
    kwargs = {"eps": epsilon} if epsilon is not None and takes_epsilon(family) else {}
    runs = {c.label: run(functools.partial(c.step, **kwargs), steps, lr, change)
            for c in FAMILIES[family]}
    base = next(iter(runs.values()))
    scales = np.logspace(-2, 1, 8)
    frames = []
    for label, weights in runs.items():
        frames.append(pd.DataFrame({
            "step": np.arange(1, steps + 1), "convention": label,
            "max_abs_difference": np.abs(weights - base).max(axis=1),
            "loss": 0.5 * (scales * weights ** 2).sum(axis=1)}))
    return pd.concat(frames, ignore_index=True)


__all__ = ["EPSILON_COST", "SF_EPSILON", "FAMILIES", "Convention", "compare", "run", "takes_epsilon"]
