"""Config import: every accepted shape, and every refusal with its own message naming the field."""

from __future__ import annotations

import json

import pytest

from settings.run_config import RunConfig
from runs.io.export import load_import
from settings.config_file import MAX_BYTES, ConfigImportError, parse_config
from runs.io.export import export_config

CONFIG = RunConfig(optimizer="sgd", hyperparameters={"learning_rate": 0.05, "momentum": 0.9},
                   options={"nesterov": True}, dataset="moons", model="logistic",
                   batch_size=32, steps=200, seed=3, eval_every=10)


def _exported(config: RunConfig = CONFIG) -> dict:
    run = {"id": 7, "name": "x", "config": config.to_json_dict(), "status": "finished",
           "optimizer_config": {"name": "SGD", "learning_rate": 0.05, "momentum": 0.9,
                                "nesterov": True},
           "device": "/device:CPU:0", "versions": {"tensorflow": "2.21.0"}}
    return export_config(run)


def test_export_document_round_trips_to_the_same_config():
    assert parse_config(json.dumps(_exported())) == CONFIG


def test_bare_run_config_and_class_name_as_optimizer():
    assert parse_config(json.dumps(CONFIG.to_json_dict())) == CONFIG
    bare = {**CONFIG.to_json_dict(), "optimizer": "SGD"}
    assert parse_config(json.dumps(bare)) == CONFIG


def test_keras_style_entry():
    text = json.dumps({"class_name": "SGD", "config": {
        "name": "SGD", "learning_rate": 0.05, "momentum": 0.9, "nesterov": True, "decay": 0.0,
        "clipnorm": None}, "dataset": "moons", "model": "logistic", "batch_size": 32,
        "steps": 200, "seed": 3, "eval_every": 10})
    assert parse_config(text) == CONFIG


def test_int_accepted_for_a_float_and_defaults_filled():
    config = parse_config('{"optimizer": "adam", "hyperparameters": {"learning_rate": 1}}')
    assert config.hyperparameters == {"learning_rate": 1.0, "beta_1": 0.9, "beta_2": 0.999,
                                      "epsilon": 1e-7}


def test_load_import_reads_a_config_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_exported()))
    assert load_import(str(path)) == CONFIG


BAD = [
    # (case, document or raw text, field, fragment of the message)
    ("malformed", '{"optimizer": "adam",', "", "malformed JSON"),
    ("not an object", "[1, 2]", "", "JSON object, not a list"),
    ("NaN", '{"steps": NaN}', "steps",
     "nan refused: numbers must be finite; allowed: an integer in [1, 1000000]"),
    ("not utf-8", b'{"a": "\xff"}', "", "not UTF-8"),
    ("module path as class", {"class_name": "os.system", "config": {}}, "class_name",
     "'os.system' is not a registered optimizer"),
    ("module path as optimizer", {"optimizer": "subprocess.Popen"}, "optimizer",
     "nothing named in a config file is imported or evaluated"),
    ("unknown optimizer", {"optimizer": "shampoo"}, "optimizer", "known: adam, sgd"),
    ("class mismatch", {**_exported(), "optimizer": {"class_name": "Adam"}},
     "optimizer.class_name", "does not match run_config.optimizer='sgd'"),
    ("exported class is a module", {**_exported(), "optimizer": {"class_name": "builtins.eval"}},
     "optimizer.class_name", "is not a registered optimizer"),
    ("unknown hyperparameter", {"optimizer": "adam", "hyperparameters": {"momentum": 0.9}},
     "hyperparameters.momentum", "unknown hyperparameter for adam"),
    ("out of range", {"optimizer": "adam", "hyperparameters": {"beta_1": 1.0}},
     "hyperparameters.beta_1", "beta_1 must be a float in [0, 1)"),
    ("negative lr", {"optimizer": "sgd", "hyperparameters": {"learning_rate": -0.1}},
     "hyperparameters.learning_rate", "must be a float in (0, 10]"),
    ("string hyperparameter", {"hyperparameters": {"learning_rate": "0.1"}},
     "hyperparameters.learning_rate", "learning_rate='0.1' refused"),
    ("bool hyperparameter", {"hyperparameters": {"epsilon": True}},
     "hyperparameters.epsilon", "epsilon=True refused"),
    ("hyperparameters not a dict", {"hyperparameters": [0.1]}, "hyperparameters",
     "must be a JSON object"),
    ("string steps", {"steps": "500"}, "steps", "valid integer (got '500')"),
    ("fractional seed", {"seed": 1.5}, "seed", "valid integer"),
    ("steps out of range", {"steps": 0}, "steps", "greater than or equal to 1"),
    ("unknown field", {"optimiser": "adam"}, "optimiser", "Extra inputs are not permitted"),
    ("unknown dataset", {"dataset": "imagenet"}, "dataset", "'digits', 'breast_cancer'"),
    ("incompatible model", {"dataset": "tokens", "model": "mlp"}, "model",
     "refused for dataset='tokens'"),
    ("unknown option", {"optimizer": "adam", "options": {"nesterov": True}}, "options.nesterov",
     "adam takes amsgrad"),
    ("wrong option type", {"optimizer": "adam", "options": {"amsgrad": "yes"}},
     "options.amsgrad", "must be a bool"),
    ("keras decay", {"class_name": "SGD", "config": {"decay": -0.1}}, "decay",
     "greater than or equal to 0"),
    ("keras clipnorm", {"class_name": "SGD", "config": {"clipnorm": 1.0}}, "config.clipnorm",
     "do not take clipnorm"),
    ("run_config missing", {"format": "optimizer-lab/run-config"}, "run_config", "missing"),
]


@pytest.mark.parametrize("case, document, field, fragment", BAD, ids=[b[0] for b in BAD])
def test_each_bad_import_has_its_own_clear_error(case, document, field, fragment):
    data = document if isinstance(document, (str, bytes)) else json.dumps(document)
    with pytest.raises(ConfigImportError) as error:
        parse_config(data)
    assert error.value.field == field
    assert fragment in str(error.value)
    if field:
        assert str(error.value).startswith(f"{field}: ")


def test_oversized_file_refused_before_parsing(tmp_path):
    padding = {"optimizer": "adam", "pad": "x" * MAX_BYTES}
    with pytest.raises(ConfigImportError, match=r"at most 65,536 bytes"):
        parse_config(json.dumps(padding))
    path = tmp_path / "big.json"
    path.write_text(json.dumps(padding))
    with pytest.raises(ConfigImportError, match=r"a config file may hold at most 65,536 bytes"):
        load_import(str(path))


def test_no_code_runs_for_a_hostile_name(monkeypatch):
    import importlib

    calls = []
    monkeypatch.setattr(importlib, "import_module", lambda *a, **k: calls.append(a))
    with pytest.raises(ConfigImportError):
        parse_config('{"class_name": "os.system", "config": {"command": "touch /tmp/pwned"}}')
    assert calls == []


DUPLICATES = [
    # (case, raw JSON, field): json.loads alone keeps the last value of a repeated key
    ("top level", '{"optimizer": "os.system", "optimizer": "adam"}', "optimizer"),
    ("hyperparameter", '{"hyperparameters": {"learning_rate": 0.1, "learning_rate": 5}}',
     "hyperparameters.learning_rate"),
    ("inside an export", '{"format": "optimizer-lab/run-config", "run_config": {"optimizer": '
                         '"sgd", "options": {"nesterov": true, "nesterov": false}}}',
     "run_config.options.nesterov"),
    ("inside a list", '{"pad": [{"a": 1, "a": 2}]}', "pad.0.a"),
    ("unknown field twice", '{"x": 1, "x": 2}', "x"),
]


@pytest.mark.parametrize("case, text, field", DUPLICATES, ids=[d[0] for d in DUPLICATES])
def test_duplicate_keys_are_refused_naming_the_key(case, text, field):
    with pytest.raises(ConfigImportError) as error:
        parse_config(text)
    assert error.value.field == field
    key = field.split(".")[-1]
    assert str(error.value).startswith(f"{field}: duplicate key {key!r} refused")


def test_same_key_in_different_objects_is_fine():
    config = parse_config('{"optimizer": "adam", "hyperparameters": {"learning_rate": 0.5}, '
                          '"autotune": {"learning_rate": 0.1}, "hypergradients": '
                          '["learning_rate"]}')
    assert config.hyperparameters["learning_rate"] == 0.5
    assert config.autotune == {"learning_rate": 0.1}
