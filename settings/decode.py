"""The one decoder: typed values from any entry point -> a validated `RunConfig`, or a refusal
that names the field as that entry point spells it.

Each entry point parses its own syntax first (a link's strings, a file's JSON, argparse's flags)
into a `RunConfig`-shaped dict, then calls `decode(values, source)`. The checks, in order (the
first refusal wins, so the message names the most precise field):

1. `hyperparameters` and `options` are mappings;
2. `optimizer` is a registered name (nothing named in input is imported or evaluated);
3. a wrapper's `options.inner` is a registered name; each option alone, then all together,
   is accepted by the optimizer's constructor (`registry.specs`);
4. each hyperparameter is one of the optimizer's and in its range: the per-optimizer pydantic
   model `hyper_model` (generated from the `HyperSpec`s, `allow_inf_nan=False`);
5. no other number is NaN or infinite;
6. `RunConfig` (strict types, bounds, dataset/model, hyper-gradient checks).

A `Source` says how the entry point names a field (`hp.learning_rate` in a link,
`hyperparameters.learning_rate` in a file, `argument --learning-rate` on the command line) and
which exception it raises; every refusal is a `SettingError` subclass with `.field`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any
from collections.abc import Callable, Iterable, Mapping

import pydantic
from pydantic import BeforeValidator, ConfigDict, Field

from optimizers import registry
from optimizers.hyperparams import HyperSpec
from settings.run_config import RunConfig, allowed, describe_error


class SettingError(ValueError):
    """A setting was refused. `field` names it as its entry point spells it ("" = the whole
    input); `str(error)` is `"<field>: <message>"`."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


@dataclass(frozen=True)
class Source:
    """An entry point as the decoder sees it.

    Attributes:
        noun: what the input is called in messages ("link", "config file", "command line").
        key: a dotted `RunConfig` path (`steps`, `hyperparameters.beta_1`) -> the entry point's
            own name for it.
        error: builds the exception raised, from (key, message); a `SettingError` subclass.
        label: a hyperparameter or option name as the entry point spells it (a flag, a name).
    """

    noun: str
    key: Callable[[str], str]
    error: Callable[[str, str], SettingError]
    label: Callable[[str], str] = str


# (optimizer, sorted option items) -> its hyperparameters' model
_MODELS: dict[tuple[str, tuple[tuple[str, Any], ...]], type[pydantic.BaseModel]] = {}


def _bounded_float(spec: HyperSpec) -> Any:
    limits: dict[str, Any] = {}  # Field's `ge`/`gt`/`le`/`lt` -> a bound
    if math.isfinite(spec.low):
        limits["ge" if spec.low_inclusive else "gt"] = spec.low
    if math.isfinite(spec.high):
        limits["le" if spec.high_inclusive else "lt"] = spec.high
    # spec.validate runs first: its message ("beta_1=1.5 refused: must be a float in [0, 1)")
    # is the one every entry point shows; the bounds document the range in the schema.
    return Annotated[float, Field(spec.default, description=f"{spec.help}; {spec.allowed()}",
                                  allow_inf_nan=False, **limits),
                     BeforeValidator(spec.validate)]


def hyper_model(optimizer: str, options: Mapping[str, Any] | None = None
                ) -> type[pydantic.BaseModel]:
    """The pydantic model of `optimizer`'s hyperparameters (with `options`), one field per
    `HyperSpec`: a float with the spec's default and bounds, NaN/inf refused, unknown names
    refused (`extra="forbid"`). Cached per (optimizer, options).

    Raises:
        KeyError, ValueError: unknown optimizer or options refused (`registry.specs`).
    """
    key = (optimizer, tuple(sorted((options or {}).items())))
    if key not in _MODELS:
        specs = registry.specs(optimizer, dict(options or {}))
        _MODELS[key] = pydantic.create_model(
            f"{registry.class_name(optimizer)}Hyperparameters",
            __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
            **{spec.name: _bounded_float(spec) for spec in specs})
    return _MODELS[key]


def not_registered(value: Any, source: Source) -> str:
    """The refusal of a name that is not a registered optimizer."""
    return (f"{value!r} is not a registered optimizer: the name is unknown (nothing named in "
            f"a {source.noun} is imported or evaluated); known: {', '.join(registry.names())}")


def first_non_finite(value: Any, path: str = "") -> tuple[str, Any] | None:
    """(dotted path, value) of the first NaN/inf float inside dicts and lists, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        found = first_non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def _listing(names: Iterable[str], source: Source) -> str:
    return ", ".join(source.label(n) for n in names)


def decode(values: Mapping[str, Any], source: Source) -> RunConfig:
    """A validated `RunConfig` from typed `values` (fields missing take the table's default).

    Args:
        values: `RunConfig` field -> value, as parsed by the entry point (ints, floats, bools,
            strings, lists, dicts; no further coercion: strict).
        source: how the entry point names fields and what it raises.

    Raises:
        SettingError: (the `source.error` subclass) the first refusal, in the order of the
            module docstring, naming the field and what it allows.
    """
    def refuse(path: str, message: str) -> None:
        raise source.error(source.key(path), message)

    candidate = dict(values)
    hypers = candidate.get("hyperparameters", {})
    if not isinstance(hypers, dict):
        refuse("hyperparameters", f"must be a JSON object of name -> number, not "
                                  f"{type(hypers).__name__}")
    options = candidate.get("options", {})
    if not isinstance(options, dict):
        refuse("options", f"must be a JSON object, not {type(options).__name__}")
    optimizer = candidate.setdefault("optimizer", registry.DEFAULT_OPTIMIZER)
    if not isinstance(optimizer, str) or optimizer not in registry.OPTIMIZERS:
        refuse("optimizer", not_registered(optimizer, source))
    takes = registry.option_defaults(optimizer)
    inner = options.get("inner")
    if "inner" in options and "inner" in takes and (
            not isinstance(inner, str) or inner not in registry.OPTIMIZERS):
        refuse("options.inner", not_registered(inner, source))  # registry names only
    for name, value in options.items():  # one at a time, so a refusal names its own key
        if name not in takes:
            refuse(f"options.{name}", f"unknown option {name!r} for {optimizer}: {optimizer} "
                                      f"takes {_listing(takes, source) or 'no options'}")
        try:
            registry.specs(optimizer, {name: value})  # builds it: its constructor checks too
        except (KeyError, ValueError) as error:
            refuse(f"options.{name}", error.args[0])
    try:  # each option alone was fine; together they may not be
        model = hyper_model(optimizer, registry.validate_options(optimizer, options))
    except (KeyError, ValueError) as error:
        refuse("options", error.args[0])
    known = list(model.model_fields)
    for name in hypers:
        if name not in known:
            refuse(f"hyperparameters.{name}",
                   f"{name} refused: {optimizer} has no hyperparameter {name} (an unknown "
                   f"hyperparameter for {optimizer}: {optimizer} has {_listing(known, source)})")
    try:
        model.model_validate(hypers)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        refuse(f"hyperparameters.{first['loc'][0]}",
               str(first["msg"]).removeprefix("Value error, "))
    found = first_non_finite({k: v for k, v in candidate.items() if k in RunConfig.model_fields})
    if found:  # (an unknown field is pydantic's to refuse)
        path, value = found
        refuse(path, f"{value!r} refused: numbers must be finite; allowed: "
                     f"{allowed(path.split('.')[0])}")
    try:
        return RunConfig.model_validate(candidate, strict=True)
    except pydantic.ValidationError as error:
        field, message = describe_error(error)
        if field == "config":  # a model-level check names its value first: `beta_1=... refused`
            name = message.split("=", 1)[0].split(" ")[-1].strip("'")
            field = (f"hyperparameters.{name}" if name in hypers else
                     f"options.{name}" if name in options else field)
        refuse(field, message)
    raise AssertionError("unreachable")
