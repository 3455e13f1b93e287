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


REFERENCES = {
    "sgd": sgd,
    "adam": adam,
    "adamw": adamw,
    "rmsprop": rmsprop,
    "adagrad": adagrad,
    "diffgrad": diffgrad,
    "accumulation": accumulation,
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
    }[name]
    slots = {n: zeros() for n in names}
    if name == "adagrad":
        slots["accumulator"] = np.full_like(var, options.get("initial_accumulator_value", 0.1))
    return slots
