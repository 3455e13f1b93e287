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


def adadelta(grad, var, slots, hypers, step, options):
    """Zeiler 2012, Algorithm 1, with Keras's learning rate on the update:
    Eg2 = rho Eg2 + (1-rho) g^2; dx = sqrt(Edx2 + eps)/sqrt(Eg2 + eps) g;
    Edx2 = rho Edx2 + (1-rho) dx^2; var -= lr dx."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    eg2 = h["rho"] * slots["accum_grad"] + (one - h["rho"]) * grad * grad
    dx = np.sqrt(slots["accum_var"] + h["epsilon"]) / np.sqrt(eg2 + h["epsilon"]) * grad
    edx2 = h["rho"] * slots["accum_var"] + (one - h["rho"]) * dx * dx
    return var - h["learning_rate"] * dx, {"accum_grad": eg2, "accum_var": edx2}


def adamax(grad, var, slots, hypers, step, options):
    """Kingma & Ba 2015, sec. 7.1 (Algorithm 2), epsilon added to u as Keras:
    m = b1 m + (1-b1) g; u = max(b2 u, |g|); var -= lr/(1-b1^t) m/(u + eps)."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    m = h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad
    u = np.maximum(h["beta_2"] * slots["v"], np.abs(grad))
    lr_t = h["learning_rate"] / (one - h["beta_1"] ** var.dtype.type(step))
    return var - lr_t * m / (u + h["epsilon"]), {"m": m, "v": u}


def ftrl(grad, var, slots, hypers, step, options):
    """McMahan et al. 2013, Algorithm 1 (FTRL-Proximal), per coordinate, in TensorFlow's
    parametrisation (learning_rate_power p, l2 counted twice, l2 shrinkage in z only):
    n' = n + g^2; sigma = (n'^-p - n^-p)/lr; z += g + 2 s var - sigma var;
    var = (sign(z) l1 - z) / ((beta + n'^-p)/lr + 2 l2) where |z| > l1, else 0."""
    h = _cast(var.dtype, hypers)
    power = var.dtype.type(-options.get("learning_rate_power", -0.5))
    lr = h["learning_rate"]
    n, z = slots["accumulator"], slots["linear"]
    n_new = n + grad * grad
    sigma = (n_new ** power - n ** power) / lr
    z = z + grad + 2 * h["l2_shrinkage_regularization_strength"] * var - sigma * var
    quadratic = (h["beta"] + n_new ** power) / lr + 2 * h["l2_regularization_strength"]
    l1 = h["l1_regularization_strength"]
    new_var = np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / quadratic, 0).astype(var.dtype)
    return new_var, {"accumulator": n_new, "linear": z}


def nadam(grad, var, slots, hypers, step, options):
    """Dozat 2016, Algorithm 2, with Keras 2's momentum schedule
    u_t = b1 (1 - 0.5 * 0.96^(sd t)) (sd = schedule_decay, 0.004) and the running product
    m_cache_t = u_1 ... u_t (a scalar slot here, Keras's `momentum_cache` weight):
    g' = g/(1 - m_cache_t); m = b1 m + (1-b1) g; m' = m/(1 - m_cache_t u_{t+1});
    v = b2 v + (1-b2) g^2; v' = v/(1 - b2^t); m_bar = (1 - u_t) g' + u_{t+1} m';
    var -= lr m_bar/(sqrt(v') + eps)."""
    h = _cast(var.dtype, hypers)
    one, dt = var.dtype.type(1), var.dtype.type
    decay = dt(options.get("schedule_decay", 0.004))
    base = dt(np.float32(0.96))  # Keras: tf.cast(0.96, dtype), a float32 constant cast
    u_t = h["beta_1"] * (one - dt(0.5) * base ** (decay * dt(step)))
    u_next = h["beta_1"] * (one - dt(0.5) * base ** (decay * dt(step + 1)))
    cache = slots["m_cache"] * u_t
    m = h["beta_1"] * slots["m"] + (one - h["beta_1"]) * grad
    v = h["beta_2"] * slots["v"] + (one - h["beta_2"]) * grad * grad
    m_bar = (one - u_t) * grad / (one - cache) + u_next * m / (one - cache * u_next)
    v_hat = v / (one - h["beta_2"] ** dt(step))
    new_var = var - h["learning_rate"] * m_bar / (np.sqrt(v_hat) + h["epsilon"])
    return new_var, {"m": m, "v": v, "m_cache": np.asarray(cache, dtype=var.dtype)}

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


def _newton_schulz(x, a, b, c, steps):
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.sqrt(np.sum(x * x)) + x.dtype.type(1e-7))
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon(grad, var, slots, hypers, step, options):
    """Jordan et al. 2024 / Liu et al. 2025 as Keras 3.15 runs it. 2-D variables (not
    "embedding": the caller passes `options["route"]`) take the Muon step: var -= var*wd*lr;
    m = m + g + (mu - 1) m; d = g + mu m (nesterov) else m; var -= lr NS5(d) sqrt(max(r, c))
    rms_rate, NS5: X = d/(|d|_F + 1e-7) (transposed when tall), 5 times X = aX + (bA + cA^2)X,
    A = X X^T. Others: var -= var*adam_wd*lr, then Adam (epsilon-hat) with lr*adam_lr_ratio."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    lr = h["learning_rate"]
    if options.get("route", "muon" if var.ndim == 2 else "adamw") == "muon":
        decayed = var - var * h["weight_decay"] * lr
        m = slots["m"] + grad + (h["momentum"] - one) * slots["m"]
        d = grad + h["momentum"] * m if options.get("nesterov", True) else m
        o = _newton_schulz(d, h["muon_a"], h["muon_b"], h["muon_c"], options.get("ns_steps", 5))
        scale = np.sqrt(var.dtype.type(max(var.shape))) * h["rms_rate"]
        return decayed - lr * o * scale, {"m": m, "v": slots["v"]}
    decayed = var - var * h["adam_weight_decay"] * lr
    m = slots["m"] + (grad - slots["m"]) * (one - h["adam_beta_1"])
    v = slots["v"] + (grad * grad - slots["v"]) * (one - h["adam_beta_2"])
    alpha = lr * h["adam_lr_ratio"] * np.sqrt(one - h["adam_beta_2"] ** t) / (
        one - h["adam_beta_1"] ** t)
    return decayed - m * alpha / (np.sqrt(v) + h["epsilon"]), {"m": m, "v": v}


def schedule_free_adamw(grad, var, slots, hypers, step, options):
    """Defazio et al. 2024 (arXiv:2405.15682, Algorithm 1); `var` holds y. Paper form: x = (y -
    (1-b1) z)/b1; v = b2 v + (1-b2) g^2; gamma = lr sqrt(1-b2^t) min(1, t/warmup); z -= gamma
    g/(sqrt(v)+eps) + gamma wd y; S += gamma^2; c = gamma^2/S; x = (1-c) x + c z; y = (1-b1) z +
    b1 x. `keras3_tf_compat`: y -= y wd lr first; v += (g^2 - v)(1-b2); z -= lr g/(sqrt(v/(1 -
    b2^t)) + eps); x from the UPDATED z; c = 1/t."""
    h = _cast(var.dtype, hypers)
    one = var.dtype.type(1)
    t = var.dtype.type(step)
    b1, b2 = h["beta_1"], h["beta_2"]
    warmup = options.get("warmup_steps", 0)
    lr = h["learning_rate"] * (min(one, t / var.dtype.type(warmup)) if warmup else one)
    z = slots["z"]
    if options.get("keras3_tf_compat", False):
        y = var - var * h["weight_decay"] * h["learning_rate"]
        v = slots["v"] + (grad * grad - slots["v"]) * (one - b2)
        z = z - lr * grad / (np.sqrt(v / (one - b2 ** t)) + h["epsilon"])
        x = (y - (one - b1) * z) / b1
        x = (one - one / t) * x + (one / t) * z
        return (one - b1) * z + b1 * x, {"z": z, "v": v}
    x = (var - (one - b1) * z) / b1
    v = b2 * slots["v"] + (one - b2) * grad * grad
    gamma = lr * np.sqrt(one - b2 ** t)
    z = z - gamma * grad / (np.sqrt(v) + h["epsilon"]) - gamma * h["weight_decay"] * var
    weight_sum = slots["weight_sum"] + gamma * gamma
    c = gamma * gamma / weight_sum
    x = (one - c) * x + c * z
    return (one - b1) * z + b1 * x, {"z": z, "v": v, "weight_sum": weight_sum}


REFERENCES = {
    "sgd": sgd,
    "adam": adam,
    "adamw": adamw,
    "rmsprop": rmsprop,
    "adagrad": adagrad,
    "diffgrad": diffgrad,
    "adadelta": adadelta,
    "adamax": adamax,
    "ftrl": ftrl,
    "nadam": nadam,
    "accumulation": accumulation,
    "lion": lion,
    "lamb": lamb,
    "adafactor": adafactor,
    "muon": muon,
    "schedule_free_adamw": schedule_free_adamw,
}


def initial_slots(name, var, options):
    """The slots' initial values (zeros except Adagrad's and Ftrl's accumulator and Nadam's
    momentum cache)."""
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
        "adadelta": ["accum_grad", "accum_var"],
        "adamax": ["m", "v"],
        "ftrl": ["linear"],
        "nadam": ["m", "v"],
        "muon": ["m", "v"],
        "schedule_free_adamw": ["v"],
    }[name]
    slots = {n: zeros() for n in names}
    if name == "adafactor":  # factored statistics for rank >= 2, scalar placeholders below
        factored = var.ndim >= 2
        slots = {"r": np.zeros(var.shape[:-1] if factored else (), var.dtype),
                 "c": np.zeros(var.shape[:-2] + var.shape[-1:] if factored else (), var.dtype),
                 "v": zeros()}
    if name == "muon" and options.get("route", "muon" if var.ndim == 2 else "adamw") == "muon":
        slots["v"] = np.zeros((), var.dtype)  # a Muon variable's placeholder
    if name == "schedule_free_adamw":  # z starts at the weights; the paper form sums gamma**2
        slots["z"] = var.copy()
        if not options.get("keras3_tf_compat", False):
            slots["weight_sum"] = np.zeros((), var.dtype)
    if name in ("adagrad", "ftrl"):
        slots["accumulator"] = np.full_like(var, options.get("initial_accumulator_value", 0.1))
    if name == "nadam":  # one scalar per variable: the running product of u_t, from 1
        slots["m_cache"] = np.ones((), var.dtype)
    return slots
