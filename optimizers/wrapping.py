"""What the wrapper optimizers share: which inner optimizer they accept, and names.

A wrapper (`GradientAccumulation`, `Lookahead`) takes its inner optimizer as an OBJECT, as optax's
`lookahead(fast_optimizer)` does: `Lookahead(inner=SGD(...))`. It never resolves a name itself;
only the registry does (`registry.create("lookahead", hypers, {"inner": "adam"})` builds the inner
optimizer and passes it). `check_inner` is the one place that decides which inner optimizer a
wrapper accepts; the constructors, the registry's `validate_options` and `from_config` all call it.

`get_config` / `from_config` name the inner optimizer (a config is JSON), so a wrapper needs the
registry's names there. The registry hands them over once, when it is imported, with
`install_resolver`: the dependency points down (registry -> wrappers), never back, and
`from_config` can only build classes the registry lists (an allow-list: nothing named in a config
is imported or deserialized by Keras).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import tf_keras

LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer


@dataclass(frozen=True)
class InnerResolver:
    """The registry's name services, as the wrappers see them.

    Attributes:
        get: registry name -> class. Raises KeyError (message lists the known names).
        create: (registry name, hyperparameters[, options]) -> validated instance. Raises KeyError,
            ValueError, InvalidHyperparameter.
        name_of: registered class -> its registry name. Raises KeyError when not registered.
        class_named: Keras registered name ("OptimizerLab>Adam") or class name ("Adam") ->
            registered class. Raises KeyError when no registered class answers to it.
    """

    get: Callable[[str], type]
    create: Callable[[str, dict[str, Any]], LegacyOptimizer]
    name_of: Callable[[type], str]
    class_named: Callable[[str], type]


_RESOLVER: list[InnerResolver] = []


def install_resolver(resolver: InnerResolver) -> None:
    """Called once by `optimizers.registry` at import: the wrappers' source of names."""
    _RESOLVER[:] = [resolver]


def resolver() -> InnerResolver:
    """The installed `InnerResolver`.

    Raises:
        LookupError: `optimizers.registry` was never imported in this process.
    """
    if not _RESOLVER:  # the registry installs itself when it imports a class; a wrapper
        from optimizers import registry  # imported directly (tests, teaching) asks it here

        registry.install_default_resolver()
    if not _RESOLVER:
        raise LookupError("a wrapper's inner optimizer is named in its config, and only "
                          "optimizers.registry resolves names: import optimizers.registry first")
    return _RESOLVER[0]


class Wrapper:
    """Mixin of the optimizers that wrap another one (an OptimizerV2 subclass comes after it).

    Class attributes a wrapper sets:
        REGISTRY_NAME: its registry name (used in refusal messages and by the registry).
        INNER_BASE: the class every inner optimizer must be an instance of (`RuleOptimizer` when
            the wrapper calls the inner pure rule, any OptimizerV2 for `Lookahead`).
        DEFAULT_INNER: the class built when no inner optimizer is given (the contract check
            constructs every optimizer with no arguments).
    """

    REGISTRY_NAME: ClassVar[str]
    INNER_BASE: ClassVar[type] = LegacyOptimizer
    DEFAULT_INNER: ClassVar[type]

    @classmethod
    def checked_inner(cls, inner: Any) -> LegacyOptimizer:
        """`inner` when this wrapper accepts it; a default `DEFAULT_INNER()` for None.

        Raises:
            TypeError: `inner` is a name (only the registry resolves names) or not an optimizer.
            ValueError: as `check_inner`.
        """
        if inner is None:
            return cls.DEFAULT_INNER()
        if isinstance(inner, str):
            raise TypeError(f"inner={inner!r} refused: pass an optimizer object, e.g. "
                            f"registry.create({inner!r}); only the registry resolves names")
        if not isinstance(inner, LegacyOptimizer):
            raise TypeError(f"inner={inner!r} refused: must be an OptimizerV2 instance")
        check_inner(cls, type(inner), type(inner).__name__)
        return inner

    @classmethod
    def inner_from_name(cls, name: Any, hypers: dict[str, Any],
                        options: dict[str, Any] | None = None) -> LegacyOptimizer:
        """The inner optimizer registered as `name`, built with `hypers` (for `from_config`).

        Raises:
            KeyError: `name` is not a registered name; ValueError: as `check_inner`.
        """
        if not isinstance(name, str):
            raise ValueError(f"option inner={name!r} refused: must be a registry name")
        check_inner(cls, resolver().get(name), repr(name))
        if options:
            return resolver().create(name, hypers, options)
        return resolver().create(name, hypers)

    @classmethod
    def inner_name(cls, inner: LegacyOptimizer) -> str:
        """The registry name of `inner`'s class (for `get_config`). Raises KeyError."""
        return resolver().name_of(type(inner))


def wrapper_names() -> list[str]:
    """Registry names of every wrapper class defined so far, sorted."""
    found, todo = set(), list(Wrapper.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls.REGISTRY_NAME)
        todo.extend(cls.__subclasses__())
    return sorted(found)


def check_inner(wrapper: type, inner: type, shown: str) -> None:
    """Refuse an inner optimizer class that `wrapper` cannot wrap.

    Args:
        wrapper: a `Wrapper` subclass.
        inner: the class of the proposed inner optimizer.
        shown: how the refusal names it (`'adam'` for a registry name, a class name otherwise).

    Raises:
        ValueError: `inner` is `wrapper` itself, another wrapper, or not an `INNER_BASE`
            (messages: "option inner=... refused: cannot wrap itself" / "... wraps a plain rule").
    """
    if issubclass(inner, wrapper):
        raise ValueError(f"option inner={shown} refused: cannot wrap itself")
    if issubclass(inner, Wrapper) or not issubclass(inner, wrapper.INNER_BASE):
        raise ValueError(f"option inner={shown} refused: {wrapper.REGISTRY_NAME} wraps a plain "
                         f"rule (not {', '.join(wrapper_names())})")


__all__ = ["InnerResolver", "Wrapper", "check_inner", "install_resolver", "resolver",
           "wrapper_names"]


class OwnWeightsWrapper:
    """Mixin of the wrappers that keep slots of their own beside a whole inner optimizer
    (Lookahead's `slow`, MovingAverage's `average`): a slot name of theirs is theirs, any other
    is the inner optimizer's; creating their weights creates the inner's too (before a trace).
    Put it first in the bases, before `Wrapper, DeclaredSlots, LegacyOptimizer`."""

    def get_slot(self, var, slot_name):
        """This wrapper's own slot, else the inner optimizer's slot of that name."""
        if slot_name in self.declared_slot_names():
            return super().get_slot(var, slot_name)
        return self.inner.get_slot(var, slot_name)

    def _create_all_weights(self, var_list):
        """Own hypers and slots, and the inner optimizer's weights."""
        super()._create_all_weights(var_list)
        self.inner._create_all_weights(var_list)
