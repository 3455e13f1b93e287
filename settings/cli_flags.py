"""Command-line flags generated from the settings table: one flag per `RunConfig` field, and one
per hyperparameter (`--learning-rate`, from every registered `HyperSpec`) and option
(`--amsgrad`, `--inner`, from the optimizers' options).

By the field's kind (`settings.fields.kind`): an int field is `--steps N` (`type=int`, its range
in the help), a choice `--dtype {float32,float64}` (argparse `choices`), a string `--device TEXT`,
a list `--hypergradients NAME [NAME ...]`, a name -> value field other than hyperparameters and
options `--autotune NAME=X` (repeatable), a float `--decay X`, the schedule `--lr-schedule JSON`
(Keras's serialized form, read with `json.loads` only; `constant` or `null` = none).
`values_from_args` turns the parsed flags back into a
`RunConfig`-shaped dict for `settings.decode.decode(values, COMMAND_LINE)`. Pure argparse: no
Streamlit, no TensorFlow of its own.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from optimizers import registry
from settings import fields
from settings.decode import SettingError, Source
from settings.run_config import RunConfig

EXPANDED = ("hyperparameters", "options")  # one flag per name, not one per field


class FlagError(SettingError):
    """A command-line setting was refused; `field` is `argument --flag` (or `config`)."""


def flag(name: str) -> str:
    """`learning_rate` -> `--learning-rate`."""
    return "--" + name.replace("_", "-")


def flag_key(path: str) -> str:
    """A dotted `RunConfig` path -> how argparse names it (`argument --beta-1`)."""
    top, _, rest = path.partition(".")
    if top in EXPANDED and rest:
        return f"argument {flag(rest)}"
    if top == "options":
        return "optimizer options"
    if top in RunConfig.model_fields:
        return f"argument {flag(top)}"
    return path


COMMAND_LINE = Source(noun="command line", key=flag_key, error=FlagError, label=flag)


def hyper_specs() -> dict[str, Any]:
    """Every hyperparameter name any registered optimizer (or wrapped rule) takes -> a spec."""
    out: dict[str, Any] = {}
    for name in registry.names():
        option_sets: list[dict[str, Any]] = [{}]
        if "inner" in registry.option_defaults(name):
            option_sets += [{"inner": inner} for inner in registry.names() if inner != name]
        for options in option_sets:
            try:
                specs = registry.specs(name, options)
            except ValueError:  # e.g. a wrapper around a wrapper
                continue
            for spec in specs:
                out.setdefault(spec.name, spec)
    return out


def option_types() -> dict[str, type]:
    """Every option name any optimizer takes -> the type of its default."""
    out: dict[str, type] = {}
    for name in registry.names():
        for key, default in registry.option_defaults(name).items():
            out.setdefault(key, type(default))
    return out


def _pair(text: str) -> tuple[str, float]:
    name, sep, number = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=X")
    try:
        return name, float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{number!r} is not a number (in {text!r})") from None


def _schedule(text: str) -> dict[str, Any] | None:
    """`--lr-schedule` text: `constant`/`null`, or a JSON object (validated by `RunConfig`)."""
    if text.strip().lower() in ("constant", "null", "none"):
        return None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}); give e.g. "
                                         '\'{"class_name": "ExponentialDecay", "config": '
                                         '{"decay_steps": 100}}\' or constant') from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object or constant, not {text[:40]!r}")
    return value


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Add one flag per `RunConfig` field, hyperparameter and option (all default to None =
    not given).

    Raises:
        TypeError: a field of a kind no flag is generated for (`settings.fields.kind`).
    """
    for field in fields.names():
        if field in EXPANDED:
            continue
        kind = fields.kind(field)
        common: dict[str, Any] = dict(dest=field, default=None, help=fields.help_text(field))
        if kind == "int":
            parser.add_argument(flag(field), type=int, metavar="N", **common)
        elif kind == "float":
            parser.add_argument(flag(field), type=float, metavar="X", **common)
        elif kind == "schedule":
            parser.add_argument(flag(field), type=_schedule, metavar="JSON", **common)
        elif kind == "choice":
            parser.add_argument(flag(field), choices=fields.choices(field), **common)
        elif kind == "str":
            parser.add_argument(flag(field), metavar="TEXT", **common)
        elif kind == "names":
            parser.add_argument(flag(field), nargs="+", metavar="NAME", **common)
        else:
            parser.add_argument(flag(field), type=_pair, action="append", metavar="NAME=X",
                                **common)
    group = parser.add_argument_group("hyperparameters (checked against the optimizer's specs)")
    for name, spec in hyper_specs().items():
        group.add_argument(flag(name), dest=f"hp_{name}", type=float, default=None,
                           metavar="X", help=f"{spec.help}; {spec.allowed()}")
    group = parser.add_argument_group("optimizer options")
    for name, option_type in option_types().items():
        if option_type is bool:
            group.add_argument(flag(name), dest=f"opt_{name}", default=None,
                               action=argparse.BooleanOptionalAction)
        elif name == "inner":
            group.add_argument(flag(name), dest=f"opt_{name}", default=None,
                               choices=registry.names(), help="the wrapped optimizer")
        else:
            group.add_argument(flag(name), dest=f"opt_{name}", default=None, type=option_type,
                               metavar="N" if option_type is int else "X")


def values_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line as a `RunConfig`-shaped dict (flags not given
    are absent; `hyperparameters` and `options` hold only the names given)."""
    out: dict[str, Any] = {}
    for field in fields.names():
        if field in EXPANDED:
            continue
        value = getattr(args, field)
        if value is None:  # not given (or `--lr-schedule constant`: the default)
            continue
        out[field] = dict(value) if fields.kind(field) == "mapping" else value
    hypers = {n: getattr(args, f"hp_{n}") for n in hyper_specs()}
    options = {n: getattr(args, f"opt_{n}") for n in option_types()}
    out["hyperparameters"] = {k: v for k, v in hypers.items() if v is not None}
    out["options"] = {k: v for k, v in options.items() if v is not None}
    return out
