"""Widget groups generated from `HyperSpec`s and from an optimizer's plain options.

Ranges come from the specs only: a linear spec becomes a slider over its allowed interval (open
ends stepped in, e.g. `beta_1` stops at 0.9999) with a number box beside it to type the value
(`typed_slider`; integer specs: the slider alone), a log-scale spec (learning rates, epsilons)
becomes a number input shown as `1.00e-03`. Whether a value is allowed is decided by
`HyperSpec.validate` alone (the same check the optimizer and the run process make); a refused
value is shown with `st.error` naming the field and its range.

The learning-rate schedule picker (`schedule_widgets`) is generated the same way from the
TF-free table `optimizers.schedule_specs.SCHEDULE_SPECS`: "constant" or a Keras class, then one
typed input per constructor parameter (numbers, a checkbox for bools, comma-separated text for
lists), plus the legacy `decay` from the settings table.

Widgets are initialised through `st.session_state[key]`, so a page can set them programmatically
(a shared link, a lesson, a live run's values). Every widget also gets its current value as its
own default (`default_value`, `default_index`): Streamlit sends a value set through session state
to the browser only in the script run that set it, and a browser that first draws the widget
from a later run's message (two runs in quick succession, e.g. the page's rerun when the
background checks end, under load) shows the widget's default instead (0 for a number input,
the low end of a slider, the first option of a select box) and sends it back as if the user had
typed it. With the widget's default equal to its value, what the browser falls back to is the
value itself, whatever the timing.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable, Iterable, Mapping

import streamlit as st

from optimizers.hyperparams import HyperSpec, InvalidHyperparameter
from schedules.table import (KERAS_DOC, SCHEDULE_SPECS, ScheduleError, ScheduleParam,
                                       param_text, params, validate_schedule)
from settings import fields

OnChange = Callable[[str], None]


def _set_this_run(key: str) -> bool:
    """True when `key` was assigned through `st.session_state` in the current script run."""
    try:
        from streamlit.runtime.state import get_session_state

        return bool(get_session_state().is_new_state_value(key))
    except Exception:  # noqa: BLE001 - no script run context: nothing was set in one
        return False


def default_value(key: str, fallback: Any) -> Any:
    """The `value=` (or `default=`) to give the widget of session key `key`: its value in
    session state, so that the widget's own default is the value it holds (see the module
    docstring). `fallback` (the widget's usual default, e.g. "min" for `st.number_input`) when
    the key has no value yet, or when it was set through session state in this script run:
    that run sends the value to the browser itself, and a default beside it would make
    Streamlit log its "default value and Session State" warning."""
    state = st.session_state
    if key not in state or _set_this_run(key):
        return fallback
    return state[key]


def default_index(key: str, options: list[Any]) -> int:
    """The `index=` of a select box of `options` whose value is kept under `key`: the position
    of that value (see `default_value`), else 0 (the select box's usual default)."""
    value = default_value(key, None)
    return options.index(value) if value is not None and value in options else 0


def widget_help(spec: HyperSpec) -> str:
    """`"<help> (allowed <range>; <reference>)"` for a widget's tooltip."""
    extra = f"allowed {spec.allowed()}" + (f"; {spec.reference}" if spec.reference else "")
    return f"{spec.help} ({extra})"


def slider_bounds(spec: HyperSpec) -> tuple[float, float, float] | None:
    """(min, max, step) of a slider for a linear spec with finite ends, else None.

    The step is 1 for integer specs, otherwise a power of ten about 1/10,000 of the interval;
    an excluded end is moved one step inwards (`[0, 1)` -> max 0.9999).
    """
    if spec.log_scale or math.isinf(spec.low) or math.isinf(spec.high):
        return None
    step = 1.0 if spec.integer else 10.0 ** (math.floor(math.log10(spec.high - spec.low)) - 4)
    low = spec.low if spec.low_inclusive else spec.low + step
    high = spec.high if spec.high_inclusive else spec.high - step
    return round(low, 12), round(high, 12), step


def log_step(spec: HyperSpec, value: float) -> float:
    """The +/- step of a log-scale number input: a tenth of the value's power of ten."""
    base = value if value > 0 else (spec.default if spec.default > 0 else 1.0)
    return 10.0 ** (math.floor(math.log10(base)) - 1)


def typed_key(key: str) -> str:
    """Session key of the number box beside the slider of widget `key`."""
    return f"{key}__typed"


def _typed_to_slider(key: str, bounds: tuple[float, float, float], name: str,
                     on_change: OnChange | None) -> None:
    """The number box changed: clamp into the slider's bounds, move the slider, tell the page."""
    value = float(st.session_state[typed_key(key)])
    st.session_state[key] = min(max(value, bounds[0]), bounds[1])
    if on_change is not None:
        on_change(name)


def _slider_to_typed(key: str, name: str, on_change: OnChange | None) -> None:
    st.session_state[typed_key(key)] = st.session_state[key]
    if on_change is not None:
        on_change(name)


def typed_slider(spec: HyperSpec, key: str, bounds: tuple[float, float, float],
                 common: dict[str, Any], on_change: OnChange | None) -> float:
    """A number box (type 0.9 in one go) beside a slider (drag), both showing `key`'s value.

    The slider holds the value (`key`); the box (`typed_key(key)`) is refreshed from it before
    each run and writes into it on change, clamped to the slider's `bounds` (min, max, step).
    """
    low, high, step = bounds
    digits = max(0, -int(math.floor(math.log10(step))))
    st.session_state[typed_key(key)] = float(st.session_state[key])
    left, right = st.columns([2, 3], vertical_alignment="bottom")
    left.number_input(
        spec.name, min_value=low, max_value=high, step=step, format=f"%.{digits}f",
        key=typed_key(key), help=common["help"], disabled=common["disabled"],
        on_change=_typed_to_slider, args=(key, bounds, spec.name, on_change))
    return right.slider(
        f"{spec.name} slider", min_value=low, max_value=high, step=step, format=f"%.{digits}f",
        value=default_value(key, None), key=key, help=common["help"],
        disabled=common["disabled"], label_visibility="hidden",
        on_change=_slider_to_typed, args=(key, spec.name, on_change))


def check(spec: HyperSpec, value: Any) -> str | None:
    """None when `spec.validate(value)` accepts the value, else the refusal message."""
    try:
        spec.validate(value)
    except InvalidHyperparameter as error:
        return str(error)
    return None


def hyper_widgets(
    specs: Iterable[HyperSpec],
    key_prefix: str,
    values: Mapping[str, float] | None = None,
    on_change: OnChange | None = None,
    disabled: bool = False,
) -> dict[str, float]:
    """One widget per hyperparameter; returns name -> current widget value (as float).

    Args:
        specs: the optimizer's `HyperSpec`s (registration order is kept).
        key_prefix: widget keys are `f"{key_prefix}{spec.name}"`.
        values: initial values (missing names take the spec default); used only when the
            widget has no state yet.
        on_change: called with the hyperparameter name after the user changes a widget.
        disabled: render the widgets read-only.

    Values refused by `spec.validate` are still returned; an `st.error` naming the field and
    its allowed range is shown under the widget (`invalid_hypers` lists them).
    """
    values = dict(values or {})
    out: dict[str, float] = {}
    for spec in specs:
        key = f"{key_prefix}{spec.name}"
        bounds = slider_bounds(spec)
        if key not in st.session_state:
            initial = float(values.get(spec.name, spec.default))
            if bounds is not None:
                initial = min(max(initial, bounds[0]), bounds[1])
            st.session_state[key] = initial
        common = dict(
            key=key, help=widget_help(spec), disabled=disabled,
            on_change=on_change, args=(spec.name,) if on_change else None,
        )
        if bounds is not None and not spec.integer:
            value = typed_slider(spec, key, bounds, common, on_change)
        elif bounds is not None:
            low, high, step = bounds
            value = st.slider(spec.name, min_value=low, max_value=high, step=step,
                              format="%.0f", value=default_value(key, None), **common)
        elif spec.log_scale:
            value = st.number_input(spec.name, step=log_step(spec, float(st.session_state[key])),
                                    format="%.2e", value=default_value(key, "min"), **common)
        else:
            value = st.number_input(spec.name, step=1.0 if spec.integer else 0.01,
                                    format="%.0f" if spec.integer else "%.4g",
                                    value=default_value(key, "min"), **common)
        message = check(spec, value)
        if message:
            st.error(message)
        out[spec.name] = float(value)
    return out


def number_args(field: str) -> dict[str, Any]:
    """`fields.number_input_args(field)` with the widget's current value as its default
    (`default_value`)."""
    args = fields.number_input_args(field)
    value = default_value(args["key"], "min")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # Streamlit refuses a box whose value's type differs from its bounds'
        value = float(value) if fields.kind(field) == "float" else int(value)
    return {**args, "value": value}


def invalid_hypers(specs: Iterable[HyperSpec], values: Mapping[str, float]) -> dict[str, str]:
    """name -> refusal message for every value `spec.validate` refuses."""
    return {
        spec.name: message
        for spec in specs
        if spec.name in values and (message := check(spec, values[spec.name]))
    }


def option_widgets(
    options: Mapping[str, Any],
    key_prefix: str,
    optimizer_names: Iterable[str] = (),
    exclude: str = "",
    disabled: bool = False,
) -> dict[str, Any]:
    """Widgets for an optimizer's plain options (`registry.option_defaults(name)`).

    bool -> checkbox, int -> integer number input (>= 1), `inner` -> selectbox of the registered
    optimizer names (without `exclude`, the wrapper itself), other str -> text input,
    float -> number input. Keys are `f"{key_prefix}{option}"`.
    """
    out: dict[str, Any] = {}
    for name, default in options.items():
        key = f"{key_prefix}{name}"
        if key not in st.session_state:
            st.session_state[key] = default
        if isinstance(default, bool):
            out[name] = st.checkbox(name, value=default_value(key, False), key=key,
                                    disabled=disabled)
        elif isinstance(default, int):
            value = default_value(key, "min")
            out[name] = int(st.number_input(name, min_value=1, step=1, key=key, disabled=disabled,
                                            value=value if value == "min" else int(value)))
        elif isinstance(default, str) and name == "inner":
            choices = [n for n in optimizer_names if n != exclude] or [default]
            if st.session_state[key] not in choices:
                st.session_state[key] = default if default in choices else choices[0]
            out[name] = st.selectbox(name, choices, key=key, disabled=disabled,
                                     index=default_index(key, choices),
                                     help="the optimizer whose update is applied every k steps")
        elif isinstance(default, str):
            out[name] = st.text_input(name, value=default_value(key, ""), key=key,
                                      disabled=disabled)
        else:
            out[name] = float(st.number_input(name, value=default_value(key, "min"), key=key,
                                              disabled=disabled))
    return out


def _schedule_param_widget(spec: ScheduleParam, key: str, common: dict[str, Any]) -> Any:
    """One typed input for a schedule parameter (its state under `key`)."""
    label = spec.name + (" (empty = none)" if spec.optional else "")
    help_text = f"{spec.help} (allowed {spec.allowed()})"
    if spec.kind == "bool":
        return st.checkbox(spec.name, help=help_text, value=default_value(key, False), **common)
    if spec.kind in ("ints", "floats"):
        return st.text_input(spec.name, help=help_text + "; comma-separated",
                             value=default_value(key, ""), **common)
    if spec.kind == "int":
        value = default_value(key, "min")
        return st.number_input(label, min_value=int(spec.low), max_value=int(spec.high), step=1,
                               help=help_text, value=int(value) if isinstance(value, float)
                               else value, **common)
    value = st.session_state.get(key)
    step = 10.0 ** (math.floor(math.log10(value)) - 1) if spec.log and value else 0.01
    return st.number_input(label, min_value=None if spec.low_open else float(spec.low),
                           max_value=float(spec.high), step=step,
                           format="%.3e" if spec.log else "%.4g", help=help_text,
                           value=default_value(key, "min"), **common)


def schedule_widgets(on_change: OnChange | None = None, disabled: bool = False
                     ) -> tuple[dict[str, Any] | None, str | None]:
    """The learning-rate schedule picker, its parameters and `decay`.

    Session keys come from `settings.fields` (`schedule_class_key`, `schedule_key`, `decay`),
    initialised through session state with the spec defaults. `on_change` is called with
    "lr_schedule" (picker or a parameter) or "decay".

    Returns:
        (the validated serialized schedule or None for constant, None or the refusal message
        naming the field, e.g. `lr_schedule.config.values=... refused: must be ...`).
    """
    state = st.session_state
    class_key = fields.schedule_class_key()
    choices = [fields.CONSTANT, *SCHEDULE_SPECS]
    if state.get(class_key) not in choices:
        state[class_key] = fields.CONSTANT
    callback = dict(on_change=on_change, args=("lr_schedule",)) if on_change else {}
    name = st.selectbox(fields.label("lr_schedule"), choices, key=class_key, disabled=disabled,
                        index=default_index(class_key, choices),
                        help=f"{fields.help_text('lr_schedule')}; constant = the "
                             "learning_rate above", **callback)
    if name != fields.CONSTANT:
        st.caption(f"[{name}]({KERAS_DOC}{name}) replaces `learning_rate` "
                   "(`learning_rate=schedule`)")
        columns = st.columns(2)
        for index, spec in enumerate(params(name)):
            key = fields.schedule_key(name, spec.name)
            if key not in state:
                state[key] = (param_text(spec.default) if spec.kind in ("ints", "floats")
                              else spec.default)
            with columns[index % 2]:
                _schedule_param_widget(spec, key, dict(key=key, disabled=disabled, **callback))
    error = None
    try:
        schedule = validate_schedule("lr_schedule", fields.schedule_from_session(state))
    except ScheduleError as refused:
        schedule, error = None, str(refused)
        st.error(error)
    decay_callback = dict(on_change=on_change, args=("decay",)) if on_change else {}
    st.number_input(**number_args("decay"), disabled=disabled, **decay_callback)
    return schedule, error
