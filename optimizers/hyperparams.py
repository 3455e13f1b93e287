"""Hyperparameter specs: the one place where a hyperparameter's range is declared and checked.

A `HyperSpec` describes one numeric hyperparameter that an optimizer registers with
`_set_hyper`. It holds two ranges, checked by two methods:

* `validate` (the UI range `[low, high]`): what the lab's UI, CLI, URL and config import offer.
  They call it themselves through `optimizers.registry.validate_hypers`; it accepts only Python
  floats, so every run recorded by the lab is described by plain numbers.
* `library_check` (the library range `[library_low, library_high]`, Keras's own rules): what the
  optimizer classes accept from Python code (`__init__` and `_set_hyper`), so that code written
  for `tf_keras.optimizers.legacy.X` runs unchanged. It accepts a finite real number in the library
  range, a zero-argument callable, a scalar `tf.Tensor` / `tf.Variable`, and (only where
  `schedule_ok`, i.e. `learning_rate`) a `tf_keras.optimizers.schedules.LearningRateSchedule`.

Both raise `InvalidHyperparameter`, whose message names the field and the allowed values.
"""

from __future__ import annotations

import functools
import math
import numbers
import textwrap
from dataclasses import dataclass
from typing import Any

# No TensorFlow at import: the specs are read by pages and the CLI that never build an
# optimizer (optimizers.catalog). `library_check` imports it, and only the classes call it.


@functools.cache
def _tf_types() -> tuple[Any, tuple[Any, ...]]:
    """(LearningRateSchedule, (tf.Tensor, tf.Variable)), imported on first use."""
    import tensorflow as tf
    import tf_keras

    return tf_keras.optimizers.schedules.LearningRateSchedule, (tf.Tensor, tf.Variable)


def __getattr__(name: str):  # `hyperparams.LearningRateSchedule`, read lazily (TensorFlow)
    if name == "LearningRateSchedule":
        return _tf_types()[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class InvalidHyperparameter(ValueError):
    """A hyperparameter value was refused; the message names the field and its allowed range."""

    def __init__(self, name: str, value: object, allowed: str):
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{name}={value!r} refused: {name} must be {allowed}")


@dataclass(frozen=True)
class HyperSpec:
    """One numeric hyperparameter registered with `_set_hyper`.

    Attributes:
        name: the `_set_hyper` name, also the constructor kwarg and the `get_config` key.
        default: default value (Python float).
        low, high: the allowed interval's ends (floats; `math.inf` for unbounded).
        low_inclusive, high_inclusive: whether the ends themselves are allowed.
        log_scale: True when the UI should step the value on a logarithmic scale
            (learning rates, epsilons).
        help: one-line meaning of the hyperparameter.
        reference: where it comes from (authors, year, arXiv id, equation).
        integer: True when only whole numbers are allowed (stored as float all the same,
            because `_set_hyper` values become float variables).
        library_low, library_high: the closed interval of Python numbers the optimizer classes
            accept (`library_check`); Keras's own limits, e.g. [0, 1] for `momentum`. Default
            (-inf, inf): any finite number, as Keras (which does not even refuse NaN; the lab
            does).
        schedule_ok: True when a `LearningRateSchedule` is accepted (`learning_rate` only: the
            base class evaluates it in `_decayed_lr`; any other hyperparameter would receive the
            schedule object itself).
    """

    name: str
    default: float
    low: float
    high: float
    help: str
    reference: str = ""
    low_inclusive: bool = True
    high_inclusive: bool = True
    log_scale: bool = False
    integer: bool = False
    library_low: float = -math.inf
    library_high: float = math.inf
    schedule_ok: bool = False

    def allowed(self) -> str:
        """The allowed range as text, e.g. `a float in (0, 1)`."""
        left = "[" if self.low_inclusive else "("
        right = "]" if self.high_inclusive else ")"
        kind = "an integer" if self.integer else "a float"
        high = "inf" if math.isinf(self.high) else f"{self.high:g}"
        return f"{kind} in {left}{self.low:g}, {high}{right}"

    def contains(self, value: float) -> bool:
        """True when `value` lies in the allowed interval (no type check)."""
        above = value >= self.low if self.low_inclusive else value > self.low
        below = value <= self.high if self.high_inclusive else value < self.high
        return above and below

    def validate(self, value: object) -> float:
        """Return `value` as a Python float, or raise.

        Raises:
            InvalidHyperparameter: `value` is not a real number (bools and strings included),
                is NaN or infinite, is not whole when `integer`, or lies outside the range.
        """
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            # numpy scalars are numbers.Real; tensors and strings are not.
            raise InvalidHyperparameter(self.name, value, self.allowed())
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range (e.g. 10**400)
            raise InvalidHyperparameter(self.name, value, self.allowed()) from None
        if not math.isfinite(number) or not self.contains(number):
            raise InvalidHyperparameter(self.name, value, self.allowed())
        if self.integer and not number.is_integer():
            raise InvalidHyperparameter(self.name, value, self.allowed())
        return number


    def doc_line(self) -> str:
        """This hyperparameter's `Args:` entry: both ranges and the default, e.g. "beta_1:
        library: a finite number in [-inf, inf], ...; UI: a float in [0, 1). Default 0.9."."""
        return (f"{self.name}: library: {self.library_allowed()}; UI: {self.allowed()}. "
                f"Default {self.default:g}.")

    def library_allowed(self) -> str:
        """What `library_check` accepts, as text (used in its refusal message)."""
        low = "-inf" if math.isinf(self.library_low) else f"{self.library_low:g}"
        high = "inf" if math.isinf(self.library_high) else f"{self.library_high:g}"
        kinds = "a zero-argument callable, a scalar tensor or tf.Variable"
        if self.schedule_ok:
            kinds = "a LearningRateSchedule, " + kinds
        return f"a finite number in [{low}, {high}], {kinds}"

    def library_check(self, value: object) -> object:
        """Return `value` as the optimizer classes store it (`_set_hyper`), or raise.

        Python numbers (numpy scalars included) become Python floats; callables, schedules,
        tensors and variables are returned unchanged (the base class calls / casts them in
        `_get_hyper`; a callable is called at every step, inside the traced function).

        Raises:
            InvalidHyperparameter: a bool, string or other object; a NaN/inf number or one outside
                `[library_low, library_high]`; a schedule where not `schedule_ok`; a tensor
                that is not a scalar or not of a numeric dtype.
        """
        allowed = self.library_allowed()
        schedule_type, tensor_types = _tf_types()
        if isinstance(value, schedule_type):
            if not self.schedule_ok:
                raise InvalidHyperparameter(self.name, value, allowed)
            return value
        if isinstance(value, tensor_types):
            if value.shape.rank not in (None, 0) or not (
                value.dtype.is_floating or value.dtype.is_integer or value.dtype.is_complex
            ):
                raise InvalidHyperparameter(self.name, value, allowed)
            return value
        if callable(value):
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidHyperparameter(self.name, value, allowed)
        try:
            number = float(value)
        except OverflowError:
            raise InvalidHyperparameter(self.name, value, allowed) from None
        if not (math.isfinite(number) and self.library_low <= number <= self.library_high):
            raise InvalidHyperparameter(self.name, value, allowed)
        return number


def find_spec(specs: tuple[HyperSpec, ...], name: str, owner: str) -> HyperSpec:
    """The spec named `name` among `specs` of the optimizer class `owner`.

    Raises:
        KeyError: no such hyperparameter (message lists the known names).
    """
    for spec in specs:
        if spec.name == name:
            return spec
    known = ", ".join(s.name for s in specs)
    raise KeyError(f"{owner} has no hyperparameter {name!r}; known: {known}")


# Shared specs: the same meaning and range in every optimizer that uses them.
LEARNING_RATE = HyperSpec(
    "learning_rate", 1e-3, 0.0, 10.0, "step size multiplying every update",
    low_inclusive=False, log_scale=True, library_low=0.0, schedule_ok=True,
)
EPSILON = HyperSpec(
    "epsilon", 1e-7, 0.0, 1.0, "added to the denominator so it never reaches 0",
    low_inclusive=False, log_scale=True, library_low=0.0,
)
BETA_1 = HyperSpec(
    "beta_1", 0.9, 0.0, 1.0, "decay rate of the first-moment (mean gradient) estimate m",
    reference="Kingma & Ba 2015, Adam, arXiv:1412.6980, Algorithm 1", high_inclusive=False,
)
BETA_2 = HyperSpec(
    "beta_2", 0.999, 0.0, 1.0, "decay rate of the second-moment (squared gradient) estimate v",
    reference="Kingma & Ba 2015, Adam, arXiv:1412.6980, Algorithm 1", high_inclusive=False,
)
MOMENTUM = HyperSpec(
    "momentum", 0.0, 0.0, 1.0, "fraction of the previous update kept in the momentum buffer",
    reference="Polyak 1964; Sutskever et al. 2013 (ICML), eq. 1-2", high_inclusive=False,
    library_low=0.0, library_high=1.0,  # Keras: "`momentum` must be between [0, 1]"
)


# Written once, substituted into the class docstrings (as Keras 3 does with
# `{{base_optimizer_keyword_args}}`): `fill_docstring` replaces these placeholders.
ALLOWED_VALUES_PLACEHOLDER = "{{allowed_values}}"
HYPERPARAMETER_ARGS_PLACEHOLDER = "{{hyperparameter_args}}"
ALLOWED_VALUES = (
    "Allowed values: the library (this class, `_set_hyper`) follows Keras's rules "
    "(`HyperSpec.library_check`); the lab's UI, CLI, URL and config import offer the narrower "
    "UI range (`HyperSpec.validate`, via `registry.validate_hypers`), floats only. Keyword "
    "arguments of the base class: `lr` (alias of learning_rate), `decay` (float >= 0: "
    "learning_rate / (1 + decay * iterations), via `_decayed_lr`), `clipnorm`, `clipvalue`, "
    "`global_clipnorm`."
)


def fill_docstring(doc: str | None, specs: tuple[HyperSpec, ...], width: int = 100) -> str | None:
    """`doc` with each line holding only `{{allowed_values}}` replaced by `ALLOWED_VALUES` and
    each line holding only `{{hyperparameter_args}}` by one `HyperSpec.doc_line` per spec of
    `specs`, wrapped to `width` columns at that line's indentation (continuations 4 deeper, as
    Google-style `Args:` entries). A docstring without placeholders is returned unchanged."""
    if not doc:
        return doc
    out = []
    for line in doc.splitlines():
        indent = line[:len(line) - len(line.lstrip())]
        if line.strip() == ALLOWED_VALUES_PLACEHOLDER:
            out += textwrap.wrap(ALLOWED_VALUES, width, initial_indent=indent,
                                 subsequent_indent=indent)
        elif line.strip() == HYPERPARAMETER_ARGS_PLACEHOLDER:
            for spec in specs:
                out += textwrap.wrap(spec.doc_line(), width, initial_indent=indent,
                                     subsequent_indent=indent + "    ")
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if doc.endswith("\n") else "")


def check_decay(value: object) -> float:
    """The legacy `decay` keyword as a Python float >= 0 (Keras: lr / (1 + decay * iterations)).

    Raises:
        InvalidHyperparameter: not a real number (bools included), NaN/inf or negative.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
        math.isfinite(float(value)) and float(value) >= 0.0
    ):
        raise InvalidHyperparameter("decay", value, "a finite float >= 0")
    return float(value)
