"""Import a run config from JSON: the only way a file from outside becomes a `RunConfig`.

Accepted documents (a JSON object, at most `MAX_BYTES` bytes, UTF-8):

1. our export (`runs.io.export.export_config`): `{"format": "optimizer-lab/run-config",
   "run_config": {...RunConfig...}, "optimizer": {"name", "class_name", "config"}, ...}`;
   only `run_config` is used, `optimizer.class_name` is checked against the registry;
2. a bare `RunConfig` dict: `{"optimizer": "adam", "hyperparameters": {...}, "dataset": ...}`;
3. a Keras-style optimizer entry: `{"class_name": "Adam", "config": {"learning_rate": ...}}`,
   optionally with RunConfig fields beside it (`dataset`, `steps`, ...). The class name must be
   a registered optimizer's class or registry name; the config's hyperparameters and options
   are checked against its specs. A `learning_rate` that is a serialized schedule
   (`{"class_name": "ExponentialDecay", "config": {...}}`, as Keras writes one) becomes the
   run's `lr_schedule`, and a non-zero `decay` the run's `decay`.

Safety: the text is parsed with `json.loads` only (no pickle, no YAML tags); names are looked
up in `optimizers.registry` and nothing named in the file is ever imported or evaluated: a
`"class_name": "os.system"` is refused like any unknown name. `NaN`, `Infinity` and numbers
beyond a float's range (`1e400`, a 400-digit integer) are refused, naming the field that holds
them and its allowed range. A key repeated in one JSON object (at any depth) is refused naming
its path: `json.loads` alone would keep the last value silently.

Every refusal raises `ConfigImportError` whose message names the field, e.g.
`hyperparameters.learning_rate: learning_rate=20.0 refused: ... must be a float in (0, 10]`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from optimizers import registry
from settings.decode import SettingError, Source, decode, not_registered
from settings.run_config import RunConfig

MAX_BYTES = 64 * 1024
MAX_DIGITS = 300  # a longer integer literal is beyond a float's range (1.8e308)
MAX_DEPTH = 16  # an export nests 4 levels; deeper is no config of ours
EXPORT_FORMAT = "optimizer-lab/run-config"
EXPORT_VERSIONS = (1,)  # `runs.io.export.FORMAT_VERSION`s this reader understands
# Keys of a tf_keras OptimizerV2 get_config() that carry no lab setting; accepted when neutral.
NEUTRAL_KERAS_KEYS = {"name": None, "is_legacy_optimizer": None, "decay": 0.0, "clipnorm": None,
                      "clipvalue": None, "global_clipnorm": None}


class ConfigImportError(SettingError):
    """A config file was refused. `field` names the offending field ("" for the whole file)."""


FILE = Source(noun="config file", key=lambda path: path, error=ConfigImportError)


class _Duplicated(dict[str, Any]):
    """A JSON object that named `duplicate` twice (kept to report it with its full path)."""

    duplicate = ""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of repeated keys: `{"optimizer": "os.system", "optimizer":
    # "adam"}` would read as adam. Mark the object; `_walk` refuses it naming the key's path.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen and not isinstance(seen, _Duplicated):
            seen = _Duplicated(seen)
            seen.duplicate = key
        seen[key] = value
    return seen


def _parse_int(text: str) -> int | float:
    # int() of a 5,000-digit string raises ValueError (CPython's digit limit) and float() of a
    # 400-digit int OverflowError: past what a float holds the value becomes inf, refused below.
    return int(text) if len(text) <= MAX_DIGITS else math.inf


def _walk(value: Any, path: str, depth: int = 0) -> None:
    """Refuse nesting deeper than `MAX_DEPTH` and any object with a repeated key."""
    if depth > MAX_DEPTH:
        raise ConfigImportError(path, f"nested too deeply: a config file nests at most "
                                      f"{MAX_DEPTH} levels")
    if isinstance(value, _Duplicated):
        where = f"{path}.{value.duplicate}" if path else value.duplicate
        raise ConfigImportError(where, f"duplicate key {value.duplicate!r} refused: a JSON "
                                       "object names each key once (which value was meant "
                                       "cannot be told)")
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        _walk(item, f"{path}.{key}" if path else str(key), depth + 1)


def _class_names() -> dict[str, str]:
    """Registered class name or registry name -> registry name."""
    # from the catalog (no class import, no TensorFlow); first wins: a plugin class named like a
    # built-in one cannot take over its name
    return registry.class_names()


def _not_registered(field: str, value: Any) -> ConfigImportError:
    return ConfigImportError(field, not_registered(value, FILE))


def _registry_name(field: str, value: Any) -> str:
    known = _class_names()
    if not isinstance(value, str) or value not in known:
        raise _not_registered(field, value)
    return known[value]


def parse_text(data: bytes | str) -> dict[str, Any]:
    """Parse the JSON text of a config file into a dict (size, encoding and syntax checked).

    Raises:
        ConfigImportError: larger than `MAX_BYTES`, empty, not UTF-8 (a UTF-8 byte-order mark
            is allowed), malformed JSON (line and column given), nested deeper than
            `MAX_DEPTH`, a key repeated in one object (at any depth; the field is the key's
            dotted path), or not a JSON object. NaN, Infinity and out-of-range numbers parse to
            float NaN/inf here: `config_from_dict` refuses them naming their field.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:  # before decoding or parsing anything
        raise ConfigImportError(
            "", f"file refused: {len(raw):,} bytes, a config file may hold at most "
                f"{MAX_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8-sig")  # Windows editors write a byte-order mark
    except UnicodeDecodeError as error:
        raise ConfigImportError("", f"file refused: not UTF-8 text ({error.reason} at byte "
                                    f"{error.start})") from None
    if not text.strip():
        raise ConfigImportError("", "file refused: it is empty; a config file holds one JSON "
                                    "object")
    try:
        document = json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise ConfigImportError(
            "", f"malformed JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise ConfigImportError("", "malformed JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise ConfigImportError("", f"a config file must hold a JSON object, not a "
                                    f"{type(document).__name__}")
    _walk(document, "")
    return dict(document)


def _from_keras_entry(document: dict[str, Any]) -> dict[str, Any]:
    """A RunConfig dict from `{"class_name", "config", ...RunConfig fields}`."""
    name = _registry_name("class_name", document["class_name"])
    for key in ("optimizer", "hyperparameters", "options"):
        if key in document:  # two sources for one setting: refuse rather than pick one
            raise ConfigImportError(key, f"refused beside class_name={document['class_name']!r}: "
                                         "a Keras-style entry sets them in its config")
    config = document.get("config", {})
    if not isinstance(config, dict):
        raise ConfigImportError("config", f"must be a JSON object, not {type(config).__name__}")
    options = registry.option_defaults(name)
    hypers: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    schedule: dict[str, Any] = {}
    for key, value in config.items():
        if key in options:
            chosen[key] = value
        elif key == "learning_rate" and isinstance(value, dict):  # Keras's serialized schedule
            schedule["lr_schedule"] = value
        elif key == "decay":  # OptimizerV2's legacy time-based decay: a run setting
            schedule["decay"] = value
        elif key in NEUTRAL_KERAS_KEYS:
            if key != "name" and key != "is_legacy_optimizer" and value != NEUTRAL_KERAS_KEYS[key]:
                raise ConfigImportError(f"config.{key}", f"{value!r} refused: the lab's "
                                                          f"optimizers do not take {key}")
        else:
            hypers[key] = value
    rest = {k: v for k, v in document.items() if k not in ("class_name", "config")}
    for key in schedule:
        if key in rest:  # two sources for one setting
            source = "learning_rate" if key == "lr_schedule" else key
            raise ConfigImportError(key, f"refused beside config.{source}: give it once")
    return {**rest, **schedule, "optimizer": name, "options": chosen, "hyperparameters": hypers}


def _from_export(document: dict[str, Any]) -> dict[str, Any]:
    """The `run_config` of an export document, after checking its format and optimizer entry."""
    if "format" in document and document["format"] != EXPORT_FORMAT:
        raise ConfigImportError("format", f"{document['format']!r} refused: allowed "
                                          f"{EXPORT_FORMAT!r}")
    version = document.get("format_version", EXPORT_VERSIONS[0])
    if type(version) is not int or version not in EXPORT_VERSIONS:
        raise ConfigImportError("format_version", f"{version!r} refused: this version reads "
                                                  f"format_version {EXPORT_VERSIONS}")
    candidate = document.get("run_config")
    if not isinstance(candidate, dict):
        raise ConfigImportError("run_config", "missing or not a JSON object")
    stated = _registry_name("run_config.optimizer",
                            candidate.get("optimizer", registry.DEFAULT_OPTIMIZER))
    optimizer = document.get("optimizer", {})
    if not isinstance(optimizer, dict):
        raise ConfigImportError("optimizer", f"must be a JSON object {{name, class_name, "
                                             f"config}}, not {type(optimizer).__name__}")
    for key in ("name", "class_name"):  # informational, but they must agree with run_config
        if key in optimizer and _registry_name(f"optimizer.{key}", optimizer[key]) != stated:
            raise ConfigImportError(
                f"optimizer.{key}", f"{optimizer[key]!r} does not match "
                                    f"run_config.optimizer={candidate.get('optimizer')!r}")
    return dict(candidate)


def config_from_dict(document: dict[str, Any]) -> RunConfig:
    """A validated `RunConfig` from a parsed document (any of the three accepted shapes).

    Raises:
        ConfigImportError: unknown optimizer or class name (also a wrapper's `options.inner`),
            unknown or out-of-range hyperparameter, unknown option or field, wrong type
            (strict: `"steps": "500"` is refused, an int is accepted for a float), incompatible
            dataset/model; for an export, another `format` or `format_version`, or an
            `optimizer` entry that disagrees with `run_config`; for a Keras-style entry,
            `optimizer`/`hyperparameters`/`options` beside `class_name`.
    """
    if not isinstance(document, dict):
        raise ConfigImportError("", f"a config must be a JSON object, not a "
                                    f"{type(document).__name__}")
    if document.get("format") == EXPORT_FORMAT or "run_config" in document:
        candidate = _from_export(document)
    elif "class_name" in document:
        candidate = _from_keras_entry(document)
    else:
        candidate = dict(document)
    optimizer = candidate.get("optimizer")
    if isinstance(optimizer, str) and optimizer in _class_names():  # `"SGD"` as well as `"sgd"`
        candidate["optimizer"] = _class_names()[optimizer]
    return decode(candidate, FILE)


def parse_config(data: bytes | str) -> RunConfig:
    """`config_from_dict(parse_text(data))`: the one entry for an uploaded or given file."""
    return config_from_dict(parse_text(data))


