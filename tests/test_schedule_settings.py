"""`RunConfig.lr_schedule` and `decay` through every entry point, the TF-free spec table against
tf_keras's allow-list, and refusals that name the field with nothing executed."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pydantic
import pytest

from lab_cli.cli import build_parser, config_from_args
from schedules.table import SCHEDULE_SPECS, params, validate_schedule
from settings import fields
from settings.cli_flags import FlagError
from tests.cli_argv import to_argv
from settings.config_file import ConfigImportError, parse_config
from settings.run_config import RunConfig
from settings.share_link import QueryParamsError, from_query_params, to_query_params

PIECEWISE = {"class_name": "PiecewiseConstantDecay",
             "config": {"boundaries": [100, 250, 400], "values": [0.1, 0.05, 0.01, 0.001]}}
COSINE = {"class_name": "CosineDecay",
          "config": {"initial_learning_rate": 0.001, "decay_steps": 900, "alpha": 0.1,
                     "warmup_target": 0.02, "warmup_steps": 100}}
RESTARTS = {"class_name": "CosineDecayRestarts",
            "config": {"initial_learning_rate": 0.05, "first_decay_steps": 80, "t_mul": 1.5}}


def default_config(class_name):
    """`{"class_name": class_name, "config": {every parameter: its default}}`."""
    return {"class_name": class_name,
            "config": {p.name: (list(p.default) if isinstance(p.default, list) else p.default)
                       for p in params(class_name)}}


def test_spec_table_matches_the_keras_classes():
    from optimizers.keras_schedules import ALLOWED_SCHEDULES

    assert list(SCHEDULE_SPECS) == list(ALLOWED_SCHEDULES)
    for name, cls in ALLOWED_SCHEDULES.items():
        keras_params = set(inspect.signature(cls.__init__).parameters) - {"self", "name"}
        assert {p.name for p in SCHEDULE_SPECS[name]} == keras_params, name
        # every default builds a working Keras schedule
        from optimizers.keras_schedules import schedule_from_config

        schedule_from_config("lr_schedule", default_config(name))


def test_validation_does_not_import_tensorflow():
    code = ("import sys; from settings.run_config import RunConfig; "
            "from schedules.table import validate_schedule; "
            f"validate_schedule('lr_schedule', {COSINE!r}); "
            "print('tensorflow' in sys.modules, 'optimizers.keras_schedules' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=str(__import__('pathlib').Path(__file__).parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    # the schedule table itself never loads TensorFlow (the registry may, until it is TF-free)
    assert out.stdout.split()[-1] == "False", out.stdout


@pytest.mark.parametrize("schedule", [PIECEWISE, COSINE, RESTARTS, None])
@pytest.mark.parametrize("decay", [0.0, 0.00125])
def test_round_trip_link_file_cli_and_session(schedule, decay):
    config = RunConfig(optimizer="sgd", lr_schedule=schedule, decay=decay)
    assert config.decay == decay
    if schedule is not None:
        assert config.lr_schedule["config"] == {**validate_schedule("s", schedule)["config"]}
    params = to_query_params(config)
    assert all(isinstance(v, str) for v in params.values())
    assert from_query_params(params) == config
    assert parse_config(json.dumps(config.to_json_dict())) == config
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", *to_argv(config)]), parser) == config
    assert fields.config_from_session(fields.session_values(config)) == config


def test_link_keys_are_readable():
    params = to_query_params(RunConfig(lr_schedule=PIECEWISE, decay=0.001))
    assert params["lr_schedule"] == "PiecewiseConstantDecay"
    assert params["lrs.boundaries"] == "100,250,400"
    assert params["lrs.values"] == "0.1,0.05,0.01,0.001"
    assert params["decay"] == "0.001"
    cosine = to_query_params(RunConfig(lr_schedule={"class_name": "CosineDecay",
                                                    "config": {"decay_steps": 50}}))
    assert "lrs.warmup_target" not in cosine  # None is left out


def test_export_document_carries_the_schedule():
    from runs.io.export import export_config

    config = RunConfig(optimizer="sgd", lr_schedule=COSINE, decay=0.0005)
    document = export_config({"id": 3, "config": config.to_json_dict(), "status": "finished",
                              "optimizer_config": None})
    assert parse_config(json.dumps(document)) == config


def test_keras_style_entry_with_a_serialized_schedule_and_decay():
    text = json.dumps({"class_name": "SGD", "config": {
        "learning_rate": {"module": "keras.optimizers.schedules", "class_name": "ExponentialDecay",
                          "config": {"initial_learning_rate": 0.1, "decay_steps": 10,
                                     "decay_rate": 0.5, "staircase": True, "name": None},
                          "registered_name": None},
        "decay": 0.01, "momentum": 0.9}})
    config = parse_config(text)
    assert config.lr_schedule == {"class_name": "ExponentialDecay", "config": {
        "initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5, "staircase": True}}
    assert config.decay == 0.01 and config.hyperparameters["momentum"] == 0.9


BAD = [  # (lr_schedule, field named, words)
    ({"class_name": "os.system", "config": {}}, "lr_schedule.class_name", "one of"),
    ({"class_name": "LambdaSchedule", "config": {}}, "lr_schedule.class_name", "ExponentialDecay"),
    ({"class_name": "ExponentialDecay", "config": {"decay_steps": 0}},
     "lr_schedule.config.decay_steps", "an integer in [1, 1000000]"),
    ({"class_name": "ExponentialDecay", "config": {"decay_steps": 2.5}},
     "lr_schedule.config.decay_steps", "an integer"),
    ({"class_name": "ExponentialDecay", "config": {"decay_rate": 1.5}},
     "lr_schedule.config.decay_rate", "(0, 1]"),
    ({"class_name": "ExponentialDecay", "config": {"staircase": "yes"}},
     "lr_schedule.config.staircase", "true or false"),
    ({"class_name": "ExponentialDecay", "config": {"initial_learning_rate": {
        "class_name": "builtins.eval", "config": {"source": "1/0"}}}},
     "lr_schedule.config.initial_learning_rate", "a float in (0, 10]"),
    ({"class_name": "ExponentialDecay", "config": {"fn": "lambda s: s"}},
     "lr_schedule.config.fn", "absent"),
    ({"class_name": "PiecewiseConstantDecay", "config": {"boundaries": [5, 3],
                                                         "values": [1.0, 0.5, 0.1]}},
     "lr_schedule.config.boundaries", "strictly increasing"),
    ({"class_name": "PiecewiseConstantDecay", "config": {"boundaries": [5],
                                                         "values": [1.0, 0.5, 0.1]}},
     "lr_schedule.config.values", "len(boundaries) + 1 = 2"),
    ({"class_name": "CosineDecay", "config": {"name": "x; import os"}},
     "lr_schedule.config.name", "plain name"),
    ("ExponentialDecay", "lr_schedule", "class_name"),
]


@pytest.mark.parametrize("schedule, field, words", BAD)
def test_bad_schedules_are_refused_naming_the_field(schedule, field, words):
    document = json.dumps({"optimizer": "sgd", "lr_schedule": schedule})
    with pytest.raises(ConfigImportError) as refused:
        parse_config(document)
    assert refused.value.field == field, str(refused.value)
    assert words in str(refused.value) and "refused" in str(refused.value)
    with pytest.raises(pydantic.ValidationError):
        RunConfig(lr_schedule=schedule)


def test_bad_decay_link_and_flag_are_refused_naming_them():
    with pytest.raises(ConfigImportError, match="decay"):
        parse_config(json.dumps({"decay": -0.5}))
    with pytest.raises(ConfigImportError, match="decay"):
        parse_config('{"decay": NaN}')
    with pytest.raises(QueryParamsError) as link:
        from_query_params({"optimizer": "sgd", "decay": "nan"})
    assert link.value.field == "decay"
    with pytest.raises(QueryParamsError) as link:
        from_query_params({"optimizer": "sgd", "lr_schedule": "ExponentialDecay",
                           "lrs.decay_steps": "0"})
    assert link.value.field == "lrs.decay_steps" and "[1, 1000000]" in str(link.value)
    with pytest.raises(QueryParamsError) as link:
        from_query_params({"optimizer": "sgd", "lrs.decay_steps": "10"})
    assert link.value.field == "lrs.decay_steps" and "lr_schedule" in str(link.value)
    with pytest.raises(QueryParamsError) as link:
        from_query_params({"optimizer": "sgd", "lr_schedule": "__import__('os')"})
    assert link.value.field == "lr_schedule"
    parser = build_parser()
    with pytest.raises((FlagError, SystemExit)):
        config_from_args(parser.parse_args(
            ["train", "--lr-schedule", '{"class_name": "os.system"}']), parser)


def test_schedule_parameters_may_be_followed_and_learning_rate_may_not():
    config = RunConfig(optimizer="sgd", lr_schedule=COSINE,
                       hypergradients=["lr_schedule.alpha", "lr_schedule.warmup_target"],
                       autotune={"lr_schedule.alpha": 0.01})
    assert from_query_params(to_query_params(config)) == config
    parser = build_parser()
    assert config_from_args(parser.parse_args(["train", *to_argv(config)]), parser) == config
    for bad, words in ((["learning_rate"], "lr_schedule.initial_learning_rate"),
                       (["lr_schedule.decay_steps"], "momentum"),  # an int: not followable
                       (["lr_schedule.power"], "lr_schedule.alpha")):
        with pytest.raises(pydantic.ValidationError, match="hypergradients") as refused:
            RunConfig(optimizer="sgd", lr_schedule=COSINE, hypergradients=bad)
        assert words in str(refused.value)
    no_warmup = {"class_name": "CosineDecay", "config": {"decay_steps": 100}}
    with pytest.raises(pydantic.ValidationError, match="warmup_target"):
        RunConfig(optimizer="sgd", lr_schedule=no_warmup,
                  hypergradients=["lr_schedule.warmup_target"])
