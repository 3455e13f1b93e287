"""Registry: optimizer names -> classes and their hyperparameter specs.

The one place the UI, the run process, the config import and the hyper-gradient engine look
optimizers up. Only names listed here (plus validated plugins added with `register`) can ever be
instantiated from user input: nothing named in a config is imported or evaluated.
"""

from __future__ import annotations

import inspect
from typing import Any, Union

from optimizers.accumulation import GradientAccumulation
from optimizers.adagrad import Adagrad
from optimizers.adam import Adam
from optimizers.adamw import AdamW
from optimizers.base import RuleOptimizer
from optimizers.diffgrad import DiffGrad
from optimizers.hyperparams import HyperSpec, InvalidHyperparameter
from optimizers.lookahead import LegacyOptimizer, Lookahead
from optimizers.rmsprop import RMSprop
from optimizers.sgd import SGD

# What the engine, recorder and run process call on an optimizer besides OptimizerV2's own API.
# A `RuleOptimizer` has all of them; a wrapper such as `Lookahead` implements them itself (it has
# no pure `coefficients` / `update`, so hyper-gradients refuse it: see `is_rule`).
ENGINE_METHODS = ("hyperparameter_specs", "spec", "hyper_values", "slot_names_for_rule",
                  "_set_hyper", "get_slot")
OptimizerClass = Union[type[RuleOptimizer], type[LegacyOptimizer]]

OPTIMIZERS: dict[str, OptimizerClass] = {
    "adam": Adam,
    "sgd": SGD,
    "adamw": AdamW,
    "rmsprop": RMSprop,
    "adagrad": Adagrad,
    "diffgrad": DiffGrad,
    "accumulation": GradientAccumulation,
    "lookahead": Lookahead,
}
# Wrappers whose `inner` option must name a plain rule (neither of them).
WRAPPERS = ("accumulation", "lookahead")
DEFAULT_OPTIMIZER = "adam"


def names() -> list[str]:
    """Registered optimizer names, the default first."""
    return list(OPTIMIZERS)


def get(name: str) -> OptimizerClass:
    """The class registered as `name`.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise KeyError(f"optimizer={name!r} is unknown; known: {', '.join(OPTIMIZERS)}") from None


def has_engine_api(cls: Any) -> bool:
    """True for an OptimizerV2 subclass with every method of `ENGINE_METHODS`."""
    return (inspect.isclass(cls) and issubclass(cls, LegacyOptimizer)
            and all(callable(getattr(cls, m, None)) for m in ENGINE_METHODS))


def is_rule(name: str) -> bool:
    """True when optimizer `name` is a `RuleOptimizer` (pure rule: hyper-gradients work)."""
    return issubclass(get(name), RuleOptimizer)


def register(name: str, cls: OptimizerClass) -> None:
    """Add an optimizer class (used for plugins that passed their contract check).

    Raises:
        ValueError: `name` is taken, or `cls` is neither a `RuleOptimizer` subclass nor an
            OptimizerV2 subclass with the engine's methods (`ENGINE_METHODS`).
    """
    if name in OPTIMIZERS:
        raise ValueError(f"optimizer name {name!r} is already registered")
    if not (inspect.isclass(cls) and (issubclass(cls, RuleOptimizer) or has_engine_api(cls))):
        raise ValueError(f"{cls!r} is not a RuleOptimizer subclass (nor an OptimizerV2 with "
                         f"{', '.join(ENGINE_METHODS)})")
    OPTIMIZERS[name] = cls


def option_defaults(name: str) -> dict[str, Any]:
    """The plain (non-tensor) options of optimizer `name` and their defaults, e.g. amsgrad."""
    cls = get(name)
    params = inspect.signature(cls.__init__).parameters
    return {opt: params[opt].default for opt in cls.OPTIONS}


def validate_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check option names and types against the defaults' types; return the full option dict.

    Raises:
        ValueError: an unknown option, or a value whose type differs from the default's.
    """
    defaults = option_defaults(name)
    out = dict(defaults)
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
        out[key] = value
    if name in WRAPPERS:
        get(out["inner"])  # only registered rules can be wrapped
        if out["inner"] == name:
            raise ValueError(f"option inner={name!r} refused: cannot wrap itself")
        if out["inner"] in WRAPPERS or not is_rule(out["inner"]):
            raise ValueError(f"option inner={out['inner']!r} refused: {name} wraps a plain rule "
                             f"(not {', '.join(WRAPPERS)})")
    return out


def specs(name: str, options: dict[str, Any] | None = None) -> tuple[HyperSpec, ...]:
    """The `HyperSpec`s of optimizer `name` built with `options` (no TF variables created)."""
    return get(name)(**validate_options(name, options or {})).hyperparameter_specs()


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


def create(
    name: str, hypers: dict[str, Any] | None = None, options: dict[str, Any] | None = None
) -> LegacyOptimizer:
    """Instantiate optimizer `name` with validated hyperparameters and options.

    Raises:
        KeyError, ValueError, InvalidHyperparameter: as `get`, `validate_options`,
            `validate_hypers`.
    """
    checked_options = validate_options(name, options or {})
    checked_hypers = validate_hypers(name, hypers or {}, checked_options)
    return get(name)(**checked_options, **checked_hypers)


__all__ = [
    "ENGINE_METHODS", "OPTIMIZERS", "DEFAULT_OPTIMIZER", "InvalidHyperparameter", "WRAPPERS",
    "create", "get", "has_engine_api", "is_rule", "names", "option_defaults", "register", "specs", "validate_hypers", "validate_options",
]
