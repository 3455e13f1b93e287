"""Read the one settings table (`RunConfig`'s fields) and generate the Train page's side of it.

Every way a setting enters is generated from `RunConfig.model_fields`: the field's type gives its
kind (`kind`), its `ge`/`le` its bounds (`bounds`), its `Literal` its choices (`choices`), and its
`json_schema_extra` how it shows (`widget` session key, `label`, `step`, `help`) and travels
(`prefix` of a name -> value field in a link: `hp.learning_rate`). This module builds the Train
page's session defaults, the widget arguments, and the two-way map between a `RunConfig` and
the page's session state; `settings.share_link` and `settings.cli_flags` build the URL keys and
the command-line flags from the same functions. Pure: no Streamlit, no TensorFlow.
"""

from __future__ import annotations

import typing
from typing import Any, Literal
from collections.abc import Mapping

from optimizers import registry
from schedules.table import SCHEDULE_SPECS, param_text, parse_param_text, params
from settings.run_config import RunConfig, allowed

# Kinds of field, from the annotation: "int", "float", "choice" (a Literal), "str", "names"
# (list[str]), "mapping" (dict name -> value; `hyperparameters`, `options`, `autotune`), and
# "schedule" (declared with `kind` in the table: `lr_schedule`, a Keras serialized schedule).
KINDS = ("int", "float", "choice", "str", "names", "mapping", "schedule")
CONSTANT = "constant"  # the schedule picker's entry for "no schedule"


def names() -> tuple[str, ...]:
    """Every `RunConfig` field name, in declaration order."""
    return tuple(RunConfig.model_fields)


def extra(field: str) -> dict[str, Any]:
    """The field's `json_schema_extra` (widget key, label, step, help, URL prefix); {} if none.

    Raises:
        KeyError: `field` is not a `RunConfig` field.
    """
    value = RunConfig.model_fields[field].json_schema_extra
    return dict(value) if isinstance(value, dict) else {}


def kind(field: str) -> str:
    """One of `KINDS` for `RunConfig` field `field`.

    Raises:
        KeyError: not a field. TypeError: an annotation no generator knows (add its kind here).
    """
    annotation = RunConfig.model_fields[field].annotation
    origin = typing.get_origin(annotation)
    if extra(field).get("kind") in KINDS:
        return extra(field)["kind"]
    if origin is Literal or extra(field).get("choices") == "registry":
        return "choice"
    if annotation is int:
        return "int"
    if annotation is float:
        return "float"
    if annotation is str:
        return "str"
    if origin is list and typing.get_args(annotation) == (str,):
        return "names"
    if origin is dict:
        return "mapping"
    raise TypeError(f"RunConfig.{field}: no generator knows the type {annotation!r}")


def choices(field: str) -> tuple[str, ...]:
    """The allowed values of a `choice` field (`choices: "registry"`: the registry's names)."""
    if extra(field).get("choices") == "registry":  # read now: plugins join after import
        return tuple(registry.names())
    return tuple(typing.get_args(RunConfig.model_fields[field].annotation))


def bounds(field: str) -> tuple[Any, Any]:
    """(min, max), both included, of an `int` or `float` field (its `ge`/`le`), of its type.

    Raises:
        ValueError: the field does not declare both bounds.
    """
    found = {name: getattr(m, name) for m in RunConfig.model_fields[field].metadata
             for name in ("ge", "le") if hasattr(m, name)}
    if len(found) != 2:
        raise ValueError(f"RunConfig.{field} declares no [ge, le] bounds")
    cast = float if kind(field) == "float" else int
    return cast(found["ge"]), cast(found["le"])


def default(field: str) -> Any:
    """The default value of `field` (a fresh list/dict for factory defaults)."""
    return RunConfig.model_fields[field].get_default(call_default_factory=True)


def prefix(field: str) -> str:
    """The link prefix of a `mapping` field (`hp.`, `opt.`, `autotune.`); "" for others."""
    return extra(field).get("prefix", "")


def label(field: str) -> str:
    """The widget label of `field` (default: the name with spaces)."""
    return extra(field).get("label", field.replace("_", " "))


def help_text(field: str) -> str:
    """`"<help> (allowed: <range>)"`: the tooltip and CLI help of `field`."""
    text = extra(field).get("help", "")
    return f"{text} (allowed: {allowed(field)})" if text else f"allowed: {allowed(field)}"


def number_input_args(field: str) -> dict[str, Any]:
    """Keyword arguments of `st.number_input` for an `int` or `float` field: label, bounds,
    step, key, help (and a `format` showing small floats).

    Raises:
        ValueError: `field` is not an `int`/`float` field with bounds.
    """
    if kind(field) not in ("int", "float"):
        raise ValueError(f"RunConfig.{field} is a {kind(field)}, not a number")
    low, high = bounds(field)
    cast = float if kind(field) == "float" else int
    args = dict(label=label(field), min_value=low, max_value=high,
                step=cast(extra(field).get("step", 1)), key=session_key(field),
                help=help_text(field))
    if cast is float:
        args["format"] = "%.6g"
    return args


def int_fields(group: str = "run") -> tuple[str, ...]:
    """The `int` fields of a Train-page group (`group` in the table, default "run"), in
    declaration order: the page draws one number input for each."""
    return tuple(f for f in names() if kind(f) == "int" and extra(f).get("group", "run") == group)


def param_prefix(field: str) -> str:
    """The link prefix of a schedule field's parameters (`lrs.`); "" for others."""
    return extra(field).get("param_prefix", "")


def session_key(field: str) -> str:
    """The Train page's session-state key of `field` (`widget` in the table, else the name)."""
    return extra(field).get("widget", field)


def schedule_class_key() -> str:
    """Session key of the schedule picker (`constant` or a class name)."""
    return session_key("lr_schedule") + "class"


def schedule_key(class_name: str, param: str) -> str:
    """Session key of one schedule parameter's widget: `lrs_<Class>_<param>`. List parameters
    are held as their link text (`300,600`), the others as values (None = an empty input)."""
    return f"{session_key('lr_schedule')}{class_name}_{param}"


def schedule_session_values(schedule: Mapping[str, Any] | None) -> dict[str, Any]:
    """Session keys -> values showing `schedule` (picker + that class's parameters)."""
    if not schedule:
        return {schedule_class_key(): CONSTANT}
    name = schedule["class_name"]
    out: dict[str, Any] = {schedule_class_key(): name}
    for spec in params(name):
        value = schedule["config"].get(spec.name, spec.default)
        out[schedule_key(name, spec.name)] = (param_text(value) if spec.kind in ("ints", "floats")
                                              else value)
    return out


def schedule_from_session(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The (unvalidated) serialized schedule the session's picker describes; None = constant.

    Raises:
        ScheduleError: a list parameter's text is not comma-separated numbers.
    """
    name = state.get(schedule_class_key(), CONSTANT)
    if name == CONSTANT or name not in SCHEDULE_SPECS:
        return None if name == CONSTANT else {"class_name": name, "config": {}}
    config: dict[str, Any] = {}
    for spec in params(name):
        key = schedule_key(name, spec.name)
        if key not in state:
            continue  # not shown yet: the spec's default
        value = state[key]
        if spec.kind in ("ints", "floats") and isinstance(value, str):
            value = parse_param_text(f"lr_schedule.config.{spec.name}", name, spec.name, value)
        elif spec.kind == "int" and value is not None:
            value = int(value)
        elif spec.kind == "float" and value is not None:
            value = float(value)
        config[spec.name] = value
    return {"class_name": name, "config": config}


def hyper_prefix(optimizer: str, options: Mapping[str, Any]) -> str:
    """Key prefix of the hyperparameter widgets: `hp_<optimizer>_[<inner>_]`."""
    inner = options.get("inner")
    base = f"{session_key('hyperparameters')}{optimizer}_"
    return f"{base}{inner}_" if inner else base


def option_prefix(optimizer: str) -> str:
    """Key prefix of the option widgets: `opt_<optimizer>_`."""
    return f"{session_key('options')}{optimizer}_"


def names_key(optimizer: str) -> str:
    """Session key of the followed-hyperparameters multiselect of `optimizer`."""
    return f"hg_names_{optimizer}"


def session_values(config: RunConfig) -> dict[str, Any]:
    """Train-page session keys -> values that show `config` (every field has at least one key).

    `device` "" shows as "auto"; `hypergradients` is the follow checkbox plus the per-optimizer
    multiselect; `hyperparameters` and `options` are one widget per name (`hyper_prefix`,
    `option_prefix`); `autotune` is kept under a non-widget key. `config_from_session` reads
    them back.
    """
    out: dict[str, Any] = {}
    for field in names():
        value = getattr(config, field)
        if field == "hyperparameters":
            out.update({hyper_prefix(config.optimizer, config.options) + k: v
                        for k, v in value.items()})
        elif field == "options":
            out.update({option_prefix(config.optimizer) + k: v for k, v in value.items()})
        elif field == "hypergradients":
            out[session_key(field)] = bool(value)
            if value:
                out[names_key(config.optimizer)] = list(value)
        elif field == "device":
            out[session_key(field)] = value or "auto"
        elif kind(field) == "schedule":
            out.update(schedule_session_values(value))
        else:
            out[session_key(field)] = value.copy() if isinstance(value, (dict, list)) else value
    return out


def page_default_fields() -> tuple[str, ...]:
    """The fields whose Train-page default differs from `RunConfig()`'s (`page_default` in the
    table): `("label_noise",)`."""
    return tuple(field for field in names() if "page_default" in extra(field))


def page_defaults() -> RunConfig:
    """The Train page's initial setup: `RunConfig()` with each field's `page_default` from the
    table where one is declared (`label_noise` 0.3: a default setup where optimizers keep
    differing, README "Default setup"); the command line and config files keep `RunConfig()`."""
    return RunConfig(**{field: extra(field)["page_default"] for field in page_default_fields()})


def session_defaults() -> dict[str, Any]:
    """`session_values(page_defaults())`: the Train page's initial setup, from the table."""
    return session_values(page_defaults())


def config_from_session(state: Mapping[str, Any]) -> RunConfig:
    """The `RunConfig` the Train page's session state describes (inverse of `session_values`).

    Hyperparameters and options are read for the chosen optimizer only; followed
    hyper-gradients, the reverse horizon and auto-tuning only when "follow" is on, and
    auto-tuning only for followed names; a field with no key in `state` takes its default.

    Raises:
        pydantic.ValidationError: a value `RunConfig` refuses. KeyError, ValueError: the
            optimizer or its options are unknown to the registry (`registry.specs`).
    """
    optimizer = state[session_key("optimizer")]
    options = {k: state[option_prefix(optimizer) + k] for k in registry.option_defaults(optimizer)}
    specs = registry.specs(optimizer, options)
    follow = bool(state.get(session_key("hypergradients"), False))
    values: dict[str, Any] = {"optimizer": optimizer}
    for field in names():
        key = session_key(field)
        if field == "optimizer":
            continue
        if field == "hyperparameters":
            prefix_ = hyper_prefix(optimizer, options)
            values[field] = {s.name: float(state[prefix_ + s.name]) for s in specs
                             if prefix_ + s.name in state}
        elif field == "options":
            values[field] = options
        elif field == "hypergradients":
            values[field] = (list(state.get(names_key(optimizer), [s.name for s in specs]))
                             if follow else [])
        elif field == "device":
            values[field] = "" if state.get(key, "auto") == "auto" else state[key]
        elif kind(field) == "schedule":
            values[field] = schedule_from_session(state)
        elif key not in state:
            continue  # not on the page (yet): the table's default
        elif kind(field) == "int":
            values[field] = int(state[key])
        elif kind(field) == "float":
            values[field] = float(state[key])
        else:
            values[field] = state[key]
    if not follow:
        values["reverse_horizon"] = 0
    values["autotune"] = {k: float(v) for k, v in dict(values.get("autotune", {})).items()
                          if k in values["hypergradients"]}
    return RunConfig(**values)
