"""One table of settings: every `RunConfig` field reaches the Train page, the share link, the
config file and the command line, generated from `RunConfig` itself.

`test_every_field_everywhere` runs once per field of `RunConfig.model_fields`: a field added to
`RunConfig` is tested here without editing this file, and fails until every entry point carries
it (a field of a type no generator knows fails in `settings.fields.kind`).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pydantic
import pytest

from lab_cli.cli import build_parser, config_from_args
from settings import fields
from settings.cli_flags import flag
from tests.cli_argv import to_argv
from settings.config_file import parse_config
from settings.decode import hyper_model
from settings.run_config import RunConfig
from settings.share_link import from_query_params, to_query_params

DEFAULT = RunConfig()
# Candidate non-default values by kind (the first one RunConfig accepts is used), and bases a
# value may need (auto-tuning and reverse mode need a followed hyperparameter).
CANDIDATES = {
    "str": ["/device:CPU:0", "sgd"],
    "names": [["learning_rate"]],
    "mapping": [{"learning_rate": 0.0123456789}, {"amsgrad": True}],
    "float": [0.00123456789],
    "schedule": [{"class_name": "CosineDecay",
                  "config": {"initial_learning_rate": 0.0123456789, "decay_steps": 700,
                             "alpha": 0.05, "warmup_target": 0.1, "warmup_steps": 30}}],
}
BASES = [{}, {"hypergradients": ["learning_rate"]}]


def non_default(field: str) -> RunConfig:
    """A valid `RunConfig` whose `field` differs from the default's."""
    kind = fields.kind(field)  # TypeError for a type no generator knows
    if kind == "int":
        low, high = fields.bounds(field)
        value = fields.default(field)
        candidates = [value + 1 if value < high else value - 1, low, high]
    elif kind == "choice":
        candidates = [c for c in fields.choices(field) if c != fields.default(field)]
    else:
        candidates = CANDIDATES[kind]
    if field == "autotune":
        candidates = [{"learning_rate": 0.25}]
    for base in BASES:
        for value in candidates:
            try:
                config = RunConfig(**{**base, field: value})
            except pydantic.ValidationError:
                continue
            if getattr(config, field) != getattr(DEFAULT, field):
                return config
    raise AssertionError(f"no valid non-default value found for RunConfig.{field}")


@pytest.mark.parametrize("field", list(RunConfig.model_fields))
def test_every_field_everywhere(field):
    config = non_default(field)
    assert getattr(config, field) != getattr(DEFAULT, field)

    # the Train page: a session key with the table's default, and a lossless two-way map
    defaults = fields.session_defaults()
    key = fields.session_key(field)
    assert any(k == key or k.startswith(key) for k in defaults), (field, key)
    assert fields.config_from_session(fields.session_values(config)) == config
    assert fields.config_from_session(defaults) == fields.page_defaults()

    # the share link: a key for the field, and the same config back
    params = to_query_params(config)
    assert all(isinstance(v, str) for v in params.values())
    url_keys = [k for k in params if k == field or (fields.prefix(field)
                                                    and k.startswith(fields.prefix(field)))]
    assert url_keys, (field, params)
    assert from_query_params(params) == config

    # the config file: a bare RunConfig document
    assert parse_config(json.dumps(config.to_json_dict())) == config

    # the command line: its flags (generated), parsed back to the same config
    argv = to_argv(config)
    if field not in ("hyperparameters", "options"):
        assert flag(field) in argv
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", *argv]), parser) == config


def test_train_defaults_are_the_table_defaults():
    defaults = fields.session_defaults()
    for field in RunConfig.model_fields:
        if fields.kind(field) == "int":
            assert defaults[fields.session_key(field)] == getattr(fields.page_defaults(), field)
            args = fields.number_input_args(field)
            assert (args["min_value"], args["max_value"]) == fields.bounds(field)
    assert defaults["dtype"] == "float32" and defaults["device"] == "auto"
    # the one page-only default: the Train page opens with label noise, the CLI without
    assert defaults["label_noise"] == 0.3 and fields.default("label_noise") == 0.0
    assert defaults["steps"] == 10_000 and fields.default("steps") == 1000
    assert fields.page_defaults() == RunConfig(label_noise=0.3, steps=10_000)
    assert fields.number_input_args("reverse_horizon")["max_value"] == 200
    assert fields.number_input_args("seed")["max_value"] == 2**31 - 1


def test_link_carries_the_hypergradient_settings():
    """Drift bug: a shared link silently dropped the hyper-gradient settings."""
    config = RunConfig(hypergradients=["learning_rate", "beta_1"], hypergradient_every=3,
                       reverse_horizon=20, reverse_every=7, autotune={"learning_rate": 0.01},
                       autotune_every=4, dtype="float64")
    params = to_query_params(config)
    assert params["hypergradients"] == "learning_rate,beta_1"
    assert (params["hypergradient_every"], params["reverse_horizon"], params["reverse_every"],
            params["autotune_every"], params["dtype"]) == ("3", "20", "7", "4", "float64")
    assert params["autotune.learning_rate"] == "0.01"
    back = from_query_params(params)
    assert back == config and back.reverse_horizon == 20 and back.autotune == {
        "learning_rate": 0.01}


def test_train_setup_reads_dtype():
    """Drift bug: `dtype` was parsed from the URL but no widget or setup used it."""
    state = {**fields.session_defaults(), "dtype": "float64"}
    assert fields.config_from_session(state).dtype == "float64"


def test_hyper_model_is_generated_from_the_specs():
    model = hyper_model("adam")
    assert list(model.model_fields) == ["learning_rate", "beta_1", "beta_2", "epsilon"]
    assert model().learning_rate == 0.001
    schema = model.model_json_schema()["properties"]
    assert schema["learning_rate"]["exclusiveMinimum"] == 0 and schema["learning_rate"][
        "maximum"] == 10
    assert schema["beta_1"]["minimum"] == 0 and schema["beta_1"]["exclusiveMaximum"] == 1
    for bad in ({"beta_1": 1.0}, {"learning_rate": math.inf}, {"epsilon": math.nan},
                {"momentum": 0.9}):
        with pytest.raises(pydantic.ValidationError):
            model.model_validate(bad)
    assert hyper_model("adam") is model  # cached
    assert "momentum" in hyper_model("accumulation", {"inner": "sgd"}).model_fields


def test_settings_imports_neither_streamlit_nor_tensorflow():
    for path in (Path(__file__).resolve().parents[1] / "settings").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        assert not imported & {"streamlit", "tensorflow", "tf_keras", "keras"}, (path, imported)


def test_every_field_has_its_place_on_the_train_page(tmp_path, monkeypatch):
    """The Train page draws a widget for every field (an int field of the table gets a number
    input with the table's bounds without editing the page)."""
    from tests._pages import page_test

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    at = page_test("train", default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    widgets = {w.key: w for kind in ("number_input", "selectbox", "checkbox", "multiselect",
                                     "slider") for w in getattr(at, kind)}
    for field in RunConfig.model_fields:
        key = fields.session_key(field)
        if field == "autotune":  # switched on per name on the Hyper-gradients page
            assert key in at.session_state, field
            continue
        assert any(k == key or k.startswith(key) for k in widgets), (field, key)
        if fields.kind(field) == "int":
            widget = widgets[key]
            assert (widget.min, widget.max) == fields.bounds(field), field
            assert widget.value == getattr(fields.page_defaults(), field)
