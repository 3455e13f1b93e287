"""Independent NumPy references of every optimizer's update, written from the papers/Keras docs.

Deliberately imports nothing from `optimizers`. Each function has the signature
`(grad, var, slots, hypers, step, options) -> (new_var, new_slots)` where `slots` and the
returned slots are dicts of arrays, `hypers` a dict of floats, `step` the 1-based step t and
`options` the optimizer's plain options. All arithmetic is done in `var`'s dtype.

SGD and RMSprop with momentum 0 (Keras's plain regime): Keras has no momentum buffer then, and
the lab's fused path (the default) leaves its buffer unchanged; the pure rule (`fused=False`,
the hyper-gradient engine, a wrapper that calls the inner rule) picks by value and writes the
step's update into it. `options["rule_by_value"] = True` selects the latter.
"""

from __future__ import annotations

import numpy as np


def _cast(dtype, hypers):
    return {k: dtype.type(v) for k, v in hypers.items()}


def sgd(grad, var, slots, hypers, step, options):
    """Keras SGD: m = mu*m - lr*g; var += m (nesterov: var += mu*m - lr*g); mu = 0: var -= lr*g
    (buffer unchanged unless `rule_by_value`)."""
    h = _cast(var.dtype, hypers)
    if not h["momentum"] > 0 and not options.get("rule_by_value"):
        return var - h["learning_rate"] * grad, {"momentum": slots["momentum"]}
    m = h["momentum"] * slots["momentum"] - h["learning_rate"] * grad
    if options.get("nesterov", False):
        new_var = var + h["momentum"] * m - h["learning_rate"] * grad
    else:
        new_var = var + m
    return new_var, {"momentum": m}


def _adam_core(grad, var, slots, h, step, amsgrad):
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    m = h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad
    v = h["beta_2"] * slots["v"] + (one - h["beta_2"]) * grad * grad
    lr_t = h["learning_rate"] * np.sqrt(one - h["beta_2"] ** t) / (one - h["beta_1"] ** t)
    new_slots = {"m": m, "v": v}
    denom = v
    if amsgrad:
        denom = new_slots["vhat"] = np.maximum(slots["vhat"], v)
    return var - lr_t * m / (np.sqrt(denom) + h["epsilon"]), new_slots


def adam(grad, var, slots, hypers, step, options):
    """Kingma & Ba 2015 (epsilon-hat form) / Reddi et al. 2018 AMSGrad."""
    return _adam_core(grad, var, slots, _cast(var.dtype, hypers), step, options.get("amsgrad", False))


def adamw(grad, var, slots, hypers, step, options):
    """Loshchilov & Hutter 2019 with Keras 3 scaling: var -= lr*wd*var, then Adam."""
    h = _cast(var.dtype, hypers)
    decayed = var - h["learning_rate"] * h["weight_decay"] * var
    return _adam_core(grad, decayed, slots, h, step, options.get("amsgrad", False))


def rmsprop(grad, var, slots, hypers, step, options):
    """Keras RMSprop: eps outside the root without momentum, inside with momentum > 0."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    rms = h["rho"] * slots["rms"] + (one - h["rho"]) * grad * grad
    new_slots = {"rms": rms}
    denom = rms
    if options.get("centered", False):
        mg = h["rho"] * slots["mg"] + (one - h["rho"]) * grad
        new_slots["mg"] = mg
        denom = rms - mg * mg
    if h["momentum"] > 0:
        mom = h["momentum"] * slots["momentum"] + h["learning_rate"] * grad / np.sqrt(denom + h["epsilon"])
    else:
        mom = h["learning_rate"] * grad / (np.sqrt(denom) + h["epsilon"])
    # momentum 0: no buffer in Keras; the lab's fused path leaves it, the rule writes the step
    kept = not h["momentum"] > 0 and not options.get("rule_by_value")
    new_slots["momentum"] = slots["momentum"] if kept else mom
    return var - mom, new_slots


def adagrad(grad, var, slots, hypers, step, options):
    """Duchi et al. 2011, Keras form: acc += g^2; var -= lr*g/(sqrt(acc)+eps)."""
    h = _cast(var.dtype, hypers)
    acc = slots["accumulator"] + grad * grad
    return var - h["learning_rate"] * grad / (np.sqrt(acc) + h["epsilon"]), {"accumulator": acc}


def diffgrad(grad, var, slots, hypers, step, options):
    """Dubey et al. 2019, following the authors' PyTorch code (prev_grad starts at 0)."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    m = h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad
    v = h["beta_2"] * slots["v"] + (one - h["beta_2"]) * grad * grad
    dfc = one / (one + np.exp(-np.abs(slots["prev_grad"] - grad)))
    step_size = h["learning_rate"] * np.sqrt(one - h["beta_2"] ** t) / (one - h["beta_1"] ** t)
    new_var = var - step_size * (m * dfc) / (np.sqrt(v) + h["epsilon"])
    return new_var, {"m": m, "v": v, "prev_grad": grad.copy()}


def accumulation(grad, var, slots, hypers, step, options):
    """Sum k micro-batch gradients; every k-th step apply the inner rule to the mean."""
    k = options.get("accumulation_steps", 2)
    inner = REFERENCES[options.get("inner", "adam")]
    acc = slots["grad_accum"] + grad
    inner_slots = {n: s for n, s in slots.items() if n != "grad_accum"}
    if step % k != 0:
        return var.copy(), {**inner_slots, "grad_accum": acc}
    # the wrapper runs the inner optimizer's pure rule (`update`): by value
    new_var, new_inner = inner(acc / var.dtype.type(k), var, inner_slots, hypers, step // k,
                               {"rule_by_value": True})
    return new_var, {**new_inner, "grad_accum": np.zeros_like(acc)}


def lion(grad, var, slots, hypers, step, options):
    """Chen et al. 2023 (arXiv:2302.06675, Program 1), Keras 3 order: decoupled decay
    var -= lr*wd*var first, then var -= lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    decayed = var - h["learning_rate"] * h["weight_decay"] * var
    direction = np.sign(h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad)
    m = h["beta_2"] * slots["m"] + (one - h["beta_2"]) * grad
    return decayed - h["learning_rate"] * direction, {"m": m}


def lamb(grad, var, slots, hypers, step, options):
    """You et al. 2020 (arXiv:1904.00962, Algorithm 2) with Keras 3's decay: var -= lr*wd*var
    first (outside the trust ratio); u = m_hat/(sqrt(v_hat)+eps); var -= lr*(|var|/|u|)*u, the
    ratio 1 when either norm is 0. Norms over the whole array given (the rows of a sparse step)."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    decayed = var - h["learning_rate"] * h["weight_decay"] * var
    m = h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad
    v = h["beta_2"] * slots["v"] + (one - h["beta_2"]) * grad * grad
    u = (m / (one - h["beta_1"] ** t)) / (np.sqrt(v / (one - h["beta_2"] ** t)) + h["epsilon"])
    w_norm, u_norm = np.sqrt(np.sum(decayed * decayed)), np.sqrt(np.sum(u * u))
    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else one
    return decayed - h["learning_rate"] * ratio * u, {"m": m, "v": v}


def _rms(x):
    return np.sqrt(np.mean(x * x))


def adafactor(grad, var, slots, hypers, step, options):
    """Shazeer & Stern 2018 (arXiv:1804.04235, Algorithms 4-5) as Keras 3 runs it, no first
    moment: rho = min(lr, 1/sqrt(t)) (relative_step) else lr; alpha = max(eps2, RMS(var)) * rho;
    b2 = 1 - t**beta_2_decay; G = g^2 + eps1; rank >= 2: r = b2 r + (1-b2) mean_last(G),
    c = b2 c + (1-b2) mean_second_last(G), v = r c / mean(r); rank < 2: v = b2 v + (1-b2) G
    (r, c scalar placeholders, unchanged); u = g/sqrt(v); var -= alpha u / max(1, RMS(u)/d)."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    rho = min(h["learning_rate"], one / np.sqrt(t)) if options.get("relative_step", True) \
        else h["learning_rate"]
    alpha = max(h["epsilon_2"], _rms(var)) * rho
    beta = one - t ** h["beta_2_decay"]
    g2 = grad * grad + h["epsilon_1"]
    new_slots = dict(slots)
    if var.ndim >= 2:
        r = beta * slots["r"] + (one - beta) * np.mean(g2, axis=-1)
        c = beta * slots["c"] + (one - beta) * np.mean(g2, axis=-2)
        v = (r / np.mean(r, axis=-1, keepdims=True))[..., None] * c[..., None, :]
        new_slots.update(r=r, c=c, v=v)
    else:
        v = new_slots["v"] = beta * slots["v"] + (one - beta) * g2
    u = grad / np.sqrt(v)
    u = u / max(one, _rms(u) / h["clip_threshold"])
    return var - alpha * u, new_slots


REFERENCES = {
    "sgd": sgd,
    "adam": adam,
    "adamw": adamw,
    "rmsprop": rmsprop,
    "adagrad": adagrad,
    "diffgrad": diffgrad,
    "accumulation": accumulation,
    "lion": lion,
    "lamb": lamb,
    "adafactor": adafactor,
}


def initial_slots(name, var, options):
    """The slots' initial values (all zeros except Adagrad's accumulator)."""
    zeros = lambda: np.zeros_like(var)  # noqa: E731
    if name == "accumulation":
        inner = options.get("inner", "adam")
        return {**initial_slots(inner, var, {}), "grad_accum": zeros()}
    names = {
        "sgd": ["momentum"],
        "adam": ["m", "v"] + (["vhat"] if options.get("amsgrad") else []),
        "adamw": ["m", "v"] + (["vhat"] if options.get("amsgrad") else []),
        "rmsprop": ["rms"] + (["mg"] if options.get("centered") else []) + ["momentum"],
        "adagrad": [],
        "diffgrad": ["m", "v", "prev_grad"],
        "lion": ["m"],
        "lamb": ["m", "v"],
        "adafactor": [],
    }[name]
    slots = {n: zeros() for n in names}
    if name == "adafactor":  # factored statistics for rank >= 2, scalar placeholders below
        factored = var.ndim >= 2
        slots = {"r": np.zeros(var.shape[:-1] if factored else (), var.dtype),
                 "c": np.zeros(var.shape[:-2] + var.shape[-1:] if factored else (), var.dtype),
                 "v": zeros()}
    if name == "adagrad":
        slots["accumulator"] = np.full_like(var, options.get("initial_accumulator_value", 0.1))
    return slots
