"""Import a run config from JSON: the only way a file from outside becomes a `RunConfig`.

Accepted documents (a JSON object, at most `MAX_BYTES` bytes, UTF-8):

1. our export (`training.export.export_config`): `{"format": "optimizer-lab/run-config",
   "run_config": {...RunConfig...}, "optimizer": {"name", "class_name", "config"}, ...}`;
   only `run_config` is used, `optimizer.class_name` is checked against the registry;
2. a bare `RunConfig` dict: `{"optimizer": "adam", "hyperparameters": {...}, "dataset": ...}`;
3. a Keras-style optimizer entry: `{"class_name": "Adam", "config": {"learning_rate": ...}}`,
   optionally with RunConfig fields beside it (`dataset`, `steps`, ...). The class name must be
   a registered optimizer's class or registry name; the config's hyperparameters and options
   are checked against its specs.

Safety: the text is parsed with `json.loads` only (no pickle, no YAML tags); names are looked
up in `optimizers.registry` and nothing named in the file is ever imported or evaluated: a
`"class_name": "os.system"` is refused like any unknown name. NaN and Infinity are refused.

Every refusal raises `ConfigImportError` whose message names the field, e.g.
`hyperparameters.learning_rate: learning_rate=20.0 refused: ... must be a float in (0, 10]`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic

from optimizers import registry
from training.config import RunConfig

MAX_BYTES = 64 * 1024
EXPORT_FORMAT = "optimizer-lab/run-config"
# Keys of a tf_keras OptimizerV2 get_config() that carry no lab setting; accepted when neutral.
NEUTRAL_KERAS_KEYS = {"name": None, "is_legacy_optimizer": None, "decay": 0.0, "clipnorm": None,
                      "clipvalue": None, "global_clipnorm": None}


class ConfigImportError(ValueError):
    """A config file was refused. `field` names the offending field ("" for the whole file)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


def _refuse_constant(name: str) -> float:
    raise ConfigImportError("", f"{name} is not allowed in a config file (numbers must be finite)")


def _class_names() -> dict[str, str]:
    """Registered class name or registry name -> registry name."""
    out = {cls.__name__: name for name, cls in registry.OPTIMIZERS.items()}
    out.update({name: name for name in registry.OPTIMIZERS})
    return out


def _registry_name(field: str, value: Any) -> str:
    known = _class_names()
    if not isinstance(value, str) or value not in known:
        raise ConfigImportError(
            field, f"{value!r} is not a registered optimizer (nothing named in a config file is "
                   f"imported or evaluated); known: {', '.join(registry.names())}")
    return known[value]


def _pydantic_message(error: pydantic.ValidationError) -> ConfigImportError:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    if not field:  # a model-level check: its message starts with `<field>=`
        match = re.match(r"(\w+)=", message)
        field = match.group(1) if match and match.group(1) in RunConfig.model_fields else "config"
    elif first["type"] != "value_error":
        message = f"{message} (got {first['input']!r})"
    return ConfigImportError(field, message)


def parse_text(data: bytes | str) -> dict[str, Any]:
    """Parse the JSON text of a config file into a dict (size, encoding and syntax checked).

    Raises:
        ConfigImportError: larger than `MAX_BYTES`, not UTF-8, malformed JSON (line and column
            given), NaN/Infinity, or not a JSON object.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:
        raise ConfigImportError(
            "", f"file refused: {len(raw):,} bytes, a config file may hold at most "
                f"{MAX_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigImportError("", f"file refused: not UTF-8 text ({error.reason} at byte "
                                    f"{error.start})") from None
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ConfigImportError(
            "", f"malformed JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise ConfigImportError("", "malformed JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise ConfigImportError("", f"a config file must hold a JSON object, not a "
                                    f"{type(document).__name__}")
    return document


def _from_keras_entry(document: dict[str, Any]) -> dict[str, Any]:
    """A RunConfig dict from `{"class_name", "config", ...RunConfig fields}`."""
    name = _registry_name("class_name", document["class_name"])
    config = document.get("config", {})
    if not isinstance(config, dict):
        raise ConfigImportError("config", f"must be a JSON object, not {type(config).__name__}")
    options = registry.option_defaults(name)
    hypers: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    for key, value in config.items():
        if key in options:
            chosen[key] = value
        elif key in NEUTRAL_KERAS_KEYS:
            if key != "name" and key != "is_legacy_optimizer" and value != NEUTRAL_KERAS_KEYS[key]:
                raise ConfigImportError(f"config.{key}", f"{value!r} refused: the lab's "
                                                          f"optimizers do not take {key}")
        else:
            hypers[key] = value
    rest = {k: v for k, v in document.items() if k not in ("class_name", "config")}
    return {**rest, "optimizer": name, "options": chosen, "hyperparameters": hypers}


def _check_hypers_first(candidate: dict[str, Any]) -> None:
    """Name the hyperparameter field precisely (pydantic would report `config` for these)."""
    hypers = candidate.get("hyperparameters", {})
    if not isinstance(hypers, dict):
        raise ConfigImportError("hyperparameters", f"must be a JSON object of name -> number, "
                                                   f"not {type(hypers).__name__}")
    options = candidate.get("options", {})
    if not isinstance(options, dict):
        raise ConfigImportError("options", f"must be a JSON object, not {type(options).__name__}")
    name = candidate.get("optimizer", registry.DEFAULT_OPTIMIZER)
    name = _registry_name("optimizer", name)
    candidate["optimizer"] = name
    try:
        checked = registry.validate_options(name, dict(options))
    except (KeyError, ValueError) as error:
        key = next((k for k in options if f"{k!r}" in str(error) or f"{k}=" in str(error)), "")
        raise ConfigImportError(f"options.{key}" if key else "options",
                                error.args[0]) from None
    specs = {s.name: s for s in registry.specs(name, checked)}
    for key, value in hypers.items():
        if key not in specs:
            raise ConfigImportError(
                f"hyperparameters.{key}",
                f"unknown hyperparameter for {name}; it has {', '.join(specs)}")
        try:
            specs[key].validate(value)
        except ValueError as error:
            raise ConfigImportError(f"hyperparameters.{key}", str(error)) from None


def config_from_dict(document: dict[str, Any]) -> RunConfig:
    """A validated `RunConfig` from a parsed document (any of the three accepted shapes).

    Raises:
        ConfigImportError: unknown optimizer or class name, unknown or out-of-range
            hyperparameter, unknown option or field, wrong type (strict: `"steps": "500"` is
            refused, an int is accepted for a float), incompatible dataset/model.
    """
    if document.get("format") == EXPORT_FORMAT or "run_config" in document:
        candidate = document.get("run_config")
        if not isinstance(candidate, dict):
            raise ConfigImportError("run_config", "missing or not a JSON object")
        optimizer = document.get("optimizer")
        if isinstance(optimizer, dict) and "class_name" in optimizer:
            name = _registry_name("optimizer.class_name", optimizer["class_name"])
            if name != _registry_name("run_config.optimizer", candidate.get("optimizer")):
                raise ConfigImportError(
                    "optimizer.class_name",
                    f"{optimizer['class_name']!r} does not match "
                    f"run_config.optimizer={candidate.get('optimizer')!r}")
        candidate = dict(candidate)
    elif "class_name" in document:
        candidate = _from_keras_entry(document)
    else:
        candidate = dict(document)
    _check_hypers_first(candidate)
    try:
        return RunConfig.model_validate(candidate, strict=True)
    except pydantic.ValidationError as error:
        raise _pydantic_message(error) from None


def parse_config(data: bytes | str) -> RunConfig:
    """`config_from_dict(parse_text(data))`: the one entry for an uploaded or given file."""
    return config_from_dict(parse_text(data))


def load_config(path: str) -> RunConfig:
    """Read and parse a config file (at most `MAX_BYTES` bytes are read).

    Raises:
        ConfigImportError: as `parse_config`; also when the file is larger than `MAX_BYTES`.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    return parse_config(data)
