"""Migration report of a plugin: where each Keras 2 piece of a bring-your-own optimizer goes in
Keras 3, and, when the plugin is a pure rule, whether its generated Keras 3 twin agrees.

A plugin is a `tf_keras.optimizers.legacy.Optimizer` (OptimizerV2) subclass. `report(cls)`
inspects which OptimizerV2 hooks the class (or a lab base class) defines, runs its constructor
to read the `_set_hyper` names from `_hyper`, and gives one row per piece:

* `automatic`: the lab's `RuleTwin` (optimizers/keras3_twin.py) does it, because the piece is
  the `RuleOptimizer` adapter calling the plugin's pure `coefficients` / `update`;
* `manual`: a hand-written hook: someone has to port it (the `Keras 3` column says to what);
* `not needed`: the hook is not defined, or Keras 3 has nothing to port it to.

`twin_parity(cls)` trains the Keras 2 class and its twin on the same batches (20 steps, dense
kernel/bias and an embedding's `IndexedSlices` gradient, float32 and float64) and reports the
largest |Keras 2 - Keras 3| over the weights and every slot (`teaching.migration.parity_of`).

Keras 3 facts used (keras.io "Optimizer" API and keras/src/optimizers/base_optimizer.py): slots
are made in `build(variables)` with `add_variable_from_reference`; one `update_step(gradient,
variable, learning_rate)` serves dense and `IndexedSlices` gradients; only `learning_rate` is a
variable, other hyperparameters are plain attributes; `weight_decay` belongs to the base class.
Imports TensorFlow and Keras 3: only the Keras 3 page, the tests and bench/ import it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

from optimizer_plugins import plugin_discovery as plugins
from optimizers import registry
from optimizers.base import DeclaredSlots, LegacyOptimizer, RuleOptimizer
from teaching.migration import parity_of

AUTOMATIC, MANUAL, NOT_NEEDED = "automatic", "manual", "not needed"
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}
STEPS = 20
LAB_ADAPTERS = (RuleOptimizer, DeclaredSlots)  # pieces defined here are RuleTwin's job
# Fused in-place kernels: no gradient is registered for them (tensorflow#55181).
FUSED_MARKERS = ("raw_ops.ResourceApply", "training_ops.", "gen_training_ops", "ResourceApply")

# (OptimizerV2 hook, its Keras 3 counterpart, what porting it by hand means)
HOOKS = (
    ("_create_slots", "build(variables) + add_variable_from_reference(var, name)",
     "create every slot in build; keep them in lists indexed by _get_variable_index(variable)"),
    ("_prepare_local", "computed inside update_step",
     "no apply_state cache: compute the coefficients in update_step (per variable)"),
    ("_resource_apply_dense", "update_step(gradient, variable, learning_rate)",
     "move the maths into update_step; assign with self.assign(variable, ...)"),
    ("_resource_apply_sparse", "update_step: an IndexedSlices branch",
     "update_step gets the IndexedSlices itself (no deduplication by the base class)"),
    ("_resource_apply_sparse_duplicate_indices", "update_step: an IndexedSlices branch",
     "sum duplicate indices yourself (tf.unique + unsorted_segment_sum) if the rule needs it"),
    ("apply_gradients", "apply_gradients / apply",
     "an overriding wrapper (Lookahead-like) must be rewritten around Keras 3's apply"),
    ("get_config", "get_config of plain attributes",
     "drop _serialize_hyperparameter: write the attribute values (learning_rate is the base "
     "class's)"),
    ("from_config", "from_config", "usually unchanged; Keras 3 deserializes learning_rate"),
)
# Public look-alikes that OptimizerV2 never calls (a classic plugin mistake).
NEVER_CALLED = {"create_slots": "_create_slots", "resource_apply_dense": "_resource_apply_dense",
                "resource_apply_sparse": "_resource_apply_sparse",
                "prepare_local": "_prepare_local"}


def check_plugin_class(cls: Any) -> type:
    """Return `cls` when it is an OptimizerV2 subclass (the legacy Keras 2 optimizer class).

    Raises:
        TypeError: `cls` is not a class, or not a subclass of
            `tf_keras.optimizers.legacy.Optimizer` (a Keras 3 optimizer needs no migration).
    """
    if not inspect.isclass(cls) or not issubclass(cls, LegacyOptimizer):
        raise TypeError(f"plugin={cls!r} refused: expected a Keras 2 optimizer class (a "
                        "subclass of tf_keras.optimizers.legacy.Optimizer, e.g. a RuleOptimizer)")
    return cls


def defined_in(cls: type, name: str) -> type | None:
    """The first class of `cls`'s MRO below OptimizerV2 that defines `name`, or None."""
    for klass in cls.__mro__:
        if klass is LegacyOptimizer or klass.__module__.startswith("tf_keras."):
            return None
        if name in vars(klass):
            return klass
    return None


def _source(klass: type, name: str) -> str:
    try:
        return inspect.getsource(vars(klass)[name])
    except (OSError, TypeError):
        return ""


def _hook_row(cls: type, hook: str, keras3: str, manual_work: str) -> dict[str, str]:
    owner = defined_in(cls, hook)
    row = {"Keras 2 piece": hook, "defined in": owner.__name__ if owner else "(OptimizerV2)",
           "Keras 3 piece": keras3}
    if owner is None:
        return {**row, "status": NOT_NEEDED, "why": "not overridden: the base class's default"}
    if owner in LAB_ADAPTERS:
        return {**row, "status": AUTOMATIC,
                "why": "lab adapter around the pure rule: RuleTwin does it in Keras 3"}
    source = _source(owner, hook)
    if hook.startswith("_resource_apply") and any(m in source for m in FUSED_MARKERS):
        return {**row, "status": MANUAL,
                "why": "fused in-place kernel (tf.raw_ops.ResourceApply*): not differentiable "
                       "(no hyper-gradients); rewrite with plain ops in update_step"}
    if hook == "get_config" and "_serialize_hyperparameter" in source:
        manual_work = "replace _serialize_hyperparameter(name) by the attribute's value"
    if issubclass(cls, RuleOptimizer) and hook == "_resource_apply_sparse":
        return {**row, "status": AUTOMATIC,
                "why": "overridden sparse path: RuleTwin densifies the IndexedSlices and runs "
                       "the rule (the sparse parity rows check that this is what it does)"}
    if issubclass(cls, RuleOptimizer) and hook in ("get_config", "from_config"):
        return {**row, "status": AUTOMATIC, "why": "RuleTwin.get_config writes the rule's "
                                                   "hyperparameters and options"}
    return {**row, "status": MANUAL, "why": manual_work}


def _instance(cls: type, hypers: dict[str, Any] | None) -> tuple[Any, str | None]:
    try:
        return cls(**(hypers or {})), None
    except Exception as error:  # noqa: BLE001 - the report shows why the constructor failed
        return None, f"{type(error).__name__}: {error}"


def _hyper_rows(cls: type, opt: Any, error: str | None) -> list[dict[str, str]]:
    if opt is None:
        return [{"Keras 2 piece": "__init__ (_set_hyper calls)", "defined in": cls.__name__,
                 "Keras 3 piece": "(unknown)", "status": MANUAL,
                 "why": f"the constructor without arguments failed ({error}): "
                        "its _set_hyper names could not be read"}]
    is_rule = isinstance(opt, RuleOptimizer)
    rows = []
    for name in opt._hyper:
        if name == "learning_rate":
            keras3, why = ("learning_rate= of the base class (a variable: changes live)",
                           "pass it to super().__init__(learning_rate=...)")
        elif name == "weight_decay":
            keras3 = ("rule_weight_decay attribute (the base class's weight_decay would decay "
                      "every row, before update_step)" if is_rule else
                      "weight_decay= of the base class (decays every row before update_step)")
            why = "decide whether the base class's dense decay is the rule you meant"
        else:
            keras3 = f"plain attribute self.{name} (a Python float: a compiled step bakes it in)"
            why = f"replace _set_hyper/_get_hyper('{name}') by self.{name}"
        rows.append({"Keras 2 piece": f"_set_hyper('{name}')", "defined in": cls.__name__,
                     "Keras 3 piece": keras3, "status": AUTOMATIC if is_rule else MANUAL,
                     "why": "RuleTwin sets it from hyper_values()" if is_rule else why})
    plain = [k for k, v in vars(opt).items() if not k.startswith("_") and k not in opt._hyper
             and isinstance(v, float)]
    for name in plain:  # e.g. BadMomentum.momentum: not live in Keras 2 either
        rows.append({"Keras 2 piece": f"self.{name} (plain attribute)", "defined in": cls.__name__,
                     "Keras 3 piece": f"plain attribute self.{name}", "status": NOT_NEEDED,
                     "why": "already the Keras 3 form (and already baked into a compiled step "
                            "in Keras 2: not _set_hyper'd)"})
    return rows


def report(cls: Any, hypers: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per Keras 2 piece of plugin class `cls`: where it goes in Keras 3.

    Args:
        cls: a `tf_keras.optimizers.legacy.Optimizer` subclass (lab `RuleOptimizer` or not).
        hypers: constructor keyword arguments used to run `__init__` (default: none).

    Returns:
        DataFrame with columns `Keras 2 piece`, `defined in` (class name, `(OptimizerV2)` when
        not overridden), `Keras 3 piece`, `status` (`automatic` / `manual` / `not needed`), `why`.

    Raises:
        TypeError: `cls` is not an OptimizerV2 subclass (`check_plugin_class`).
    """
    check_plugin_class(cls)
    opt, error = _instance(cls, hypers)
    rows = _hyper_rows(cls, opt, error)
    if issubclass(cls, RuleOptimizer):
        rows.append({"Keras 2 piece": "coefficients + update (pure rule)",
                     "defined in": (defined_in(cls, "update") or cls).__name__,
                     "Keras 3 piece": "called unchanged by RuleTwin.update_step",
                     "status": AUTOMATIC, "why": "the same two functions serve both front ends"})
    rows += [_hook_row(cls, *hook) for hook in HOOKS]
    for public, private in NEVER_CALLED.items():
        owner = defined_in(cls, public)
        if owner is not None:
            rows.append({"Keras 2 piece": public, "defined in": owner.__name__,
                         "Keras 3 piece": "(nothing: never called)", "status": MANUAL,
                         "why": f"OptimizerV2 never calls {public}; it calls {private}: "
                                "this code never ran in Keras 2 either"})
    return pd.DataFrame(rows, columns=["Keras 2 piece", "defined in", "Keras 3 piece", "status",
                                       "why"])


def twin_parity(cls: Any, hypers: dict[str, Any] | None = None, steps: int = STEPS,
                dtypes: tuple[str, ...] = ("float32", "float64")) -> pd.DataFrame | None:
    """Keras 2 class vs its generated Keras 3 twin (`RuleTwin`) after `steps` steps on the same
    batches, per dtype; None when `cls` is not a `RuleOptimizer` (no twin can be generated).

    Returns:
        DataFrame with columns `dtype`, `quantity`, `gradient` (`dense` / `sparse
        (IndexedSlices)`), `shape`, `max_abs_difference`, `max_abs_value`, `tolerance`
        (float32 1e-6, float64 1e-12), `agrees` (bool).

    Raises:
        TypeError: `cls` is not an OptimizerV2 subclass.
        ValueError: `steps` < 1 or a dtype other than float32/float64.
    """
    check_plugin_class(cls)
    if not issubclass(cls, RuleOptimizer):
        return None
    if steps < 1:
        raise ValueError(f"steps={steps} refused: at least 1")
    frames = []
    for dtype in dtypes:
        if dtype not in TOLERANCE:
            raise ValueError(f"dtype={dtype!r} refused: one of {', '.join(TOLERANCE)}")
        table = parity_of(lambda: cls(**(hypers or {})), tf.as_dtype(dtype), steps)
        table.insert(0, "dtype", dtype)
        table["tolerance"] = TOLERANCE[dtype]
        table["agrees"] = table["max_abs_difference"] <= table["tolerance"]
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def parity_summary(table: pd.DataFrame) -> pd.DataFrame:
    """`twin_parity`'s table reduced to one row per (dtype, gradient): the largest difference
    over the weights and slots of that kind, the tolerance and `agrees`."""
    grouped = table.groupby(["dtype", "gradient"], sort=False)
    out = grouped.agg(max_abs_difference=("max_abs_difference", "max"),
                      tolerance=("tolerance", "first")).reset_index()
    out["agrees"] = out["max_abs_difference"] <= out["tolerance"]
    return out


@dataclass
class PluginChoice:
    """One pickable plugin class: `label` for the picker, `source` (file path or `registry`)."""

    label: str
    cls: type
    source: str


def plugin_choices(directory: Path | str | None = None) -> list[PluginChoice]:
    """Every optimizer class of the bundled plugin files (`plugins.DEFAULT_DIR`, or `directory`)
    imported with `plugins.import_plugin` (once per process), then the registered plugins
    (registry classes from a plugin module) not already listed. A file that fails to import is
    skipped (the Plugins page reports it)."""
    folder = Path(directory) if directory is not None else plugins.DEFAULT_DIR
    choices, seen = [], set()
    for path in plugins.plugin_files(folder):
        module, _error = plugins.import_plugin(path)
        for cls in plugins.optimizer_classes(module) if module is not None else ():
            choices.append(PluginChoice(f"{path.name}: {cls.__name__}", cls, str(path)))
            seen.add(cls)
    for name in registry.names():
        cls = registry.get(name)
        if cls.__module__.startswith(plugins.MODULE_PREFIX) and cls not in seen:
            choices.append(PluginChoice(f"registered '{name}': {cls.__name__}", cls, "registry"))
    return choices


def worst(table: pd.DataFrame | None) -> float:
    """The largest `max_abs_difference` of a parity table (NaN for None)."""
    return float("nan") if table is None else float(np.max(table["max_abs_difference"]))


__all__ = ["AUTOMATIC", "HOOKS", "MANUAL", "NOT_NEEDED", "PluginChoice", "TOLERANCE",
           "check_plugin_class", "defined_in", "parity_summary", "plugin_choices", "report",
           "twin_parity", "worst"]
