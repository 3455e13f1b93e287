"""Share a run setup through the URL: `RunConfig` <-> a flat dict of strings (`st.query_params`).

Pure functions, no Streamlit: the Train page writes `to_query_params(config)` into
`st.query_params` and, on a fresh session, reads `from_query_params(st.query_params)` back.

Keys are generated from the settings table (`settings.fields`), one per `RunConfig` field, so a
link carries every field (all values are strings):
    a scalar field under its own name (`steps`, `dtype`, `reverse_horizon`, ...; `device`
    omitted when ""); a list field comma-joined (`hypergradients=learning_rate,beta_1`, omitted
    when empty); a name -> value field one key per name under its table prefix:
    `hp.<name>` (`repr` of the float, so it round-trips exactly), `opt.<name>` (`true`/`false`
    for bools), `autotune.<name>`; a float field (`decay`) as its `repr`; the schedule
    (`lr_schedule`) as its class name plus one key per parameter under the table's
    `param_prefix`: `lr_schedule=CosineDecay&lrs.decay_steps=1000&lrs.warmup_target=0.1`
    (lists comma-joined: `lrs.boundaries=300,600`; a null parameter omitted).

Nothing in the URL is evaluated: numbers must be plain ASCII decimals (`INT_SYNTAX`,
`FLOAT_SYNTAX`: no `1_000`, no `0x10`, no `nan`) before `int()`/`float()` read them, booleans
are `true/false`, names are checked against the registry and `RunConfig` by the one decoder
(`settings.decode`). Keys outside this scheme (other pages' parameters) are ignored; a setup key
without `optimizer` is refused.
"""

from __future__ import annotations

import math
import re
from typing import Any
from collections.abc import Mapping

from optimizers import registry
from settings import fields
from settings.decode import SettingError, Source, decode
from schedules.table import SCHEDULE_SPECS, ScheduleError, param_text, parse_param_text
from settings.run_config import RunConfig, allowed

MAX_VALUE_CHARS = 64
MAX_LIST_CHARS = 256  # a schedule's list (17 values of up to 15 characters)
# Python's int()/float() also take "1_000", " 7 ", Unicode digits and "nan": a link is stricter.
INT_SYNTAX = re.compile(r"[+-]?[0-9]+")
FLOAT_SYNTAX = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# a hyperparameter name, or `lr_schedule.<param>` (a followed schedule parameter)
NAME_SYNTAX = re.compile(r"(lr_schedule\.)?[A-Za-z_][A-Za-z0-9_]{0,63}")
NON_FINITE = ("inf", "infinity", "nan")


class QueryParamsError(SettingError):
    """A shared link was refused; `field` names the parameter (e.g. `hp.learning_rate`)."""


def url_key(path: str) -> str:
    """A dotted `RunConfig` path -> its link key (`hyperparameters.beta_1` -> `hp.beta_1`)."""
    top, _, rest = path.partition(".")
    if top in RunConfig.model_fields and fields.prefix(top):
        return fields.prefix(top) + rest if rest else fields.prefix(top).rstrip(".")
    if top in RunConfig.model_fields and fields.param_prefix(top) and rest.startswith("config."):
        return fields.param_prefix(top) + rest.removeprefix("config.")
    return path


LINK = Source(noun="link", key=url_key, error=QueryParamsError)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_query_params(config: RunConfig) -> dict[str, str]:
    """The flat string dict of `config`: every field (see the module docstring for the keys)."""
    out: dict[str, str] = {}
    for field in fields.names():
        value = getattr(config, field)
        kind = fields.kind(field)
        if kind == "mapping":
            out.update({fields.prefix(field) + k: _text(float(v) if field != "options" else v)
                        for k, v in value.items()})
        elif kind == "names":
            if value:
                out[field] = ",".join(value)
        elif kind == "schedule":
            if value:
                out[field] = value["class_name"]
                out.update({fields.param_prefix(field) + k: param_text(v)
                            for k, v in value["config"].items() if v is not None})
        elif value != "":
            out[field] = _text(value)
    return out


def _one(params: Mapping[str, Any], key: str, limit: int = MAX_VALUE_CHARS) -> str:
    value = params[key]
    if isinstance(value, (list, tuple)):  # a repeated key: take the last, like st.query_params
        value = value[-1] if value else ""
    value = str(value)
    if len(value) > limit:
        raise QueryParamsError(key, f"value refused: {len(value)} characters, at most "
                                    f"{limit}")
    return value


def _schedule(params: Mapping[str, Any], field: str) -> dict[str, Any] | None:
    """The `lr_schedule` a link holds (class name + `lrs.` keys), typed but not yet validated
    (`RunConfig` does that, naming `lrs.<param>`)."""
    prefix = fields.param_prefix(field)
    keys = [k for k in params if k.startswith(prefix)]
    if field not in params:
        if keys:
            raise QueryParamsError(keys[0], f"refused without {field}=<class name>: one of "
                                            f"{', '.join(SCHEDULE_SPECS)}")
        return None
    name = _one(params, field)
    if name not in SCHEDULE_SPECS:
        raise QueryParamsError(field, f"{name!r} refused: allowed {fields.CONSTANT} (omit the "
                                      f"key) or one of {', '.join(SCHEDULE_SPECS)}")
    config = {}
    for key in keys:
        try:
            config[key[len(prefix):]] = parse_param_text(
                key, name, key[len(prefix):], _one(params, key, MAX_LIST_CHARS))
        except ScheduleError as error:
            raise QueryParamsError(key, str(error)) from None
    return {"class_name": name, "config": config}


def _int(key: str, text: str, allowed_text: str = "an integer") -> int:
    if not INT_SYNTAX.fullmatch(text):
        raise QueryParamsError(key, f"{text!r} is not an integer; allowed: {allowed_text}")
    return int(text)


def _float(key: str, text: str, allowed_text: str = "a finite decimal number") -> float:
    finite = FLOAT_SYNTAX.fullmatch(text) and math.isfinite(float(text))  # 1e400 is not
    if not finite:
        infinite = FLOAT_SYNTAX.fullmatch(text) or text.lower().lstrip("+-") in NON_FINITE
        problem = "refused: must be finite" if infinite else "is not a number"
        raise QueryParamsError(key, f"{text!r} {problem}; allowed: {allowed_text}")
    return float(text)


def _option(key: str, text: str, default: Any) -> Any:
    if default is None:  # not an option of this optimizer: the decoder refuses its name
        return text
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise QueryParamsError(key, f"{text!r} refused: must be true or false")
        return text.lower() == "true"
    if isinstance(default, int):
        return _int(key, text)
    if isinstance(default, float):
        return _float(key, text)
    return text


def _is_setup_key(key: str) -> bool:
    prefixes = tuple(p for f in fields.names() for p in (fields.prefix(f), fields.param_prefix(f))
                     if p)
    return key in RunConfig.model_fields or key.startswith(prefixes)


def _names(key: str, text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    for name in names:
        if not NAME_SYNTAX.fullmatch(name):
            raise QueryParamsError(key, f"{name!r} refused: not a name; allowed: "
                                        f"{allowed(key)}, comma-separated")
    return names


def _spec_ranges(optimizer: str, options: dict[str, Any]) -> dict[str, str]:
    """Hyperparameter name -> allowed range text, for parse messages ({} if not known yet)."""
    try:
        return {s.name: s.allowed() for s in registry.specs(optimizer, options)}
    except (KeyError, ValueError):
        return {}  # the decoder names the refused optimizer or option


def from_query_params(params: Mapping[str, Any]) -> RunConfig | None:
    """The `RunConfig` a shared link holds, or None when it holds no setup (`optimizer` absent).

    Args:
        params: `st.query_params` or any mapping of str -> str (or list of str).

    Raises:
        QueryParamsError: a value that does not parse, an unknown optimizer, option or
            hyperparameter, setup keys without `optimizer`, or a value `RunConfig` refuses
            (message names the parameter and what it allows).
    """
    if "optimizer" not in params:
        if any(_is_setup_key(key) for key in params):
            raise QueryParamsError("optimizer", f"missing: a shared setup names its optimizer, "
                                                f"one of {', '.join(registry.names())}")
        return None
    values: dict[str, Any] = {}
    for field in fields.names():  # the scalar and list fields, by their kind
        kind = fields.kind(field)
        if kind == "schedule":
            values[field] = _schedule(params, field)
            continue
        if kind == "mapping" or field not in params:
            continue
        text = _one(params, field)
        values[field] = (_int(field, text, allowed(field)) if kind == "int" else
                         _float(field, text, allowed(field)) if kind == "float" else
                         _names(field, text) if kind == "names" else text)
    optimizer = values["optimizer"]
    defaults = registry.option_defaults(optimizer) if optimizer in registry.OPTIMIZERS else {}
    options_prefix = fields.prefix("options")
    options = {key[len(options_prefix):]: _option(key, _one(params, key),
                                                  defaults.get(key[len(options_prefix):]))
               for key in params if key.startswith(options_prefix)}
    ranges = _spec_ranges(optimizer, options)
    for field in fields.names():
        prefix = fields.prefix(field)
        if not prefix or field == "options":
            continue
        values[field] = {}
        for key in params:
            if key.startswith(prefix):
                name = key[len(prefix):]
                values[field][name] = _float(key, _one(params, key),
                                             ranges.get(name, "a finite decimal number")
                                             if field == "hyperparameters" else allowed(field))
    values["options"] = options
    return decode(values, LINK)


def session_values(config: RunConfig) -> dict[str, Any]:
    """Train-page session keys -> values for `config` (`settings.fields.session_values`)."""
    return fields.session_values(config)
