"""The contract check: does an OptimizerV2 subclass follow the rules the lab relies on?

`check_optimizer(cls)` builds the class with its default arguments and runs every item of
`ITEMS` on small float32 problems; each returns a `CheckResult` (passed True/False + detail).
An item that raises fails with the exception as its detail, so one broken method never hides
the others. Items:

    underscore_methods    overrides `_resource_apply_dense` (the name the base class calls) and
                          defines none of the public look-alikes it never calls
                          (`resource_apply_dense`, `resource_apply_sparse`, `create_slots`,
                          `prepare_local`)
    set_hyper             every numeric constructor argument is registered with `_set_hyper`
                          (a RuleOptimizer's declared OPTIONS are exempt: fixed settings)
    slots_in_create_slots every slot exists right after `_create_all_weights` (i.e. is made by
                          `_create_slots`), none is added lazily by a later step
    config_roundtrip      `from_config(get_config())` works, gives the same config, and every
                          numeric constructor argument is in the config
    live_change_no_retrace  a compiled step sees a change of every numeric hyperparameter
                          (compared with the same change made eagerly) without retracing,
                          unless the optimizer declares the change in `trace_signature()`
                          (Python state a trace bakes in, e.g. SGD/RMSprop momentum crossing 0
                          on the fused path): then one retrace is expected and made
    sparse_matches_dense  `tf.IndexedSlices` with every row equals the dense update (2 steps,
                          variable and slots)
    loss_decreases        300 compiled steps on f(w) = 0.5 sum c_i (w_i - 1)^2, c = (1, 2, 5, 10),
                          from w = 0 with the default hyperparameters: f drops by >= 1%
    dense_path            which code a dense update of a 40x40 float32 variable runs: Keras's
                          fused kernel (only when the class's rule is the one that kernel
                          computes, `fused_kernels.kernel_computes_the_rule`) or the class's own
                          rule; fails when a kernel would run in place of a rule the class
                          changed
    differentiable        a `RuleOptimizer` with a pure rule: a forward-mode JVP of one update
                          w.r.t. the learning rate (through `coefficients` and `update`) is
                          finite and nonzero; any other OptimizerV2 has no pure rule (in-place
                          assignments or fused kernels) and fails
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import numpy as np

from optimizers.catalog import registry_name

if TYPE_CHECKING:  # annotations only: the class is imported where a check runs
    from optimizers.wrapping import LegacyOptimizer


class _Deferred:
    """A module imported on first attribute access: the report types (`CheckResult`) and
    `ITEMS` are read by pages that never run a check, and must not cost `import tensorflow`."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)


tf = _Deferred("tensorflow")


def _legacy_optimizer() -> type[Any]:
    from optimizers.wrapping import LegacyOptimizer

    return LegacyOptimizer


def _rule_optimizer() -> type[Any]:
    from optimizers.base import RuleOptimizer

    return RuleOptimizer

PUBLIC_LOOKALIKES = ("resource_apply_dense", "resource_apply_sparse", "create_slots", "prepare_local")
CURVATURE = np.array([1.0, 2.0, 5.0, 10.0], np.float32)


@dataclass(frozen=True)
class CheckResult:
    """One contract item: `item` (key of `ITEMS`), `title`, `passed`, `detail` (one paragraph)."""

    item: str
    title: str
    passed: bool
    detail: str


# ----- helpers ---------------------------------------------------------------------------------
def numeric_arguments(cls: type[Any]) -> dict[str, float]:
    """Constructor arguments whose default is a real number (bools excluded), with defaults."""
    out = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        default = param.default
        if name in ("self", "name") or default is inspect.Parameter.empty:
            continue
        if isinstance(default, numbers.Real) and not isinstance(default, bool):
            out[name] = float(default)
    return out


def _changed_value(opt: LegacyOptimizer, name: str, value: float) -> float:
    """A clearly different value the optimizer accepts for `name`: x1000 for tiny values
    (epsilons, learning rates: a halved epsilon is invisible next to sqrt(v)), else half, or 0.5
    for a zero default; stepped back into the spec's range when it has one."""
    if 0 < value < 1e-3:
        candidate = value * 1000
    else:
        candidate = value * 0.5 if value != 0 else 0.5
    if isinstance(opt, _rule_optimizer()):
        try:
            spec = opt.spec(name)
        except KeyError:
            return candidate
        if not spec.contains(candidate):
            candidate = value * 0.5 if value != 0 else spec.low + 0.5 * (min(spec.high, spec.low + 1.0) - spec.low)
    return candidate


def _set(opt: LegacyOptimizer, name: str, value: float) -> None:
    """Change a hyperparameter the way a user would: `_set_hyper` if registered, else setattr."""
    if name in opt._hyper:
        opt._set_hyper(name, value)
    else:
        setattr(opt, name, value)


def _step_eager(opt: LegacyOptimizer, grad: Any, var: Any) -> None:  # tf.Tensor, tf.Variable
    opt.apply_gradients([(grad, var)])


def _slot_values(opt: LegacyOptimizer, var: Any) -> dict[str, np.ndarray]:  # var: tf.Variable
    return {n: opt.get_slot(var, n).numpy() for n in opt.get_slot_names()}


def _initial(shape=(4, 3), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)


# ----- the items ------------------------------------------------------------------------------
def check_underscore_methods(cls: type) -> tuple[bool, str]:
    lookalikes = [n for n in PUBLIC_LOOKALIKES if any(n in c.__dict__ for c in cls.__mro__)]
    owner = next((c for c in cls.__mro__ if "_resource_apply_dense" in c.__dict__), None)
    overrides = owner is not None and owner not in _legacy_optimizer().__mro__
    parts = [f"_resource_apply_dense defined in {owner.__name__ if owner else '?'}"]
    if lookalikes:
        parts.append(f"defines {', '.join(lookalikes)}: OptimizerV2 never calls these public names "
                     f"(it calls {', '.join('_' + n for n in lookalikes)})")
    return overrides and not lookalikes, "; ".join(parts)


def declared_options(cls: type) -> tuple[str, ...]:
    """A RuleOptimizer's OPTIONS: plain settings declared fixed for the optimizer's life (they
    decide slots or structure, e.g. Adagrad's initial_accumulator_value), exempt from
    `set_hyper` and from the live-change item."""
    return tuple(getattr(cls, "OPTIONS", ())) if issubclass(cls, _rule_optimizer()) else ()


def check_set_hyper(cls: type) -> tuple[bool, str]:
    opt = cls()
    options = declared_options(cls)
    numeric = [n for n in numeric_arguments(cls) if n not in options]
    missing = [n for n in numeric if n not in opt._hyper]
    exempt = [n for n in numeric_arguments(cls) if n in options]
    note = f"; declared OPTIONS (fixed, exempt): {', '.join(exempt)}" if exempt else ""
    if missing:
        kinds = ", ".join(f"{n} ({type(getattr(opt, n, None)).__name__} attribute)" for n in missing)
        return False, (f"not registered with _set_hyper: {kinds}; a plain attribute is baked into a "
                       "compiled step as a constant and has no hyper-gradient" + note)
    return True, f"registered: {', '.join(numeric) or '(no numeric arguments)'}{note}"


def check_slots_in_create_slots(cls: type) -> tuple[bool, str]:
    opt = cls()
    var = tf.Variable(_initial()[0])
    opt._create_all_weights([var])
    created = list(opt.get_slot_names())
    grad = tf.constant(_initial()[1])
    _step_eager(opt, grad, var)
    _step_eager(opt, grad, var)
    later = [n for n in opt.get_slot_names() if n not in created]
    if later:
        return False, (f"slots {later} appeared only during a step (lazy add_slot); "
                       f"_create_slots made {created or 'none'}. Lazy slots are created inside the "
                       "first traced step and are missed by a checkpoint restore before it")
    return True, f"_create_slots made {created or 'no slots (stateless rule)'}"


def check_config_roundtrip(cls: type[Any]) -> tuple[bool, str]:
    opt = cls()
    config = opt.get_config()
    missing = [n for n in numeric_arguments(cls) if n not in config]  # options included
    # a wrapper is given its inner optimizer's class, as `registry.from_config` gives it
    inner = getattr(opt, "inner", None)
    classes = {registry_name(type(inner)): type(inner)} if inner is not None else None
    try:
        clone = cls.from_config(config, custom_objects=classes)
    except Exception as error:  # noqa: BLE001
        return False, f"from_config(get_config()) raised {type(error).__name__}: {error}"
    again = clone.get_config()
    same = set(again) == set(config) and all(
        np.allclose(again[k], config[k]) if isinstance(config[k], numbers.Real) else again[k] == config[k]
        for k in config)
    detail = f"config keys: {', '.join(config)}"
    if missing:
        detail += f"; missing constructor arguments: {', '.join(missing)}"
    if not same:
        detail += f"; round trip changed the config: {again}"
    return same and not missing, detail


def check_live_change_no_retrace(cls: type) -> tuple[bool, str]:
    start, g = _initial()
    start, g = start * 1e-3, g * 1e-3  # small: an epsilon change shows next to sqrt(v)
    grad = tf.constant(g)
    compiled_opt, compiled_var = cls(), tf.Variable(start)
    eager_opt, eager_var = cls(), tf.Variable(start)
    _step_eager(compiled_opt, grad, compiled_var)
    _step_eager(eager_opt, grad, eager_var)

    @tf.function
    def step():
        compiled_opt.apply_gradients([(grad, compiled_var)])

    step()
    traces_before = step.experimental_get_tracing_count()
    signature = _trace_signature(compiled_opt)
    changes = {}
    for name, default in numeric_arguments(cls).items():
        if name in declared_options(cls):
            continue
        current = float(compiled_opt._serialize_hyperparameter(name)) if name in compiled_opt._hyper \
            else float(getattr(compiled_opt, name, default))
        changes[name] = _changed_value(compiled_opt, name, current)
        _set(compiled_opt, name, changes[name])
    _step_eager(eager_opt, grad, eager_var)
    for name, value in changes.items():
        _set(eager_opt, name, value)
    before_c, before_e = compiled_var.numpy(), eager_var.numpy()
    declared = _trace_signature(compiled_opt) != signature
    if declared:  # a declared regime change: what the lab's run loop does, one new trace

        @tf.function
        def step():
            compiled_opt.apply_gradients([(grad, compiled_var)])

        traces_before = 0
    step()
    _step_eager(eager_opt, grad, eager_var)
    traces_after = step.experimental_get_tracing_count()
    # compare the steps taken after the change (relative), not the variables (~1e-3)
    matched = bool(np.allclose(before_c, before_e, rtol=1e-5, atol=1e-12) and np.allclose(
        compiled_var.numpy() - before_c, eager_var.numpy() - before_e, rtol=1e-3, atol=1e-12))
    ignored = [n for n in changes if n not in compiled_opt._hyper]
    detail = (f"changed {', '.join(f'{k}={v:g}' for k, v in changes.items()) or 'nothing'}; "
              f"traces {traces_before} -> {traces_after}; compiled step matches the eager one: {matched}")
    if not matched and ignored:
        detail += f" (the compiled step still uses the old {', '.join(ignored)})"
    if declared:
        detail += ("; trace_signature() changed (a Python-side regime), so the step was "
                   "retraced once, as declared")
        return matched and traces_after == 1, detail
    return matched and traces_after == traces_before, detail


def _trace_signature(opt) -> tuple:
    from optimizers.base import trace_signature

    return trace_signature(opt)


def check_sparse_matches_dense(cls: type) -> tuple[bool, str]:
    start, g = _initial()
    dense_opt, dense_var = cls(), tf.Variable(start)
    sparse_opt, sparse_var = cls(), tf.Variable(start)
    rows = tf.range(start.shape[0])
    for k in range(2):
        grad = tf.constant(g * (k + 1))
        dense_opt.apply_gradients([(grad, dense_var)])
        sparse_opt.apply_gradients([(tf.IndexedSlices(grad, rows, tf.constant(start.shape)), sparse_var)])
    gap = float(np.max(np.abs(dense_var.numpy() - sparse_var.numpy())))
    slot_gaps = {n: float(np.max(np.abs(v - _slot_values(sparse_opt, sparse_var)[n])))
                 for n, v in _slot_values(dense_opt, dense_var).items()}
    worst = max([gap, *slot_gaps.values()])
    return worst <= 1e-6, f"max |dense - sparse| after 2 steps: variable {gap:.2e}" + "".join(
        f", {n} {v:.2e}" for n, v in slot_gaps.items())


def check_loss_decreases(cls: type) -> tuple[bool, str]:
    opt, var = cls(), tf.Variable(np.zeros(4, np.float32))
    curvature = tf.constant(CURVATURE)

    def loss():
        return 0.5 * tf.reduce_sum(curvature * tf.square(var - 1.0))

    @tf.function
    def run(steps):
        for _ in tf.range(steps):
            with tf.GradientTape() as tape:
                value = loss()
            opt.apply_gradients([(tape.gradient(value, var), var)])

    opt._create_all_weights([var])
    initial = float(loss().numpy())
    run(tf.constant(300))
    final = float(loss().numpy())
    ok = math.isfinite(final) and final <= 0.99 * initial
    return ok, f"f: {initial:.4g} -> {final:.4g} after 300 steps (needs <= 99% of the start)"


def check_dense_path(cls: type) -> tuple[bool, str]:
    if not issubclass(cls, _rule_optimizer()):
        return True, ("not a RuleOptimizer: dense updates run its own _resource_apply_dense")
    from optimizers import fused_kernels

    opt = cls()
    var = tf.Variable(tf.zeros([40, 40]))
    kernel = fused_kernels.dense_kernel(opt, var)
    if kernel is None:
        why = "fused=False" if not opt.fused else (
            "its rule differs from the kernel's" if not fused_kernels.kernel_computes_the_rule(cls)
            else "no Keras kernel for this configuration")
        return True, f"dense updates run the class's own rule (`update`): {why}"
    owner = fused_kernels.defining_class(cls, "update").__name__
    ok = fused_kernels.kernel_computes_the_rule(cls)
    return ok, (f"dense updates run Keras's fused kernel {kernel}, which computes "
                f"{owner}.update" + ("" if ok else f", not {cls.__name__}'s own rule"))


def check_differentiable(cls: type) -> tuple[bool, str]:
    if not issubclass(cls, _rule_optimizer()):
        return False, ("not a RuleOptimizer: its update is in-place assignments inside "
                       "_resource_apply_dense (or a fused ResourceApply* kernel), with no pure "
                       "rule to differentiate, so no hyper-gradients")
    opt = cls()
    start, g = _initial()
    var, grad = tf.constant(start), tf.constant(g)
    slots = {n: tf.zeros(opt.slot_shape(n, var), var.dtype) for n in opt.slot_names_for_rule()}
    hypers = opt.hyper_tensors(tf.float32)
    lr = hypers["learning_rate"]
    jvps = []
    for t in (1.0, 2.0, 3.0, 4.0):  # steps 1-4: a rule may skip some steps (accumulation)
        with tf.autodiff.ForwardAccumulator(lr, tf.ones_like(lr)) as acc:
            coeffs = opt.coefficients(dict(hypers, learning_rate=lr), tf.constant(t))
            new_var, _ = opt.update(grad, var, slots, coeffs)
        jvp = acc.jvp(new_var)
        jvps.append(np.zeros_like(start) if jvp is None else jvp.numpy())
    values = np.stack(jvps)
    finite = bool(np.all(np.isfinite(values)))
    ok = finite and bool(np.any(values != 0))
    return ok, (f"forward-mode d(var_t)/d(learning_rate) at t = 1..4 through coefficients/update: "
                f"max |jvp| = {np.max(np.abs(values)):.3g}, finite: {finite}")


ITEMS: dict[str, tuple[str, Callable[[type], tuple[bool, str]]]] = {
    "underscore_methods": ("overrides the underscore methods OptimizerV2 calls", check_underscore_methods),
    "set_hyper": ("every numeric hyperparameter registered with _set_hyper", check_set_hyper),
    "slots_in_create_slots": ("slots created in _create_slots", check_slots_in_create_slots),
    "config_roundtrip": ("from_config(get_config()) round-trips", check_config_roundtrip),
    "live_change_no_retrace": ("runs under tf.function; live change without retrace",
                               check_live_change_no_retrace),
    "sparse_matches_dense": ("sparse path equals dense on full indices", check_sparse_matches_dense),
    "loss_decreases": ("loss decreases on a known problem", check_loss_decreases),
    "dense_path": ("which code a dense update runs (fused kernel or own rule)", check_dense_path),
    "differentiable": ("differentiable for hyper-gradients", check_differentiable),
}


def check_optimizer(cls: type) -> list[CheckResult]:
    """Run every contract item on `cls` (an OptimizerV2 subclass constructible with no arguments).

    Never raises for a broken optimizer: an item that raises fails with the exception as detail.
    """
    results = []
    for item, (title, check) in ITEMS.items():
        try:
            passed, detail = check(cls)
        except Exception as error:  # noqa: BLE001 - the optimizer under test is untrusted code
            last = traceback.extract_tb(error.__traceback__)[-1]
            passed, detail = False, f"raised {type(error).__name__}: {error} (at {last.name}, line {last.lineno})"
        results.append(CheckResult(item, title, bool(passed), detail))
    return results


__all__ = ["CheckResult", "ITEMS", "check_optimizer", "numeric_arguments"]
