"""What the wrapper optimizers share: which inner optimizer they accept, and how a config names it.

A wrapper (`GradientAccumulation`, `Lookahead`, `MovingAverage`) takes its inner optimizer as an
OBJECT, as optax's `lookahead(fast_optimizer)` does: `Lookahead(inner=SGD(...))`. It never
resolves a name: there is no registry in this module's view. The refusal rule (which inner
optimizer a wrapper accepts) is `catalog.check_inner`, written once for classes (here) and for
registry names (`registry.validate_options`).

`get_config` names the inner optimizer (a config is JSON); `from_config` is given the inner
optimizer's class in `custom_objects`, keyed by the name the config uses, or finds it among the
classes registered with Keras (`tf_keras.saving.get_registered_object`: Keras's own allow-list,
in which every optimizer of the lab is registered as "OptimizerLab>Class"). A registry name
("sgd", as `GradientAccumulation` writes it) only the registry resolves:
`registry.from_config(name, config)` resolves it and passes exactly that class in, and
`tf_keras.optimizers.deserialize(..., custom_objects=registry.custom_objects())` works too.
Nothing named in a config is imported.
"""

from __future__ import annotations

from typing import Any, ClassVar
from collections.abc import Callable, Mapping

import tf_keras

from optimizers.catalog import check_inner as check_inner_facts, registry_name

from tf_keras.optimizers.legacy import Optimizer as LegacyOptimizer


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
    def inner_class(cls, named: Any, custom_objects: Mapping[str, type] | None
                    ) -> type[LegacyOptimizer]:
        """The class `custom_objects` gives for `named` (the inner optimizer's name in a config:
        a registry name, a Keras registered name or a class name), else the class registered
        with Keras under that name (a custom object scope's, then a globally registered one),
        checked by `check_inner`.

        Raises:
            KeyError: no such class (message: "... is not a registered optimizer class";
                `registry.from_config` passes the class a registry name stands for).
            ValueError: as `check_inner`, or `named` is not a string.
        """
        if not isinstance(named, str):
            raise ValueError(f"option inner={named!r} refused: must be a registry name")
        found = (custom_objects or {}).get(named) or tf_keras.saving.get_registered_object(named)
        if not (isinstance(found, type) and issubclass(found, LegacyOptimizer)):
            raise KeyError(f"{named!r} is not a registered optimizer class: rebuild a wrapper "
                           f"with registry.from_config(name, config), which passes the inner "
                           f"optimizer's class in")
        check_inner(cls, found, repr(named))
        return found

    @classmethod
    def inner_from_entry(cls, entry: Any, custom_objects: Mapping[str, type] | None
                         ) -> LegacyOptimizer:
        """The inner optimizer a config's `inner` entry describes (`Lookahead`, `MovingAverage`):
        a Keras-serialized entry `{class_name, config[, registered_name]}` rebuilt by its class's
        own `from_config`, or a registry name built with its defaults; the class comes from
        `custom_objects` (`inner_class`).

        Raises:
            KeyError: the entry names no class of `custom_objects`.
            ValueError: a malformed entry, or a class `check_inner` refuses.
        """
        if isinstance(entry, dict) and isinstance(entry.get("config"), dict):
            named = entry.get("registered_name") or entry.get("class_name")
            return cls.inner_class(named, custom_objects).from_config(dict(entry["config"]))
        if isinstance(entry, str):
            return cls.inner_class(entry, custom_objects)()
        raise ValueError("option inner refused: must be a registry name or a serialized "
                         "optimizer {class_name, config}")

    @staticmethod
    def inner_name(inner: LegacyOptimizer) -> str:
        """The registry name of `inner`'s class (for `get_config`): its `REGISTRY_NAME`, else
        its class name in lower case, as a plugin registers (`catalog.registry_name`)."""
        return registry_name(type(inner))


def check_inner(wrapper: type[Wrapper], inner: type, shown: str) -> None:
    """Refuse an inner optimizer class that `wrapper` cannot wrap (`catalog.check_inner`, with
    the facts read from the classes).

    Args:
        wrapper: a `Wrapper` subclass.
        inner: the class of the proposed inner optimizer.
        shown: how the refusal names it (`'adam'` for a registry name, a class name otherwise).

    Raises:
        ValueError: `inner` is `wrapper` itself, another wrapper, or not an `INNER_BASE`.
    """
    check_inner_facts(wrapper.REGISTRY_NAME, shown, itself=issubclass(inner, wrapper),
                      is_wrapper=issubclass(inner, Wrapper),
                      accepted=issubclass(inner, wrapper.INNER_BASE))


__all__ = ["LegacyOptimizer", "OwnWeightsWrapper", "Wrapper", "check_inner"]


class OwnWeightsWrapper:
    """Mixin of the wrappers that keep slots of their own beside a whole inner optimizer
    (Lookahead's `slow`, MovingAverage's `average`): a slot name of theirs is theirs, any other
    is the inner optimizer's; creating their weights creates the inner's too (before a trace).
    Put it first in the bases, before `Wrapper, DeclaredSlots, LegacyOptimizer`."""

    # Declared by the classes after this mixin in the bases (`Wrapper`'s subclass, DeclaredSlots).
    inner: LegacyOptimizer
    declared_slot_names: Callable[[], tuple[str, ...]]

    def get_slot(self, var, slot_name):
        """This wrapper's own slot, else the inner optimizer's slot of that name."""
        if slot_name in self.declared_slot_names():
            # The OptimizerV2 after this mixin in the bases defines `get_slot`.
            return super().get_slot(var, slot_name)  # type: ignore[misc]
        return self.inner.get_slot(var, slot_name)

    def _create_all_weights(self, var_list):
        """Own hypers and slots, and the inner optimizer's weights."""
        super()._create_all_weights(var_list)  # type: ignore[misc]  # the OptimizerV2's
        self.inner._create_all_weights(var_list)
