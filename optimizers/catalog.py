"""The optimizer catalog: what the registry knows of every optimizer WITHOUT importing it.

A Streamlit page that only lists optimizers, shows their hyperparameter widgets or validates a
config, and the command line's argument parsing, need each optimizer's `HyperSpec`s, options
and defaults, whether it is a pure rule, and whether it wraps another optimizer. Importing the
OptimizerV2 classes for that costs `import tensorflow` (3.4-4 s, ~640 MB resident per
process), so those facts are declared here as plain data, and the class is imported only when
an object is actually built (`registry.get` / `create`).

One source of truth: the built-in classes take their `HYPERPARAMETERS` and `OPTIONS` class
attributes from this table (`own_specs`, `option_names`); tests/test_tf_free_server.py checks
that every class agrees with its entry (specs with every option combination, constructor
defaults, wrapper composition, Keras registered name).

Plugins add entries too: the plugin check process (`optimizer_plugins.plugin_process`) reports a
passing plugin's specs, options and `is_rule` as JSON (`CatalogEntry.to_data`), and the server
registers `CatalogEntry.from_data(...)` without importing the plugin file.

This module imports nothing but `optimizers.hyperparams` (TensorFlow-free).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping

from optimizers.hyperparams import (BETA_1, BETA_2, EPSILON, LEARNING_RATE, MOMENTUM,
                                    HyperSpec, InvalidHyperparameter)
from optimizers.specs_keras3 import MUON_SPECS, SCHEDULE_FREE_SPECS

KERAS_PACKAGE = "OptimizerLab"  # register_keras_serializable(package=...) of the built-ins
PLUGIN_PREFIX = "plugin:"  # class_path of a plugin: "plugin:/abs/file.py:ClassName"

# ----- specs declared by one optimizer only (the shared ones live in optimizers.hyperparams) ---
SGD_LEARNING_RATE = dataclasses.replace(LEARNING_RATE, default=0.01)
RHO = HyperSpec(
    "rho", 0.9, 0.0, 1.0, "decay rate of the running mean of squared gradients rms",
    reference=("Tieleman & Hinton 2012, Coursera lecture 6.5; centered form: Graves 2013, "
               "'Generating Sequences With Recurrent Neural Networks', arXiv:1308.0850, eq. 38-45"),
    high_inclusive=False,
)
ADAMW_REFERENCE = (
    "Loshchilov & Hutter 2019, 'Decoupled Weight Decay Regularization', ICLR, "
    "arXiv:1711.05101, Algorithm 2"
)
WEIGHT_DECAY = HyperSpec(
    "weight_decay", 0.004, 0.0, 1.0,
    "fraction of the weights removed each step, scaled by the learning rate (decoupled decay)",
    reference=ADAMW_REFERENCE,
)
LOOKAHEAD_REFERENCE = (
    "Zhang, Lucas, Hinton & Ba 2019, 'Lookahead Optimizer: k steps forward, 1 step back', "
    "NeurIPS, arXiv:1907.08610, Algorithm 1"
)
SYNC_PERIOD = HyperSpec(
    "sync_period", 6.0, 1.0, 1000.0, "k: inner (fast) steps between two slow-weight syncs",
    reference=LOOKAHEAD_REFERENCE, integer=True,
)
SLOW_STEP_SIZE = HyperSpec(
    "slow_step_size", 0.5, 0.0, 1.0, "alpha: fraction of the way the slow weights move to the fast",
    reference=LOOKAHEAD_REFERENCE, low_inclusive=False,
)
MOVING_AVERAGE_REFERENCE = (
    "Polyak & Juditsky 1992 (averaging); TensorFlow Addons tfa.optimizers.MovingAverage "
    "(average_decay, num_updates, start_step, dynamic_decay); tf.train.ExponentialMovingAverage"
)
AVERAGE_DECAY = HyperSpec(
    "average_decay", 0.99, 0.0, 1.0, "d: fraction of the old average kept at each step",
    reference=MOVING_AVERAGE_REFERENCE, library_low=0.0, library_high=1.0,
)

# Keras 3's newer algorithms (keras.optimizers.Lion / Lamb / Adafactor): their defaults.
DECOUPLED_WEIGHT_DECAY = dataclasses.replace(WEIGHT_DECAY, default=0.0)  # Keras 3: None = off
LION_REFERENCE = (
    "Chen, Liang, Huang, Real, Wang, Pham, Dong, Luong, Hsieh, Lu & Le 2023, 'Symbolic "
    "Discovery of Optimization Algorithms', arXiv:2302.06675, Program 1"
)
LION_BETA_1 = HyperSpec(
    "beta_1", 0.9, 0.0, 1.0, "weight of the momentum m in the direction sign(b1 m + (1 - b1) g)",
    reference=LION_REFERENCE, high_inclusive=False,
)
LION_BETA_2 = HyperSpec(
    "beta_2", 0.99, 0.0, 1.0, "decay rate of the momentum m", reference=LION_REFERENCE,
    high_inclusive=False,
)
LAMB_REFERENCE = (
    "You, Li, Reddi, Hseu, Kumar, Bhojanapalli, Song, Demmel, Keutzer & Hsieh 2020, 'Large "
    "Batch Optimization for Deep Learning: Training BERT in 76 minutes', ICLR, "
    "arXiv:1904.00962, Algorithm 2"
)
ADAFACTOR_REFERENCE = (
    "Shazeer & Stern 2018, 'Adafactor: Adaptive Learning Rates with Sublinear Memory Cost', "
    "ICML, arXiv:1804.04235, Algorithms 4-5 and sec. 7-8"
)
BETA_2_DECAY = HyperSpec(
    "beta_2_decay", -0.8, -1.0, 0.0,
    "exponent c of the second-moment decay rate beta_2(t) = 1 - t**c",
    reference=ADAFACTOR_REFERENCE + " (sec. 7, eq. 12)",
)
EPSILON_1 = HyperSpec(
    "epsilon_1", 1e-30, 0.0, 1.0, "added to grad**2 so the second-moment estimate never reaches 0",
    reference=ADAFACTOR_REFERENCE + " (Algorithm 4, line 5)", low_inclusive=False,
    log_scale=True, library_low=0.0,
)
EPSILON_2 = HyperSpec(
    "epsilon_2", 1e-3, 0.0, 1.0, "lower bound of the parameter scale RMS(var) in the step size",
    reference=ADAFACTOR_REFERENCE + " (sec. 8)", low_inclusive=False, log_scale=True,
    library_low=0.0,
)
CLIP_THRESHOLD = HyperSpec(
    "clip_threshold", 1.0, 0.0, 100.0, "d: an update whose RMS exceeds d is scaled down to RMS d",
    reference=ADAFACTOR_REFERENCE + " (sec. 6, eq. 11)", low_inclusive=False, log_scale=True,
    library_low=0.0,
)


# Keras 2's other built-ins (Adadelta, Adamax, Ftrl, Nadam): their own specs.
ADADELTA_REFERENCE = ("Zeiler 2012, 'ADADELTA: An Adaptive Learning Rate Method', "
                      "arXiv:1212.5701, Algorithm 1")
ADADELTA_RHO = dataclasses.replace(
    RHO, default=0.95, help="decay rate of the running means of grad**2 and of update**2",
    reference=ADADELTA_REFERENCE)
ADAMAX_REFERENCE = "Kingma & Ba 2015, Adam, arXiv:1412.6980, sec. 7.1, Algorithm 2 (AdaMax)"
ADAMAX_BETA_2 = dataclasses.replace(
    BETA_2, help="decay rate of the exponentially weighted infinity norm u of the gradients",
    reference=ADAMAX_REFERENCE)
FTRL_REFERENCE = ("McMahan et al. 2013, 'Ad Click Prediction: a View from the Trenches', KDD, "
                  "Algorithm 1 (FTRL-Proximal)")
FTRL_L1 = HyperSpec(
    "l1_regularization_strength", 0.0, 0.0, 10.0,
    "lambda_1: a coordinate whose |z| is at most this stays exactly 0 (sparsity)",
    reference=FTRL_REFERENCE, library_low=0.0)
FTRL_L2 = HyperSpec(
    "l2_regularization_strength", 0.0, 0.0, 10.0,
    "lambda_2: L2 penalty added to the denominator of the closed-form weight (Keras: 2 * l2)",
    reference=FTRL_REFERENCE, library_low=0.0)
FTRL_L2_SHRINKAGE = HyperSpec(
    "l2_shrinkage_regularization_strength", 0.0, 0.0, 10.0,
    "L2 penalty added to the gradient in z only (magnitude shrinkage), not to the accumulator",
    reference="TensorFlow tf.raw_ops.ApplyFtrlV2 (grad_with_shrinkage = grad + 2 l2_shrinkage var)",
    library_low=0.0)
FTRL_BETA = HyperSpec(
    "beta", 0.0, 0.0, 10.0, "beta of the per-coordinate rate alpha / (beta + sqrt(n))",
    reference=FTRL_REFERENCE + ", per-coordinate learning rates")
NADAM_REFERENCE = ("Dozat 2016, 'Incorporating Nesterov Momentum into Adam', ICLR workshop, "
                   "Algorithm 2; momentum schedule u_t = beta_1 (1 - 0.5 * 0.96**(0.004 t))")

@dataclass(frozen=True)
class WrapperRule:
    """How a wrapper combines with the plain rule it wraps (its `inner` option).

    Attributes:
        inner_specs_only: True when the wrapper's hyperparameters are exactly the inner rule's
            (GradientAccumulation); False when they are its own specs followed by the inner's
            (Lookahead, MovingAverage).
        inner_must_be_rule: True when the inner optimizer must be a pure rule (`is_rule`), as
            `INNER_BASE = RuleOptimizer`; False for any plain OptimizerV2.
        passes_inner_options: True when the wrapper also takes the inner rule's options
            (`PASSES_INNER_OPTIONS`, e.g. `{"inner": "sgd", "nesterov": True}`).
    """

    inner_specs_only: bool
    inner_must_be_rule: bool
    passes_inner_options: bool = False


@dataclass(frozen=True)
class OptionRange:
    """The values a numeric option's constructor accepts, checked without building the class
    (`registry.validate_options`), with the constructor's own refusal text.

    Attributes:
        low, high: the closed interval of allowed values (`high` may be `math.inf`, itself
            refused: only finite values pass).
        allowed: the allowed values as text, e.g. "an int in [1, 10000]".
        names_field_twice: True when the constructor raises `InvalidHyperparameter`
            ("start_step=-1 refused: start_step must be an int >= 0"); False for its plain
            `ValueError` ("accumulation_steps=0 refused: must be an int in [1, 10000]").
    """

    low: float
    high: float
    allowed: str
    names_field_twice: bool = False

    def check(self, option: str, value: float) -> None:
        """Raise as the constructor does when `value` (an int or float, type already checked)
        is outside `[low, high]` or not finite.

        Raises:
            InvalidHyperparameter (a ValueError) or ValueError: the message names the option.
        """
        if math.isfinite(value) and self.low <= value <= self.high:
            return
        if self.names_field_twice:
            raise InvalidHyperparameter(option, value, self.allowed)
        raise ValueError(f"{option}={value!r} refused: must be {self.allowed}")


# GradientAccumulation's limit: a run has at most 1,000,000 steps (RunConfig.steps); beyond
# 10,000 micro-batches per update it would make fewer than 100 updates, and the accumulator slot
# would hold a huge sum.
MAX_ACCUMULATION_STEPS = 10_000


@dataclass(frozen=True)
class CatalogEntry:
    """One optimizer as the registry knows it before (or without) importing its class.

    Attributes:
        name: registry name (`adam`, a plugin's `REGISTRY_NAME`).
        class_path: where the class lives: "module:Class" for the built-ins, or
            "plugin:/abs/path/file.py:Class" for a plugin file.
        class_name: the class's `__name__` (config files may name optimizers by it).
        keras_name: its Keras registered name, e.g. "OptimizerLab>Adam" (`class_named`).
        hyperparameters: the class's own `HyperSpec`s (`HYPERPARAMETERS`), in `_set_hyper` order.
        options: (name, default) of every plain constructor option (`OPTIONS`), in order; a
            wrapper's `inner` default is a registry name (e.g. "adam").
        is_rule: True for a `RuleOptimizer` (pure rule: hyper-gradients work).
        wrapper: how a wrapper combines with its inner rule; None for a plain optimizer.
        option_ranges: (option, `OptionRange`) of the numeric options whose values the
            constructor limits (a plugin's are checked only where its class is built).
    """

    name: str
    class_path: str
    class_name: str
    keras_name: str
    hyperparameters: tuple[HyperSpec, ...]
    options: tuple[tuple[str, Any], ...] = ()
    is_rule: bool = True
    wrapper: WrapperRule | None = None
    option_ranges: tuple[tuple[str, OptionRange], ...] = ()

    def option_defaults(self) -> dict[str, Any]:
        """{option: default} (a fresh dict)."""
        return dict(self.options)

    def to_data(self) -> dict[str, Any]:
        """The entry as JSON-able data (the plugin check process sends it to the server).
        Infinite bounds are written as the strings "inf" / "-inf" (strict JSON has no inf)."""
        data = dataclasses.asdict(self)
        data["hyperparameters"] = [{k: _json_float(v) for k, v in spec.items()}
                                   for spec in data["hyperparameters"]]
        data["options"] = [list(pair) for pair in self.options]
        data.pop("option_ranges")  # built-ins only: a plugin's constructor checks its own
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CatalogEntry:
        """The entry `to_data` wrote.

        Raises:
            ValueError: a field is missing or of the wrong type (the message names it).
        """
        try:
            specs = tuple(HyperSpec(**{k: _from_json_float(v) for k, v in spec.items()})
                          for spec in data["hyperparameters"])
            options = tuple((str(k), v) for k, v in data["options"])
            wrapper = WrapperRule(**data["wrapper"]) if data.get("wrapper") else None
            return cls(str(data["name"]), str(data["class_path"]), str(data["class_name"]),
                       str(data["keras_name"]), specs, options, bool(data["is_rule"]), wrapper)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"catalog entry refused: {type(error).__name__}: {error}") from None


def _json_float(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _from_json_float(value: Any) -> Any:
    return float(value) if value in ("inf", "-inf") else value


def _builtin(name: str, module: str, class_name: str, specs: tuple[HyperSpec, ...],
             options: tuple[tuple[str, Any], ...] = (), is_rule: bool = True,
             wrapper: WrapperRule | None = None,
             ranges: tuple[tuple[str, OptionRange], ...] = ()) -> CatalogEntry:
    return CatalogEntry(name, f"optimizers.{module}:{class_name}", class_name,
                        f"{KERAS_PACKAGE}>{class_name}", specs, options, is_rule, wrapper,
                        ranges)


# The built-in optimizers, the default first (the order of every optimizer list).
BUILTINS: dict[str, CatalogEntry] = {entry.name: entry for entry in (
    _builtin("adam", "adam", "Adam", (LEARNING_RATE, BETA_1, BETA_2, EPSILON),
             (("amsgrad", False),)),
    _builtin("sgd", "sgd", "SGD", (SGD_LEARNING_RATE, MOMENTUM), (("nesterov", False),)),
    _builtin("adamw", "adamw", "AdamW", (LEARNING_RATE, BETA_1, BETA_2, EPSILON, WEIGHT_DECAY),
             (("amsgrad", False),)),
    _builtin("rmsprop", "rmsprop", "RMSprop", (LEARNING_RATE, RHO, MOMENTUM, EPSILON),
             (("centered", False),)),
    _builtin("adagrad", "adagrad", "Adagrad", (LEARNING_RATE, EPSILON),
             (("initial_accumulator_value", 0.1),),
             ranges=(("initial_accumulator_value",
                      OptionRange(0.0, math.inf, "a finite float >= 0")),)),
    _builtin("diffgrad", "diffgrad", "DiffGrad", (LEARNING_RATE, BETA_1, BETA_2, EPSILON)),
    _builtin("adadelta", "adadelta", "Adadelta", (LEARNING_RATE, ADADELTA_RHO, EPSILON)),
    _builtin("adamax", "adamax", "Adamax", (LEARNING_RATE, BETA_1, ADAMAX_BETA_2, EPSILON)),
    _builtin("ftrl", "ftrl", "Ftrl", (LEARNING_RATE, FTRL_L1, FTRL_L2, FTRL_L2_SHRINKAGE,
                                      FTRL_BETA),
             (("learning_rate_power", -0.5), ("initial_accumulator_value", 0.1)),
             ranges=(("learning_rate_power", OptionRange(-math.inf, 0.0, "a finite float <= 0")),
                     ("initial_accumulator_value",
                      OptionRange(0.0, math.inf, "a finite float >= 0")))),
    _builtin("nadam", "nadam", "Nadam", (LEARNING_RATE, BETA_1, BETA_2, EPSILON),
             (("schedule_decay", 0.004),),
             ranges=(("schedule_decay", OptionRange(0.0, math.inf, "a finite float >= 0")),)),
    _builtin("accumulation", "accumulation", "GradientAccumulation", (),
             (("inner", "adam"), ("accumulation_steps", 2)), is_rule=True,
             wrapper=WrapperRule(inner_specs_only=True, inner_must_be_rule=True,
                                 passes_inner_options=True),
             ranges=(("accumulation_steps", OptionRange(
                 1, MAX_ACCUMULATION_STEPS, f"an int in [1, {MAX_ACCUMULATION_STEPS}]")),)),
    _builtin("lookahead", "lookahead", "Lookahead", (SYNC_PERIOD, SLOW_STEP_SIZE),
             (("inner", "adam"),), is_rule=False,
             wrapper=WrapperRule(inner_specs_only=False, inner_must_be_rule=False)),
    _builtin("moving_average", "moving_average", "MovingAverage", (AVERAGE_DECAY,),
             (("inner", "adam"), ("start_step", 0), ("dynamic_decay", False)), is_rule=False,
             wrapper=WrapperRule(inner_specs_only=False, inner_must_be_rule=False),
             ranges=(("start_step", OptionRange(0, math.inf, "an int >= 0",
                                                names_field_twice=True)),)),
    _builtin("lion", "lion", "Lion",
             (LEARNING_RATE, LION_BETA_1, LION_BETA_2, DECOUPLED_WEIGHT_DECAY)),
    _builtin("lamb", "lamb", "Lamb",
             (LEARNING_RATE, BETA_1, BETA_2, EPSILON, DECOUPLED_WEIGHT_DECAY)),
    _builtin("adafactor", "adafactor", "Adafactor",
             (LEARNING_RATE, BETA_2_DECAY, EPSILON_1, EPSILON_2, CLIP_THRESHOLD),
             (("relative_step", True),)),
    _builtin("muon", "muon", "Muon", MUON_SPECS,
             (("nesterov", True), ("ns_steps", 5), ("exclude_embeddings", True)),
             ranges=(("ns_steps", OptionRange(0, 100, "an int in [0, 100]")),)),
    _builtin("schedule_free_adamw", "schedule_free", "ScheduleFreeAdamW", SCHEDULE_FREE_SPECS,
             (("warmup_steps", 0), ("keras3_tf_compat", False)),
             ranges=(("warmup_steps", OptionRange(0, 1_000_000, "an int in [0, 1000000]")),)),
)}


# Registry names of the wrappers (only built-ins wrap: a plugin wrapper is not registered).
WRAPPER_NAMES = tuple(name for name, entry in BUILTINS.items() if entry.wrapper is not None)


def check_inner(wrapper_name: str, shown: str, *, itself: bool, is_wrapper: bool,
                accepted: bool) -> None:
    """The one rule of which inner optimizer a wrapper accepts, from facts its two callers read
    (`registry.validate_options` from the catalog, `wrapping.check_inner` from the classes).

    Args:
        wrapper_name: the wrapper's registry name.
        shown: how the refusal names the inner optimizer (`'adam'`, or a class name).
        itself: the inner optimizer is this wrapper.
        is_wrapper: the inner optimizer wraps another one.
        accepted: the inner optimizer is of the kind the wrapper calls (a pure rule for
            "accumulation", any OptimizerV2 for "lookahead" and "moving_average").

    Raises:
        ValueError: "option inner=... refused: cannot wrap itself", or "... refused:
            <wrapper> wraps a plain rule (not <the wrappers>)".
    """
    if itself:
        raise ValueError(f"option inner={shown} refused: cannot wrap itself")
    if is_wrapper or not accepted:
        raise ValueError(f"option inner={shown} refused: {wrapper_name} wraps a plain rule "
                         f"(not {', '.join(sorted(WRAPPER_NAMES))})")


def registry_name(cls: type) -> str:
    """The name class `cls` registers under unless told otherwise: its `REGISTRY_NAME` class
    attribute, else its class name in lower case ("adam" for `Adam`: every built-in)."""
    return str(getattr(cls, "REGISTRY_NAME", cls.__name__.lower()))


def own_specs(name: str) -> tuple[HyperSpec, ...]:
    """The built-in `name`'s own `HyperSpec`s: its class's `HYPERPARAMETERS`."""
    return BUILTINS[name].hyperparameters


def option_names(name: str) -> tuple[str, ...]:
    """The built-in `name`'s option names: its class's `OPTIONS`."""
    return tuple(option for option, _ in BUILTINS[name].options)


__all__ = ["BUILTINS", "CatalogEntry", "KERAS_PACKAGE", "MAX_ACCUMULATION_STEPS", "OptionRange",
           "PLUGIN_PREFIX", "WRAPPER_NAMES", "WrapperRule", "check_inner", "registry_name",
           "option_names", "own_specs"]
