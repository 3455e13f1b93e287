"""The run config: every setting of a run in one validated record (pydantic).

A run is reproducible from its `RunConfig` alone (same config and seed give the same curve).
The same model validates the Train page's widgets, imported JSON configs and the command line,
so every entry point refuses bad input with the same message naming the field.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from optimizers import registry
from schedules.table import SCHEDULE_SPECS, float_params, validate_schedule

Dataset = Literal["digits", "breast_cancer", "moons", "tokens"]
Model = Literal["logistic", "mlp", "cnn", "embedding"]
DATASETS: tuple[str, ...] = typing.get_args(Dataset)  # declared once, in the Literal
MODELS: tuple[str, ...] = typing.get_args(Model)
# Which models each dataset can feed: the CNN needs 8x8 images, the embedding model token ids.
COMPATIBLE_MODELS = {
    "digits": ("mlp", "logistic", "cnn"),
    "breast_cancer": ("mlp", "logistic"),
    "moons": ("mlp", "logistic"),
    "tokens": ("embedding",),
}
# A logical device name as `engine.devices.choose_device` takes it (`/device:GPU:0`, `/CPU:1`,
# `CPU:1`) or "" for auto: anything else (paths, code) is refused here, before a run starts.
DEVICE_PATTERN = r"^((/device:|/)?[A-Za-z_]{1,16}:[0-9]{1,4})?$"
DEVICE_ALLOWED = "a logical device name such as /device:CPU:0 or /device:GPU:1, or \"\" (auto)"


class RunConfig(BaseModel):
    """All settings of one training run.

    Fields:
        optimizer: a registry name (`optimizers.registry.names()`).
        hyperparameters: `_set_hyper` name -> float; missing ones take the spec default.
        options: plain optimizer options (e.g. `amsgrad`, `nesterov`, `centered`).
        lr_schedule: None (a constant learning rate) or a Keras serialized schedule
            `{"class_name": ..., "config": {...}}` of one of
            `optimizers.schedule_specs.SCHEDULE_SPECS` (checked there, TF-free); when set it
            replaces the `learning_rate` hyperparameter's value (the run passes
            `learning_rate=schedule`). Stored with every parameter filled in.
        decay: the legacy OptimizerV2 time-based decay, lr / (1 + decay * iterations), in
            [0, 1] (Keras takes any float >= 0; beyond 1 the rate halves within one step).
        dataset, model: see `DATASETS`, `MODELS`, `COMPATIBLE_MODELS`.
        label_noise: fraction in [0, 0.9] of training labels replaced by another class
            (`engine.data.noisy_labels`; validation labels stay clean). 0 here and on the
            command line; the Train page opens with 0.3 (`page_default`: README, "Default
            setup").
        batch_size: examples per step, 1..4096.
        steps: optimizer steps (`apply_gradients` calls), 1..1,000,000.
        seed: seeds the split, the initial weights and the batch order, 0..2**31-1.
        device: a logical device name such as `/device:CPU:0` (`DEVICE_PATTERN`); "" picks the
            first GPU, else CPU.
        eval_every: steps between validation-loss evaluations, 1..10,000.
        dtype: float dtype of the model and optimizer state.
        compiler: how the train step is compiled: "graph" (`tf.function`, the default: the
            first step comes in ~0.4 s) or "xla" (`jit_compile=True`: 2.4-8 s of compilation
            before the first step, 0.9-1.1x the steps/s here). Configs written before this
            field load as "graph". Hyper-gradient runs compile their forward-mode step with
            XLA either way (`hypergrad.stepper.FORWARD_JIT_COMPILE`).
        hypergradients: followed hyperparameter names (each one of the optimizer's specs, or
            `lr_schedule.<name>` for a float parameter of the schedule; `learning_rate` is
            not followable when a schedule replaces it);
            empty = hyper-gradients off; refused for an optimizer that is not a pure rule
            (`registry.is_rule`, e.g. lookahead). When set, the run trains through
            `hypergrad.forward.ForwardModeTrainer` (forward-mode tangents carried along).
        hypergradient_every: steps between hyper-gradient records (exact and one-step), 1..10,000.
        reverse_horizon: T, the truncation window of reverse mode (0 = off), 0..200.
        reverse_every: steps between truncated reverse-mode evaluations, 1..100,000.
        autotune: followed name -> hyper learning rate eta > 0 (RTHO; see `hypergrad.rtho`).
        autotune_every: K, steps between RTHO updates, 1..10,000.
        update_ratio, update_ratio_every: "on" (default) or "off"; K, ||delta w|| / ||w|| per
            variable every K steps among those that record statistics, 1..100,000
            (`engine.diagnostics.update_ratio`).
        sharpness, sharpness_every: "off" (default) or "on"; K, steps between records of the
            top Hessian eigenvalue (and of P^-1 H for Adam/RMSprop), 1..100,000
            (`engine.diagnostics.sharpness`).
        noise_scale, noise_scale_every: "off" (default) or "on"; K, steps between estimates of
            the gradient noise scale, 1..100,000 (`engine.diagnostics.noise_scale`).
        path_landscape: 0 (off) or the seed of the two directions of the landscape along the
            path (`engine.path_landscape`), 0..2**31-1: runs with the same model, data, `seed`
            and this seed share one plane.

    Raises:
        pydantic.ValidationError: any field out of range or unknown; messages name the field.
    """

    model_config = ConfigDict(extra="forbid")

    # `json_schema_extra` holds how each field shows and travels (read by `settings.fields`):
    # `widget` the Train page's session key (default: the field name), `label`/`step`/`help` its
    # widget, `prefix` the URL prefix of a name -> value field (`hp.learning_rate`), `choices`
    # "registry" for a name the registry lists, `group` the Train page's group of an int field
    # ("run", the default, or "hypergradients").
    optimizer: str = Field(registry.DEFAULT_OPTIMIZER, json_schema_extra={
        "choices": "registry", "help": "a Keras 2 OptimizerV2 subclass from optimizers/"})
    hyperparameters: dict[str, float] = Field(
        default_factory=dict, description="an object of hyperparameter name -> number in its "
                                          "range (optimizers.registry.specs)",
        json_schema_extra={"prefix": "hp.", "widget": "hp_"})
    options: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="an object of option name -> value of the default's "
                                          "type (optimizers.registry.option_defaults)",
        json_schema_extra={"prefix": "opt.", "widget": "opt_"})
    lr_schedule: dict[str, Any] | None = Field(
        None, description="null (constant learning rate) or {\"class_name\": one of "
                          + ", ".join(SCHEDULE_SPECS) + ", \"config\": {...}}",
        json_schema_extra={"kind": "schedule", "widget": "lrs_", "param_prefix": "lrs.",
                           "label": "learning-rate schedule",
                           "help": "a Keras LearningRateSchedule replacing learning_rate"})
    decay: float = Field(0.0, ge=0.0, le=1.0, json_schema_extra={
        "label": "decay (legacy)", "step": 0.0001,
        "help": "OptimizerV2's time-based decay: lr / (1 + decay * iterations)"})
    dataset: Dataset = Field(
        "digits", json_schema_extra={"help": "a bundled dataset (scikit-learn or synthetic)"})
    label_noise: float = Field(0.0, ge=0.0, le=0.9, json_schema_extra={
        "label": "label noise", "step": 0.05, "page_default": 0.3,
        "help": "fraction of TRAINING labels replaced by another class (fixed examples; "
                "validation stays clean): adaptive optimizers memorise it, plain SGD less"})
    model: Model = Field(
        "mlp", json_schema_extra={"help": "models this dataset can feed"})
    batch_size: int = Field(128, ge=1, le=4096, json_schema_extra={
        "label": "batch size", "step": 16, "help": "examples per step"})
    steps: int = Field(1000, ge=1, le=1_000_000, json_schema_extra={
        "step": 100, "page_default": 10_000, "help": "optimizer steps (apply_gradients calls)"})
    seed: int = Field(0, ge=0, le=2**31 - 1, json_schema_extra={
        "help": "seeds the split, the initial weights and the batch order"})
    device: str = Field("", max_length=64, pattern=DEVICE_PATTERN, description=DEVICE_ALLOWED,
                        json_schema_extra={"help": "auto = first GPU, else CPU"})
    eval_every: int = Field(25, ge=1, le=10_000, json_schema_extra={
        "label": "eval every", "step": 5, "help": "steps between validation-loss evaluations"})
    dtype: Literal["float32", "float64"] = Field("float32", json_schema_extra={
        "help": "float dtype of the model weights and the optimizer slots"})
    compiler: Literal["graph", "xla"] = Field("graph", json_schema_extra={
        "label": "train step compiled as",
        "help": "graph: tf.function, first step in ~0.4 s; xla: tf.function(jit_compile=True), "
                "first step after 3-8 s of XLA compilation, about as many steps/s on these "
                "models (measured on 2 CPU cores)"})
    hypergradients: list[str] = Field(
        default_factory=list, description="a list of the optimizer's hyperparameter names",
        json_schema_extra={"widget": "hg_follow", "help": "followed hyperparameters: "
                                                          "dE_val/dλ is recorded for each"})
    hypergradient_every: int = Field(5, ge=1, le=10_000, json_schema_extra={
        "widget": "hg_every", "group": "hypergradients", "label": "every (steps)",
        "help": "steps between hyper-gradient records"})
    reverse_horizon: int = Field(0, ge=0, le=200, json_schema_extra={
        "widget": "hg_reverse_horizon", "group": "hypergradients", "label": "reverse horizon T",
        "help": "truncated reverse mode over the last T steps (0 = off)"})
    reverse_every: int = Field(50, ge=1, le=100_000, json_schema_extra={
        "widget": "hg_reverse_every", "group": "hypergradients", "label": "reverse every",
        "help": "steps between truncated reverse-mode evaluations"})
    autotune: dict[str, float] = Field(
        default_factory=dict, description="an object of followed hyperparameter name -> hyper "
                                          "learning rate in (0, inf)",
        json_schema_extra={"prefix": "autotune.", "widget": "hg_autotune",
                           "help": "auto-tuned from the start: name -> hyper learning rate"})
    autotune_every: int = Field(10, ge=1, le=10_000, json_schema_extra={
        "widget": "hg_autotune_every", "group": "hypergradients", "label": "auto-tune every K",
        "help": "steps between RTHO updates (switched on per hyperparameter on the "
                "Hyper-gradients page)"})
    path_landscape: int = Field(0, ge=0, le=2**31 - 1, json_schema_extra={
        "label": "path landscape seed",
        "help": "0 = off; else the seed of two filter-normalised random directions (Li et al. "
                "2018): the run projects its weights onto their plane as it trains, and computes "
                "the loss on a 21x21 grid of the plane and on the line from its start "
                "(Landscape page)"})

    # Training-dynamics diagnostics (`engine.diagnostics`): sharpness and noise scale cost
    # Hessian-vector products / per-example gradients, so they are off unless asked for and
    # taken every K steps, K chosen so that they cost <= 10 % of the plain step on the digits
    # MLP (bench/bench_diagnostics.py, Adam, batch 128: a record costs ~1,050 steps for the
    # sharpness (two eigenvalues), ~20 for the noise scale, ~0.2 for the update ratio, which
    # reuses the recorded update norm).
    update_ratio: Literal["on", "off"] = Field("on", json_schema_extra={
        "label": "update/weight ratio",
        "help": "record ||Δw|| / ||w|| per variable every K recorded steps (cheap)"})
    update_ratio_every: int = Field(10, ge=1, le=100_000, json_schema_extra={
        "group": "diagnostics", "label": "update ratio every K",
        "help": "steps between update/weight-ratio records (on steps that record statistics)"})
    sharpness: Literal["off", "on"] = Field("off", json_schema_extra={
        "help": "record the top Hessian eigenvalue (and P⁻¹H's for Adam/RMSprop) against its "
                "edge-of-stability threshold, every K steps"})
    sharpness_every: int = Field(10_000, ge=1, le=100_000, json_schema_extra={
        "group": "diagnostics", "label": "sharpness every K",
        "help": "steps between sharpness records (20 Lanczos Hessian-vector products each)"})
    noise_scale: Literal["off", "on"] = Field("off", json_schema_extra={
        "label": "noise scale",
        "help": "record the gradient noise scale B_simple = tr(Σ)/|G|² every K steps"})
    noise_scale_every: int = Field(200, ge=1, le=100_000, json_schema_extra={
        "group": "diagnostics", "label": "noise scale every K",
        "help": "steps between noise-scale estimates (64 per-example gradients each)"})

    @field_validator("lr_schedule", mode="before")
    @classmethod
    def _check_schedule(cls, value: Any) -> dict[str, Any] | None:
        # before pydantic's own parsing: only the spec table decides, nothing is called
        return validate_schedule("lr_schedule", value)

    @model_validator(mode="after")
    def _check_optimizer_and_model(self) -> RunConfig:
        try:
            self.options = registry.validate_options(self.optimizer, dict(self.options))
            self.hyperparameters = registry.validate_hypers(
                self.optimizer, dict(self.hyperparameters), self.options
            )
        except KeyError as error:  # pydantic reports ValueError, not KeyError
            raise ValueError(error.args[0]) from None
        if self.model not in COMPATIBLE_MODELS[self.dataset]:
            raise ValueError(
                f"model={self.model!r} refused for dataset={self.dataset!r}: "
                f"allowed {', '.join(COMPATIBLE_MODELS[self.dataset])}"
            )
        if self.lr_schedule is not None and "learning_rate" not in self.hyperparameters:
            raise ValueError(f"lr_schedule={self.lr_schedule['class_name']!r} refused: "
                             f"{self.optimizer} has no learning_rate to schedule")
        self._check_hypergradients()
        return self

    def followable(self) -> list[str]:
        """Hyperparameter names whose hyper-gradient this config may follow: the optimizer's
        specs (without `learning_rate` when a schedule replaces it) and `lr_schedule.<name>` for
        each float parameter of the schedule."""
        names = [s.name for s in registry.specs(self.optimizer, self.options)]
        if self.lr_schedule is not None:
            names = [n for n in names if n != "learning_rate"]
        return names + [f"lr_schedule.{n}" for n in float_params(self.lr_schedule)]

    def _check_hypergradients(self) -> None:
        names = self.followable()
        followed = list(dict.fromkeys(self.hypergradients))
        if followed and not registry.is_rule(self.optimizer):
            raise ValueError(
                f"hypergradients={followed} refused: {self.optimizer} is not a pure update rule "
                "(no differentiable coefficients/update, its step is an apply_gradients "
                "override); hyper-gradients need a RuleOptimizer such as "
                f"{', '.join(n for n in registry.names() if registry.is_rule(n))}"
            )
        for name in followed:
            if name not in names:
                raise ValueError(
                    f"hypergradients={name!r} refused: {self.optimizer} has {', '.join(names)}"
                )
        self.hypergradients = followed
        started = (self.lr_schedule or {}).get("start_step")
        if followed and started:
            raise ValueError(
                f"lr_schedule.start_step={started} refused with "
                "hypergradients: the differentiated schedule runs from step 0; use start_step 0")
        if self.reverse_horizon and not followed:
            raise ValueError(f"reverse_horizon={self.reverse_horizon} refused: follow at least "
                             "one hyperparameter (hypergradients) first")
        for name, eta in self.autotune.items():
            if name not in followed:
                raise ValueError(f"autotune={name!r} refused: only followed hyperparameters "
                                 f"(hypergradients={followed}) can be auto-tuned")
            if not (math.isfinite(eta) and eta > 0):
                raise ValueError(f"autotune[{name!r}]={eta!r} refused: the hyper learning rate "
                                 "must be a float in (0, inf)")

    def to_json_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-ready) holding every field."""
        return self.model_dump(mode="json")


def allowed(field: str) -> str:
    """What `RunConfig` field `field` accepts, as text for an error message.

    E.g. `an integer in [1, 4096]`, `one of 'float32', 'float64'`; an unknown `field` gives the
    list of fields.
    """
    info = RunConfig.model_fields.get(field)
    if info is None:
        return "no such field; the fields are " + ", ".join(RunConfig.model_fields)
    if field == "optimizer":  # read at call time: plugins join the registry after import
        return "one of " + ", ".join(registry.names())
    if info.description:
        return info.description
    if typing.get_origin(info.annotation) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(info.annotation)))
    bounds = {name: getattr(m, name) for m in info.metadata for name in ("ge", "le")
              if hasattr(m, name)}
    if info.annotation is int and len(bounds) == 2:
        return f"an integer in [{bounds['ge']}, {bounds['le']}]"
    if info.annotation is float and len(bounds) == 2:
        return f"a float in [{bounds['ge']:g}, {bounds['le']:g}]"
    return f"a {getattr(info.annotation, '__name__', str(info.annotation))}"


def describe_error(error: ValidationError) -> tuple[str, str]:
    """(field, message) of the first error of a `RunConfig` validation, for every entry point.

    The field is the dotted location (`steps`, `hyperparameters.learning_rate`); a model-level
    check names its field at the start of its message (`model='cnn' refused ...`), else the
    field is `config`. The message keeps pydantic's text, the value given (shortened) and what
    the field allows.
    """
    first = error.errors()[0]
    location = [str(p) for p in first["loc"]]
    message = str(first["msg"]).removeprefix("Value error, ")
    if not location:
        match = re.match(r"(\w+)[=\[]", message)  # `model='cnn' ...`, `autotune['lr']=...`
        field = match.group(1) if match and match.group(1) in RunConfig.model_fields else "config"
        return field, message
    field = ".".join(location)
    if first["type"] == "extra_forbidden":
        fields = ", ".join(RunConfig.model_fields)
        return field, f"{message}: unknown field; allowed fields: {fields}"
    if first["type"] == "value_error":
        # a nested refusal names its own path: `lr_schedule.config.decay_steps=0 refused ...`
        nested = re.match(r"([\w.\[\]]+)=", message)
        if nested and nested.group(1).startswith(field + "."):
            field = nested.group(1)
        return field, message
    if first["type"] == "string_pattern_mismatch":  # the regex itself tells a user nothing
        message = "refused: not in the expected form"
    given = repr(first["input"])
    given = given if len(given) <= 40 else given[:37] + "..."
    return field, f"{message} (got {given}); allowed: {allowed(location[0])}"
