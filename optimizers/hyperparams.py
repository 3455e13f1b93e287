"""Hyperparameter specs: the one place where a hyperparameter's range is declared and checked.

A `HyperSpec` describes one numeric hyperparameter that an optimizer registers with
`_set_hyper`. The same `HyperSpec.validate` is used by the optimizer constructor, by live
changes (`RuleOptimizer._set_hyper`), by the run process and by the UI widgets, so a value is
accepted or refused with the same message everywhere.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


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
    low_inclusive=False, log_scale=True,
)
EPSILON = HyperSpec(
    "epsilon", 1e-7, 0.0, 1.0, "added to the denominator so it never reaches 0",
    low_inclusive=False, log_scale=True,
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
)
