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

Plugins add entries too: the plugin check process (`optimizers.plugin_process`) reports a
passing plugin's specs, options and `is_rule` as JSON (`CatalogEntry.to_data`), and the server
registers `CatalogEntry.from_data(...)` without importing the plugin file.

This module imports nothing but `optimizers.hyperparams` (TensorFlow-free).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
from dataclasses import dataclass
from typing import Any, Mapping

from optimizers.hyperparams import (BETA_1, BETA_2, EPSILON, LEARNING_RATE, MOMENTUM,
                                    HyperSpec, InvalidHyperparameter)

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


MAX_ACCUMULATION_STEPS = 10_000  # GradientAccumulation's limit (the agreement test checks it)


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
    def from_data(cls, data: Mapping[str, Any]) -> "CatalogEntry":
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
)}


def pure_rule_sources(class_path: str) -> dict[str, str]:
    """Qualified name -> source text of the class's `coefficients` and `update` and of the
    module-level functions of the same module they call, directly or through each other (e.g.
    `adam_update` -> `adam_decrement`), read from the
    source file with `ast`: the module is NOT imported (no TensorFlow). The same texts as
    `teaching.rule_math.pure_rule_sources(cls)` for a class that defines both methods itself
    (every built-in and the example plugin); an inherited method is not followed.

    Args:
        class_path: a `CatalogEntry.class_path` ("module:Class" or "plugin:/file.py:Class").

    Returns:
        {"Class.coefficients": text, "Class.update": text, "adam_update": text, ...}; empty
        when the file cannot be found or parsed.
    """
    if class_path.startswith(PLUGIN_PREFIX):
        file_name, _, class_name = class_path[len(PLUGIN_PREFIX):].rpartition(":")
    else:
        module_name, _, class_name = class_path.partition(":")
        try:
            spec = importlib.util.find_spec(module_name)  # imports the parent package only
        except (ImportError, ValueError):
            return {}
        file_name = spec.origin if spec is not None else None
    try:
        with open(file_name, encoding="utf-8") as handle:
            text = handle.read()
        tree = ast.parse(text)
    except (OSError, TypeError, SyntaxError, ValueError):
        return {}
    lines = text.splitlines(keepends=True)

    def source(node: ast.AST) -> str:  # as inspect.getsource: decorators and indentation kept
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "".join(lines[first - 1:node.end_lineno])

    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    classes = [node for node in tree.body
               if isinstance(node, ast.ClassDef) and node.name == class_name]
    out: dict[str, str] = {}
    if not classes:
        return out
    methods = {node.name: node for node in classes[0].body if isinstance(node, ast.FunctionDef)}
    for method_name in ("coefficients", "update"):
        method = methods.get(method_name)
        if method is None:
            continue
        out[f"{class_name}.{method_name}"] = source(method)
        pending = [method]
        while pending:  # transitively: `adam_update` calls `adam_decrement`, which does the maths
            for called in _global_names(pending.pop(0)):  # in first-use order, as co_names
                if called in functions and called not in out:
                    out[called] = source(functions[called])
                    pending.append(functions[called])
    return out


def _global_names(function: ast.FunctionDef) -> list[str]:
    """Names `function` reads that it does not assign (its globals), in order of first use."""
    local = {a.arg for a in function.args.args + function.args.kwonlyargs}
    seen: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                local.add(node.id)
            elif node.id not in local and node.id not in seen:
                seen.append(node.id)
    return seen


def own_specs(name: str) -> tuple[HyperSpec, ...]:
    """The built-in `name`'s own `HyperSpec`s: its class's `HYPERPARAMETERS`."""
    return BUILTINS[name].hyperparameters


def option_names(name: str) -> tuple[str, ...]:
    """The built-in `name`'s option names: its class's `OPTIONS`."""
    return tuple(option for option, _ in BUILTINS[name].options)


__all__ = ["BUILTINS", "CatalogEntry", "KERAS_PACKAGE", "MAX_ACCUMULATION_STEPS", "OptionRange",
           "PLUGIN_PREFIX", "WrapperRule",
           "option_names", "own_specs", "pure_rule_sources"]
