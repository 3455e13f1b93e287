"""Bad input in URL query parameters (`settings.share_link`) and on the command line
(`lab_cli.cli`): one message naming the parameter and its range, exit 2 and no
traceback for the CLI; no run process is started (`no_run_started`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from settings.share_link import QueryParamsError, from_query_params


from bad_input_common import (  # noqa: F401  (fixtures used by name)
    LR_RANGE, ROOT, STEPS_RANGE, _cli_error, no_run_started)


# ----- 4. URL query parameters ----------------------------------------------------------------
QUERY_CASES = [
    # (id, params, field, fragments)
    ("setup without optimizer", {"hp.learning_rate": "0.1"}, "optimizer",
     ["missing", "one of adam, sgd"]),
    ("steps not an int", {"steps": "many"}, "steps", ["not an integer", STEPS_RANGE]),
    ("steps with underscore", {"steps": "1_000"}, "steps", ["not an integer", STEPS_RANGE]),
    ("steps unicode digits", {"steps": "\u0661\u0660"}, "steps", ["not an integer"]),
    ("steps padded", {"steps": " 10 "}, "steps", ["not an integer"]),
    ("steps out of range", {"steps": "0"}, "steps", ["greater than or equal to 1", STEPS_RANGE]),
    ("seed too large", {"seed": "9999999999"}, "seed", ["[0, 2147483647]"]),
    ("lr nan", {"hp.learning_rate": "nan"}, "hp.learning_rate", ["must be finite", LR_RANGE]),
    ("lr inf", {"hp.learning_rate": "inf"}, "hp.learning_rate", ["must be finite", LR_RANGE]),
    ("lr 1e400", {"hp.learning_rate": "1e400"}, "hp.learning_rate", ["must be finite", LR_RANGE]),
    ("lr hex", {"hp.learning_rate": "0x10"}, "hp.learning_rate", ["not a number", LR_RANGE]),
    ("lr out of range", {"hp.learning_rate": "20"}, "hp.learning_rate",
     ["learning_rate=20.0 refused", LR_RANGE]),
    ("lr code", {"hp.learning_rate": "__import__('os')"}, "hp.learning_rate", ["not a number"]),
    ("beta_1 out of range", {"hp.beta_1": "1.5"}, "hp.beta_1", ["[0, 1)"]),
    ("unknown hyperparameter", {"hp.momentum": "0.5"}, "hp.momentum", ["adam has learning_rate"]),
    ("unknown option", {"opt.nesterov": "true"}, "opt.nesterov", ["unknown option", "amsgrad"]),
    ("bad bool", {"opt.amsgrad": "yes"}, "opt.amsgrad", ["true or false"]),
    ("option out of range", {"optimizer": "accumulation", "opt.inner": "sgd",
                             "opt.accumulation_steps": "0"},
     "opt.accumulation_steps", ["int in [1, 10000]"]),
    ("unknown dataset", {"dataset": "imagenet"}, "dataset", ["'digits', 'breast_cancer'"]),
    ("unknown dtype", {"dtype": "float16"}, "dtype", ["'float32' or 'float64'"]),
    ("incompatible model", {"dataset": "tokens"}, "model", ["refused for dataset='tokens'"]),
    ("device a path", {"device": "../../etc/passwd"}, "device", ["/device:CPU:0"]),
    ("value too long", {"device": "x" * 65}, "device", ["at most 64"]),
]


@pytest.mark.parametrize("case, params, field, fragments", QUERY_CASES,
                         ids=[c[0] for c in QUERY_CASES])
def test_query_param_refusals_name_the_parameter_and_range(case, params, field, fragments):
    with pytest.raises(QueryParamsError) as error:
        from_query_params({"optimizer": "adam", **params} if field != "optimizer" else params)
    assert error.value.field == field, str(error.value)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)


def test_other_pages_parameters_are_not_a_setup():
    assert from_query_params({"page": "runs", "tab": "x"}) is None




# ----- 5. the command line ---------------------------------------------------------------------
CLI_CASES = [
    # (id, argv, fragments)
    ("lr not a number", ["train", "--learning-rate", "fast"],
     ["argument --learning-rate", "invalid float value: 'fast'"]),
    ("lr nan", ["train", "--learning-rate", "nan"], ["argument --learning-rate", LR_RANGE]),
    ("lr 1e400", ["train", "--learning-rate", "1e400"], ["learning_rate=inf refused", LR_RANGE]),
    ("lr negative", ["train", "--learning-rate", "-1"], ["argument --learning-rate", LR_RANGE]),
    ("hyper of another optimizer", ["train", "--momentum", "0.9"],
     ["argument --momentum", "adam has no hyperparameter momentum"]),
    ("option out of range", ["train", "--optimizer", "accumulation", "--accumulation-steps", "0"],
     ["argument --accumulation-steps", "int in [1, 10000]"]),
    ("steps not an int", ["train", "--steps", "1e3"], ["argument --steps", "invalid int value"]),
    ("steps out of range", ["train", "--steps", "0"], ["argument --steps", STEPS_RANGE]),
    ("seed negative", ["train", "--seed", "-5"], ["argument --seed", "[0, 2147483647]"]),
    ("unknown optimizer", ["train", "--optimizer", "os.system"],
     ["argument --optimizer", "invalid choice: 'os.system'"]),
    ("unknown inner", ["train", "--optimizer", "accumulation", "--inner", "__import__('os')"],
     ["argument --inner", "invalid choice"]),
    ("unknown dataset", ["train", "--dataset", "imagenet"], ["argument --dataset"]),
    ("device a path", ["train", "--device", "../../etc/passwd"],
     ["argument --device", "/device:CPU:0"]),
    ("name too long", ["train", "--name", "x" * 121], ["argument --name", "at most 120"]),
    ("run id not an int", ["export", "one", "--out", "x"], ["argument run_id", "invalid int"]),
    ("unknown command", ["fly"], ["invalid choice: 'fly'"]),
    ("no command", [], ["required: command"]),
]


@pytest.mark.parametrize("case, argv, fragments", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refusals_are_one_line(case, argv, fragments, capsys):
    err = _cli_error(argv, capsys)
    for fragment in fragments:
        assert fragment in err, err


def test_cli_missing_and_bad_files(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert "argument file" in _cli_error(["import", str(missing)], capsys)
    assert "No such file or directory" in _cli_error(["train", "--config", str(missing)], capsys)
    assert "Is a directory" in _cli_error(["import", str(tmp_path)], capsys)
    bad = tmp_path / "bad.json"
    bad.write_text('{"hyperparameters": {"learning_rate": NaN}}')
    err = _cli_error(["import", str(bad)], capsys)
    assert "hyperparameters.learning_rate" in err and LR_RANGE in err
    broken = tmp_path / "run-1.zip"
    broken.write_bytes(b"PK\x03\x04" + b"\x00" * 50)
    assert "bundle: not a readable zip" in _cli_error(["import", str(broken)], capsys)
    not_a_store = tmp_path / "store.sqlite"
    not_a_store.write_text("not sqlite")
    assert "not a usable run store" in _cli_error(["list", "--store", str(not_a_store)], capsys)
    err = _cli_error(["list", "--store", str(tmp_path / "nowhere" / "runs.sqlite")], capsys)
    assert "no such run-store file" in err and not (tmp_path / "nowhere").exists()
    assert "not in the store" in _cli_error(["export", "99", "--out", str(tmp_path)], capsys)


@pytest.mark.slow  # a real `python -m lab_cli` process (it imports TensorFlow)
@pytest.mark.parametrize("argv, fragment", [
    (["train", "--beta-1", "1.5"], "[0, 1)"),
    (["import", "/nonexistent/config.json"], "No such file or directory"),
])
def test_cli_process_exits_2_with_one_line_and_no_traceback(argv, fragment, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3",
               OPTIMIZER_LAB_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "lab_cli", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines()  # TensorFlow's own start-up notices
             if not line.startswith(("WARNING: All log messages", "I0000", "E0000"))]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in done.stderr, lines
    assert not (tmp_path / "runs.sqlite").exists()  # refused before the store was touched
