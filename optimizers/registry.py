"""Registry: optimizer names -> classes and their hyperparameter specs.

The one place the UI, the run process, the config import and the hyper-gradient engine look
optimizers up. Only names listed here (plus validated plugins added with `register` /
`register_entry`) can ever be instantiated from user input: nothing named in a config is
imported or evaluated.

Two halves, so that pages and the command line never pay for TensorFlow:

* answered from the catalog (`optimizers.catalog`, plain data, no TensorFlow imported):
  `names`, `specs`, `validate_hypers`, `option_defaults`, `validate_options`, `is_rule`,
  `is_wrapper`, `class_name`, `class_names`, `WRAPPERS`, and `name in OPTIMIZERS`;
* importing the class on first use (TensorFlow then loads): `get`, `create`, `class_named`,
  `name_of`, and reading a value of `OPTIMIZERS`.

The registry is also the only place names are resolved: a wrapper ("accumulation",
"lookahead", "moving_average") takes its inner optimizer as an object, and `create` builds that
object from the `inner` option and passes it; `from_config` resolves the inner name a wrapper's
config holds and passes the class in. Plugin classes are imported through the loader the plugin
module hands over (`use_plugin_loader`): the registry imports no other module of the lab but the
catalog, the hyperparameter specs and, on first use, the optimizer classes.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from optimizers.catalog import (BUILTINS, PLUGIN_PREFIX, WRAPPER_NAMES, CatalogEntry,
                                WrapperRule, check_inner)
from optimizers.hyperparams import HyperSpec, InvalidHyperparameter

# What the engine, recorder and run process call on an optimizer besides OptimizerV2's own API.
# A `RuleOptimizer` has all of them; a wrapper such as `Lookahead` implements them itself (it has
# no pure `coefficients` / `update`, so hyper-gradients refuse it: see `is_rule`).
ENGINE_METHODS = ("hyperparameter_specs", "spec", "hyper_values", "slot_names_for_rule",
                  "_set_hyper", "get_slot")
OptimizerClass = type  # a RuleOptimizer or OptimizerV2 subclass (typed loosely: no TF here)

_ENTRIES: dict[str, CatalogEntry] = dict(BUILTINS)  # name -> entry, in list order
_CLASSES: dict[str, type] = {}  # name -> class, once imported (or registered as a class)
# Entries registered as classes (`register`): their specs come from an instance, as Keras
# builds them, since nothing declared them as data.
_INTROSPECTED: set[str] = set()
# Wrappers: their `inner` option names a plain rule (`validate_options` says which).
WRAPPERS = WRAPPER_NAMES
# Imports the class of a plugin file: (file, class name) -> class. Handed over by the plugin
# module (`use_plugin_loader`), which alone registers plugin entries.
_PLUGIN_LOADER: list[Callable[[Path, str], type]] = []
DEFAULT_OPTIMIZER = "adam"


class _Classes(Mapping):
    """`OPTIMIZERS`: name -> class, read-only. Membership, iteration and `len` read the catalog
    (no TensorFlow); reading a value imports that class. Code adds optimizers with `register` /
    `register_entry`; tests save and restore the registry with `snapshot` / `restore`."""

    def __getitem__(self, name: str) -> type:
        if name not in _ENTRIES:
            raise KeyError(name)
        return get(name)

    def __contains__(self, name: object) -> bool:
        return name in _ENTRIES

    def __iter__(self) -> Iterator[str]:
        return iter(list(_ENTRIES))

    def __len__(self) -> int:
        return len(_ENTRIES)

    def __repr__(self) -> str:
        return f"OPTIMIZERS({', '.join(_ENTRIES)})"


OPTIMIZERS: Mapping[str, type] = _Classes()


# ----- answered from the catalog (no TensorFlow) -----------------------------------------------
def names() -> list[str]:
    """Registered optimizer names, the default first."""
    return list(_ENTRIES)


def entry(name: str) -> CatalogEntry:
    """The catalog entry of `name`.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        return _ENTRIES[name]
    except (KeyError, TypeError):
        raise KeyError(f"optimizer={name!r} is unknown; known: {', '.join(_ENTRIES)}") from None


def is_rule(name: str) -> bool:
    """True when optimizer `name` is a `RuleOptimizer` (pure rule: hyper-gradients work).

    Raises:
        KeyError: unknown name.
    """
    return entry(name).is_rule


def is_wrapper(name: str) -> bool:
    """True when optimizer `name` wraps another one (its `inner` option). Raises KeyError."""
    return entry(name).wrapper is not None


def class_name(name: str) -> str:
    """The class name (`__name__`) of optimizer `name`, e.g. "GradientAccumulation" for
    "accumulation", without importing it. Raises KeyError for an unknown name."""
    return entry(name).class_name


def class_names() -> dict[str, str]:
    """Registry name or class name -> registry name, for every registered optimizer; the first
    registered wins a class name (a plugin class named like a built-in cannot take it over)."""
    out = {name: name for name in _ENTRIES}
    for name, found in _ENTRIES.items():
        out.setdefault(found.class_name, name)
    return out


def option_defaults(name: str) -> dict[str, Any]:
    """The plain (non-tensor) options of optimizer `name` and their defaults, e.g. amsgrad; a
    wrapper's `inner` default is a registry name (e.g. "adam"). Raises KeyError."""
    found = entry(name)
    if name in _INTROSPECTED:
        return _introspected_defaults(name)
    return found.option_defaults()


def _check_inner(name: str, inner: Any) -> None:
    """Refuse an `inner` option wrapper `name` cannot wrap (`catalog.check_inner`).

    Raises:
        KeyError: `inner` is not a registered name.
        ValueError: `inner` is `name` itself, another wrapper, or (for a wrapper that calls the
            inner pure rule) not a rule.
    """
    wrapper = entry(name).wrapper
    inner_entry = entry(inner)
    # `wrapper` is not None: `validate_options` calls this for a wrapper's `inner` only.
    check_inner(name, repr(inner), itself=inner == name, is_wrapper=inner_entry.wrapper is not None,
                accepted=inner_entry.is_rule
                or not wrapper.inner_must_be_rule)  # type: ignore[union-attr]


def validate_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check option names and types against the defaults' types; return the full option dict.

    A wrapper that passes its inner options (GradientAccumulation) also takes its inner rule's
    options (e.g. `{"inner": "sgd", "nesterov": True}`), passed to the inner optimizer.

    Raises:
        KeyError: unknown optimizer, or an `inner` that is not a registered name.
        ValueError: an unknown option, a value whose type differs from the default's, a value
            outside the range its constructor accepts (`catalog.OptionRange`, e.g.
            accumulation_steps in [1, 10000]), or an `inner` the wrapper cannot wrap.
    """
    own = option_defaults(name)
    wrapper = entry(name).wrapper
    defaults = dict(own)
    ranges = dict(entry(name).option_ranges)  # what the constructors would refuse
    if wrapper is not None and wrapper.passes_inner_options:  # nesterov, amsgrad, ...
        inner_name = options.get("inner", own["inner"])
        if isinstance(inner_name, str) and inner_name in _ENTRIES:
            defaults.update({k: v for k, v in option_defaults(inner_name).items()
                             if k not in defaults})
            ranges.update({k: r for k, r in entry(inner_name).option_ranges if k not in own})
    # the wrapper's own options always; an inner rule's only when given (a config, link or
    # flag then carries exactly what the user chose)
    out = dict(own)
    for key, value in options.items():
        if key not in defaults:
            raise ValueError(
                f"option {key!r} refused: {name} takes {', '.join(defaults) or 'no options'}"
            )
        expected = type(defaults[key])
        if expected is float and type(value) is int:
            value = float(value)  # JSON and URLs write 1.0 as 1
        if type(value) is not expected:
            raise ValueError(
                f"option {key}={value!r} refused: must be a {expected.__name__}"
            )
        if key in ranges:
            ranges[key].check(key, value)
        out[key] = value
    if wrapper is not None:  # only registered plain rules can be wrapped
        _check_inner(name, out["inner"])
    return out


def _split_inner_options(name: str, options: dict[str, Any]) -> tuple[dict, dict]:
    """(the wrapper's own options without `inner`, the inner rule's options) of checked
    `options` of wrapper `name`."""
    own = option_defaults(name)
    inner = {k: v for k, v in options.items() if k not in own}
    return {k: v for k, v in options.items() if k in own and k != "inner"}, inner


def specs(name: str, options: dict[str, Any] | None = None) -> tuple[HyperSpec, ...]:
    """The `HyperSpec`s of optimizer `name` built with `options`, in `_set_hyper` order: a
    wrapper's own specs then its inner rule's (GradientAccumulation: only the inner rule's).

    Raises:
        KeyError, ValueError: as `validate_options`.
    """
    checked = validate_options(name, options or {})
    if name in _INTROSPECTED:
        return tuple(_instantiate(name, checked, {}).hyperparameter_specs())
    found = entry(name)
    if found.wrapper is None:
        return found.hyperparameters
    _, inner_options = _split_inner_options(name, checked)
    inner_specs = specs(checked["inner"], inner_options)
    if found.wrapper.inner_specs_only:
        return inner_specs
    return found.hyperparameters + inner_specs


def validate_hypers(
    name: str, hypers: dict[str, Any], options: dict[str, Any] | None = None
) -> dict[str, float]:
    """Validate every given hyperparameter; return all of them (defaults filled in) as floats.

    Raises:
        InvalidHyperparameter: a value out of range, NaN/inf or of the wrong type.
        KeyError: a name the optimizer does not register with `_set_hyper`.
    """
    table = {s.name: s for s in specs(name, options)}
    for key in hypers:
        if key not in table:
            raise KeyError(
                f"hyperparameter {key!r} refused: {name} has {', '.join(table)}"
            )
    return {key: spec.validate(hypers.get(key, spec.default)) for key, spec in table.items()}


def register_entry(found: CatalogEntry) -> None:
    """Add an optimizer known as data (a plugin that passed its contract check in the check
    process): its class is imported only when `get` / `create` need it.

    Raises:
        ValueError: the name is taken, or the entry is a wrapper (only built-ins wrap).
    """
    if found.name in _ENTRIES:
        raise ValueError(f"optimizer name {found.name!r} is already registered")
    if found.wrapper is not None:
        raise ValueError(f"optimizer {found.name!r} refused: only built-in optimizers wrap")
    _ENTRIES[found.name] = found


def unregister(name: str) -> None:
    """Remove a non-built-in optimizer (tests, a plugin reloaded). Raises KeyError for an
    unknown name; ValueError for a built-in one."""
    entry(name)
    if name in BUILTINS:
        raise ValueError(f"optimizer {name!r} is built in and cannot be removed")
    _ENTRIES.pop(name)
    _CLASSES.pop(name, None)
    _INTROSPECTED.discard(name)


def snapshot() -> tuple[dict, dict, set]:
    """The registry's state (entries, imported classes, introspected names), for `restore`;
    imports nothing (tests save it around code that registers plugins)."""
    return dict(_ENTRIES), dict(_CLASSES), set(_INTROSPECTED)


def restore(state: tuple[dict, dict, set]) -> None:
    """Put back a `snapshot` (entries registered since are dropped)."""
    entries, classes, introspected = state
    _ENTRIES.clear()
    _ENTRIES.update(entries)
    _CLASSES.clear()
    _CLASSES.update(classes)
    _INTROSPECTED.clear()
    _INTROSPECTED.update(introspected)


# ----- importing the classes (TensorFlow loads here) -------------------------------------------
def use_plugin_loader(load: Callable[[Path, str], type]) -> None:
    """Let the registry import plugin classes with `load(file, class name) -> class` (the plugin
    module calls it when it is imported; it raises ImportError for a file that fails)."""
    _PLUGIN_LOADER[:] = [load]


def _import_class(found: CatalogEntry) -> type:
    """The class `found.class_path` names ("module:Class" or "plugin:/file.py:Class").

    Raises:
        ImportError: a plugin file that no longer imports, or no plugin loader was handed over.
    """
    if found.class_path.startswith(PLUGIN_PREFIX):
        path, _, attribute = found.class_path[len(PLUGIN_PREFIX):].rpartition(":")
        if not _PLUGIN_LOADER:
            raise ImportError(f"optimizer {found.name!r}: plugin {path} has no loader (the "
                              "plugin module registers its entries and hands one over)")
        try:
            return _PLUGIN_LOADER[0](Path(path), attribute)
        except ImportError as error:
            raise ImportError(f"optimizer {found.name!r}: {error}") from None
    module_name, _, attribute = found.class_path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def get(name: str) -> type[Any]:
    """The class registered as `name` (imported on first use: TensorFlow loads).

    Raises:
        KeyError: unknown name (the message lists the known ones).
        ImportError: a plugin file that no longer imports.
    """
    found = entry(name)
    if name not in _CLASSES:
        _CLASSES[name] = _import_class(found)
    return _CLASSES[name]


def has_engine_api(cls: Any) -> bool:
    """True for an OptimizerV2 subclass with every method of `ENGINE_METHODS`."""
    from optimizers.wrapping import LegacyOptimizer

    return (inspect.isclass(cls) and issubclass(cls, LegacyOptimizer)
            and all(callable(getattr(cls, m, None)) for m in ENGINE_METHODS))


def register(name: str, cls: type) -> None:
    """Add an optimizer class (tests, the run process's plugins); its specs and options are
    read from the class itself (an instance built with default arguments).

    Raises:
        ValueError: `name` is taken, or `cls` is neither a `RuleOptimizer` subclass nor an
            OptimizerV2 subclass with the engine's methods (`ENGINE_METHODS`).
    """
    from optimizers.base import RuleOptimizer
    from optimizers.wrapping import Wrapper

    if name in _ENTRIES:
        raise ValueError(f"optimizer name {name!r} is already registered")
    if not (inspect.isclass(cls) and (issubclass(cls, RuleOptimizer) or has_engine_api(cls))):
        raise ValueError(f"{cls!r} is not a RuleOptimizer subclass (nor an OptimizerV2 with "
                         f"{', '.join(ENGINE_METHODS)})")
    import tf_keras

    wrapper = None
    if issubclass(cls, Wrapper):  # how it combines is read from its class attributes
        wrapper = WrapperRule(inner_specs_only=False,  # unused: its specs come from an instance
                              inner_must_be_rule=issubclass(cls.INNER_BASE, RuleOptimizer),
                              passes_inner_options=bool(getattr(cls, "PASSES_INNER_OPTIONS",
                                                                False)))
    _ENTRIES[name] = CatalogEntry(
        name, f"{cls.__module__}:{cls.__qualname__}", cls.__name__,
        tf_keras.saving.get_registered_name(cls), tuple(getattr(cls, "HYPERPARAMETERS", ())),
        (), issubclass(cls, RuleOptimizer), wrapper)
    _CLASSES[name] = cls
    _INTROSPECTED.add(name)


def _introspected_defaults(name: str) -> dict[str, Any]:
    cls = get(name)
    params = inspect.signature(cls.__init__).parameters
    defaults = {opt: params[opt].default for opt in getattr(cls, "OPTIONS", ())}
    if is_wrapper(name):
        defaults["inner"] = name_of(cls.DEFAULT_INNER)
    return defaults


def name_of(cls: type) -> str:
    """The registry name of class `cls` (the first name it is registered under).

    Raises:
        KeyError: `cls` is not registered.
    """
    for name, found in _ENTRIES.items():
        if found.class_name == cls.__name__ and get(name) is cls:
            return name
    raise KeyError(f"{cls.__name__} is not a registered optimizer class; known: "
                   f"{', '.join(e.class_name for e in _ENTRIES.values())}")


def class_named(class_name: str) -> type:
    """The registered class whose Keras registered name ("OptimizerLab>Adam") or class name
    ("Adam") is `class_name`; the first registered wins, so a plugin class named like a built-in
    one never answers for it.

    Raises:
        KeyError: no registered class answers to `class_name`.
    """
    for name, found in _ENTRIES.items():
        if class_name in (found.keras_name, found.class_name):
            return get(name)
    raise KeyError(f"{class_name!r} is not a registered optimizer class; known: "
                   f"{', '.join(e.class_name for e in _ENTRIES.values())}")


def _instantiate(name: str, options: dict[str, Any], hypers: dict[str, Any]) -> Any:
    """`name`'s class built from checked options and hyperparameters. For a wrapper the inner
    optimizer is created first (with every hyperparameter that is not the wrapper's own) and
    passed as an object."""
    cls = get(name)
    if not is_wrapper(name):
        return cls(**options, **hypers)
    own = {spec.name for spec in entry(name).hyperparameters}
    rest, inner_options = _split_inner_options(name, options)
    inner = create(options["inner"], {k: v for k, v in hypers.items() if k not in own},
                   inner_options)
    return cls(inner=inner, **rest, **{k: v for k, v in hypers.items() if k in own})


def create(
    name: str, hypers: dict[str, Any] | None = None, options: dict[str, Any] | None = None
) -> Any:
    """Instantiate optimizer `name` with validated hyperparameters and options.

    Raises:
        KeyError, ValueError, InvalidHyperparameter: as `get`, `validate_options`,
            `validate_hypers`.
    """
    checked_options = validate_options(name, options or {})
    checked_hypers = validate_hypers(name, hypers or {}, checked_options)
    return _instantiate(name, checked_options, checked_hypers)


def custom_objects() -> dict[str, type]:
    """Every registered class under each name a config may give it: registry name, Keras
    registered name ("OptimizerLab>Adam") and class name (the first registered wins). Pass it to
    `tf_keras.optimizers.deserialize(..., custom_objects=...)` so a wrapper's config finds its
    inner class. Imports every class (TensorFlow loads)."""
    out: dict[str, type] = {}
    for name, found in _ENTRIES.items():
        for key in (name, found.keras_name, found.class_name):
            out.setdefault(key, get(name))
    return out


def from_config(name: str, config: dict[str, Any]) -> Any:
    """Optimizer `name` rebuilt from its `get_config()`. For a wrapper, the inner optimizer the
    config names (a registry name, or a Keras-serialized entry's registered or class name) is
    resolved here and its class passed in (`custom_objects`); nothing else is looked up.

    Raises:
        KeyError: unknown `name`, or an inner name that is no registered class.
        ValueError, TypeError, InvalidHyperparameter: as the class's `from_config`.
    """
    cls = get(name)
    if not is_wrapper(name):
        return cls.from_config(config)
    inner = config.get("inner", option_defaults(name)["inner"])
    named = inner.get("registered_name") or inner.get("class_name") if isinstance(
        inner, dict) else inner
    try:
        # `named` is None for an entry that names no class; `class_named` looks it up as is.
        inner_cls = get(named) if named in _ENTRIES else class_named(
            named)  # type: ignore[arg-type]
    except (KeyError, TypeError):  # the wrapper's `from_config` words the refusal
        return cls.from_config(config, custom_objects={})
    return cls.from_config(config, custom_objects={named: inner_cls})


__all__ = [
    "ENGINE_METHODS", "OPTIMIZERS", "DEFAULT_OPTIMIZER", "InvalidHyperparameter", "WRAPPERS",
    "CatalogEntry", "WrapperRule", "class_name", "class_named", "class_names", "create",
    "custom_objects", "entry", "from_config", "get", "has_engine_api", "is_rule", "is_wrapper",
    "name_of", "names", "option_defaults", "register", "register_entry", "restore",
    "snapshot", "specs", "unregister", "use_plugin_loader", "validate_hypers", "validate_options",
]
