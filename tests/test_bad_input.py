"""Every non-widget entry point refuses bad input with one message naming the field and what it
allows, and nothing named by input is ever imported, evaluated or unpickled.

Entry points: a run-config file (`settings.config_file`, `RunConfig`), an exported run zip
(`runs.export.parse_import`), the Runs page upload, URL query parameters
(`settings.share_link`), the command line (`optimizer_lab.cli`) and the plugins folder
(`optimizers.plugins`, the Plugins page). Fast: no training, and no run process is started
(`no_run_started` fails any test that would start one).
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from settings.share_link import QueryParamsError, from_query_params
from optimizer_lab import cli
from optimizers import contract, plugins, registry
from settings.run_config import RunConfig
from settings.config_file import MAX_BYTES, ConfigImportError, config_from_dict, parse_config
from runs.export import BUNDLE_MAX_BYTES, export_config, export_run, parse_import

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["os.system", "__import__('os')", "../../etc/passwd", "optimizers.adam.Adam",
           "builtins.eval", "subprocess.Popen"]
LR_RANGE = "(0, 10]"
STEPS_RANGE = "[1, 1000000]"


@pytest.fixture(autouse=True)
def no_run_started(monkeypatch, tmp_path):
    """Bad input must be refused before a run exists: starting one fails the test."""
    from runs import control

    def refuse(*args, **kwargs):
        raise AssertionError("a run was started from bad input")

    monkeypatch.setattr(control, "start_run", refuse)
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path / "home"))


@pytest.fixture
def clean_registry(monkeypatch):
    """Plugins register optimizers and the pages export the plugins folder: undo both."""
    monkeypatch.setattr(registry, "OPTIMIZERS", dict(registry.OPTIMIZERS))
    monkeypatch.setenv(plugins.ENV_VAR, os.environ.get(plugins.ENV_VAR, str(plugins.DEFAULT_DIR)))


def _export_document(config: RunConfig | None = None) -> dict:
    config = config or RunConfig(optimizer="sgd", hyperparameters={"learning_rate": 0.05})
    return export_config({"id": 3, "name": "x", "config": config.to_json_dict(),
                          "optimizer_config": {"name": "SGD", "learning_rate": 0.05}})


# ----- 1. a run-config file ------------------------------------------------------------------
EXPORT_TEXT = json.dumps(_export_document(), indent=2)
CONFIG_CASES = [
    # (id, file content, field named, fragments of the message)
    ("empty file", b"", "", ["empty", "one JSON object"]),
    ("blank file", b" \n\t ", "", ["empty"]),
    ("malformed", '{"optimizer": "adam",', "", ["malformed JSON", "line 1 column 22"]),
    ("trailing garbage", '{"optimizer": "adam"} x', "", ["malformed JSON", "Extra data"]),
    ("not utf-8", b'{"optimizer": "\xff"}', "", ["not UTF-8"]),
    ("a list", "[1, 2]", "", ["JSON object, not a list"]),
    ("a string", '"adam"', "", ["JSON object, not a str"]),
    ("a number", "3", "", ["JSON object, not a int"]),
    ("null", "null", "", ["JSON object, not a NoneType"]),
    ("too deep", '{"a": ' * 40 + "1" + "}" * 40, "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a",
     ["nested too deeply", "at most 16"]),
    ("truncated export", EXPORT_TEXT[: len(EXPORT_TEXT) // 2], "", ["malformed JSON"]),
    # wrong types
    ("steps as text", {"steps": "500"}, "steps", ["valid integer", "'500'", STEPS_RANGE]),
    ("steps fractional", {"steps": 1.5}, "steps", ["valid integer", STEPS_RANGE]),
    ("steps bool", {"steps": True}, "steps", ["valid integer", STEPS_RANGE]),
    ("batch_size float", {"batch_size": 1e3}, "batch_size", ["[1, 4096]"]),
    ("seed negative", {"seed": -1}, "seed", ["[0, 2147483647]"]),
    ("steps too many", {"steps": 2_000_000}, "steps", ["less than or equal", STEPS_RANGE]),
    ("optimizer a number", {"optimizer": 5}, "optimizer", ["not a registered optimizer",
                                                           "known: adam, sgd"]),
    ("optimizer a list", {"optimizer": ["adam"]}, "optimizer", ["known: adam"]),
    ("hyperparameters a list", {"hyperparameters": [0.1]}, "hyperparameters",
     ["must be a JSON object"]),
    ("options a list", {"options": ["amsgrad"]}, "options", ["must be a JSON object"]),
    ("hypergradients a string", {"hypergradients": "learning_rate"}, "hypergradients",
     ["valid list", "hyperparameter names"]),
    ("lr as text", {"hyperparameters": {"learning_rate": "0.1"}},
     "hyperparameters.learning_rate", ["learning_rate='0.1' refused", LR_RANGE]),
    ("lr bool", {"hyperparameters": {"learning_rate": True}}, "hyperparameters.learning_rate",
     [LR_RANGE]),
    ("option wrong type", {"options": {"amsgrad": "yes"}}, "options.amsgrad", ["must be a bool"]),
    ("option out of range", {"optimizer": "accumulation", "options": {"accumulation_steps": 0}},
     "options.accumulation_steps", ["accumulation_steps=0 refused", "int in [1, 10000]"]),
    ("device a path", {"device": "../../etc/passwd"}, "device",
     ["'../../etc/passwd'", "/device:CPU:0"]),
    # NaN, infinities, numbers a float cannot hold
    ("NaN steps", '{"steps": NaN}', "steps", ["nan refused", "finite", STEPS_RANGE]),
    ("Infinity steps", '{"steps": Infinity}', "steps", ["inf refused", STEPS_RANGE]),
    ("1e400 steps", '{"steps": 1e400}', "steps", ["inf refused", STEPS_RANGE]),
    ("NaN lr", '{"hyperparameters": {"learning_rate": NaN}}', "hyperparameters.learning_rate",
     ["learning_rate=nan refused", LR_RANGE]),
    ("-Infinity lr", '{"hyperparameters": {"learning_rate": -Infinity}}',
     "hyperparameters.learning_rate", ["learning_rate=-inf refused", LR_RANGE]),
    ("1e400 lr", '{"hyperparameters": {"learning_rate": 1e400}}',
     "hyperparameters.learning_rate", ["learning_rate=inf refused", LR_RANGE]),
    ("400-digit lr", '{"hyperparameters": {"learning_rate": ' + "9" * 400 + "}}",
     "hyperparameters.learning_rate", [LR_RANGE]),
    ("5000-digit steps", '{"steps": ' + "9" * 5000 + "}", "steps", [STEPS_RANGE]),
    ("huge lr", {"hyperparameters": {"learning_rate": 1e300}}, "hyperparameters.learning_rate",
     [LR_RANGE]),
    ("NaN autotune", '{"autotune": {"learning_rate": NaN}}', "autotune.learning_rate",
     ["finite", "(0, inf)"]),
    ("1e400 option", '{"optimizer": "adagrad", "options": {"initial_accumulator_value": 1e400}}',
     "options.initial_accumulator_value", ["finite"]),
    # unknown names and fields
    ("unknown optimizer", {"optimizer": "lion"}, "optimizer", ["'lion' is not a registered",
                                                               "known: adam, sgd"]),
    ("unknown dataset", {"dataset": "imagenet"}, "dataset", ["'digits', 'breast_cancer'"]),
    ("unknown model", {"model": "resnet"}, "model", ["'logistic', 'mlp'"]),
    ("unknown dtype", {"dtype": "float16"}, "dtype", ["'float32' or 'float64'"]),
    ("incompatible model", {"dataset": "tokens", "model": "mlp"}, "model",
     ["refused for dataset='tokens'", "allowed embedding"]),
    ("unknown hyperparameter", {"optimizer": "adam", "hyperparameters": {"momentum": 0.9}},
     "hyperparameters.momentum", ["unknown hyperparameter for adam",
                                  "learning_rate, beta_1, beta_2, epsilon"]),
    ("unknown option", {"optimizer": "adam", "options": {"nesterov": True}}, "options.nesterov",
     ["adam takes amsgrad"]),
    ("unknown field", {"optimiser": "adam"}, "optimiser",
     ["unknown field", "allowed fields: optimizer, hyperparameters"]),
    ("unknown field with NaN", '{"pad": NaN}', "pad", ["unknown field"]),
    ("hypergradient unknown", {"hypergradients": ["momentum"]}, "hypergradients",
     ["adam has learning_rate"]),
    # an export document that does not hold together
    ("export without run_config", {"format": "optimizer-lab/run-config"}, "run_config",
     ["missing"]),
    ("export run_config a list", {**_export_document(), "run_config": [1]}, "run_config",
     ["not a JSON object"]),
    ("export from the future", {**_export_document(), "format_version": 2}, "format_version",
     ["2 refused", "(1,)"]),
    ("export of another format", {**_export_document(), "format": "keras"}, "format",
     ["'optimizer-lab/run-config'"]),
    ("export class mismatch", {**_export_document(), "optimizer": {"class_name": "Adam"}},
     "optimizer.class_name", ["does not match run_config.optimizer='sgd'"]),
    ("export optimizer a string", {**_export_document(), "optimizer": "os.system"}, "optimizer",
     ["must be a JSON object"]),
    ("export bad hyperparameter",
     {**_export_document(), "run_config": {"optimizer": "sgd",
                                           "hyperparameters": {"learning_rate": 50}}},
     "hyperparameters.learning_rate", ["learning_rate=50 refused", LR_RANGE]),
    # a Keras-style entry
    ("keras decay", {"class_name": "SGD", "config": {"decay": -0.1}}, "decay",
     ["greater than or equal to 0", "[0, 1]"]),
    ("keras clipnorm", {"class_name": "SGD", "config": {"clipnorm": 1.0}}, "config.clipnorm",
     ["do not take clipnorm"]),
    ("keras config a list", {"class_name": "SGD", "config": [1]}, "config",
     ["must be a JSON object"]),
    ("keras and optimizer", {"class_name": "SGD", "optimizer": "adam"}, "optimizer",
     ["refused beside class_name='SGD'"]),
    ("keras lr out of range", {"class_name": "Adam", "config": {"learning_rate": 20}},
     "hyperparameters.learning_rate", ["learning_rate=20 refused", LR_RANGE]),
]


@pytest.mark.parametrize("case, data, field, fragments", CONFIG_CASES,
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_file_refusals_name_the_field_and_range(case, data, field, fragments):
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    with pytest.raises(ConfigImportError) as error:
        parse_config(text)
    assert error.value.field == field, str(error.value)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)
    if field:
        assert str(error.value).startswith(f"{field}: ")
    assert "\n" not in str(error.value)


def test_a_byte_order_mark_is_accepted():
    assert parse_config(b"\xef\xbb\xbf" + b'{"steps": 7}').steps == 7


@pytest.mark.parametrize("size", [MAX_BYTES + 1, 10 * MAX_BYTES])
def test_oversized_config_refused_before_parsing(size, monkeypatch):
    def no_parsing(*args, **kwargs):
        raise AssertionError("an oversized file was parsed")

    monkeypatch.setattr(json, "loads", no_parsing)
    with pytest.raises(ConfigImportError, match=f"{size:,} bytes.*at most {MAX_BYTES:,} bytes"):
        parse_config(b"{" + b" " * (size - 2) + b"}")


# ----- 2. an exported run zip ----------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> bytes:
    """A real `export_run` zip of a fake (untrained) run, without TensorBoard events."""
    from tests.fake_runs import add_fake_run
    from runs.store import RunStore

    home = tmp_path_factory.mktemp("bundle")
    store = RunStore(home / "runs.sqlite")
    run_id = add_fake_run(store, "sgd", 0.1)
    return export_run(store, run_id, home / "exports", tensorboard=False).zip.read_bytes()


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _flip_config_byte(data: bytes) -> bytes:
    """`data` with one byte of config.json's compressed stream changed (its CRC no longer fits)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(next(n for n in archive.namelist() if n.endswith("config.json")))
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    corrupted = bytearray(data)
    corrupted[start + info.compress_size // 2] ^= 0xFF
    return bytes(corrupted)


def test_a_good_bundle_imports(bundle):
    assert parse_import(bundle).optimizer == "sgd"


BUNDLE_CASES = [
    # (id, make the bytes from a good bundle, fragments)
    ("cut to 90%", lambda b: b[: len(b) * 9 // 10], ["truncated or corrupted"]),
    ("cut to half", lambda b: b[: len(b) // 2], ["truncated or corrupted"]),
    ("cut to 10 bytes", lambda b: b[:10], ["truncated or corrupted"]),
    ("zip magic then garbage", lambda b: b"PK\x03\x04" + b"\x00" * 100, ["truncated or corrupted"]),
    ("config.json corrupted", _flip_config_byte, ["config.json is corrupted"]),
    ("no config.json", lambda b: _zip({"run-1/metrics.csv": b"step\n1\n"}),
     ["exactly one run-<id>/config.json", "holds 0"]),
    ("two config.json", lambda b: _zip({"run-1/config.json": b"{}", "run-2/config.json": b"{}"}),
     ["holds 2"]),
    ("config.json too large (zip bomb)",
     lambda b: _zip({"run-1/config.json": b"{" + b" " * (50 * MAX_BYTES) + b"}"}),
     ["run-1/config.json refused", f"at most {MAX_BYTES:,} bytes"]),
    ("path traversal name only", lambda b: _zip({"../../etc/passwd": b"{}"}), ["holds 0"]),
    ("too large", lambda b: b"PK" + b"\x00" * BUNDLE_MAX_BYTES, [f"{BUNDLE_MAX_BYTES:,} bytes"]),
]


@pytest.mark.parametrize("case, make, fragments", BUNDLE_CASES, ids=[c[0] for c in BUNDLE_CASES])
def test_truncated_or_corrupted_bundles_are_refused(case, make, fragments, bundle, tmp_path):
    with pytest.raises(ConfigImportError) as error:
        parse_import(make(bundle))
    assert error.value.field == "bundle", str(error.value)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)
    assert not list(tmp_path.rglob("passwd"))  # nothing is ever extracted


def test_a_bundle_with_a_bad_config_names_the_config_field():
    bad = {**_export_document(), "run_config": {"optimizer": "sgd", "steps": 0}}
    with pytest.raises(ConfigImportError) as error:
        parse_import(_zip({"run-4/config.json": json.dumps(bad).encode()}))
    assert error.value.field == "steps" and STEPS_RANGE in str(error.value)


# ----- 3. the Runs page upload ----------------------------------------------------------------
@pytest.fixture
def runs_page(tmp_path) -> AppTest:
    at = AppTest.from_file(str(ROOT / "views" / "runs_page.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


UPLOAD_CASES = [
    ("c.json", b"", "empty"),
    ("c.json", b"{nope", "malformed JSON"),
    ("c.json", b'{"hyperparameters": {"learning_rate": 20}}',
     f"hyperparameters.learning_rate: learning_rate=20 refused: learning_rate must be a float "
     f"in {LR_RANGE}"),
    ("c.json", b'{"optimizer": "os.system"}', "optimizer: 'os.system' is not a registered"),
    ("c.json", b'{"steps": 1e400}', f"steps: inf refused: numbers must be finite; allowed: an "
                                    f"integer in {STEPS_RANGE}"),
    ("big.json", b"{" + b" " * MAX_BYTES + b"}", f"at most {MAX_BYTES:,} bytes"),
    ("run-1.zip", b"PK\x03\x04broken", "bundle: not a readable zip archive"),
]


@pytest.mark.parametrize("name, content, fragment", UPLOAD_CASES,
                         ids=[f"{c[0]}:{c[2][:30]}" for c in UPLOAD_CASES])
def test_runs_page_upload_refusals(runs_page, name, content, fragment):
    runs_page.file_uploader(key="import_file").set_value((name, content, "application/json"))
    runs_page.run()
    assert not runs_page.exception, runs_page.exception
    errors = [e.value for e in runs_page.error]
    assert any(e.startswith(f"{name}: ") and fragment in e for e in errors), errors
    assert not _has_key(runs_page, "import_start")  # nothing to start
    assert runs_page.session_state["import_config"] is None


def _has_key(at: AppTest, key: str) -> bool:
    return any(getattr(b, "key", None) == key for b in at.button)


def test_runs_page_accepts_a_bundle_and_states_the_limits(runs_page, bundle):
    captions = " ".join(c.value for c in runs_page.caption)
    assert f"{MAX_BYTES // 1024} KiB" in captions and f"{BUNDLE_MAX_BYTES // 2**20} MiB" in captions
    uploader = runs_page.file_uploader(key="import_file")
    assert set(uploader.allowed_type) == {".json", ".zip"}
    assert uploader.proto.max_upload_size_mb == BUNDLE_MAX_BYTES // 2**20
    uploader.set_value(("run-1.zip", bundle, "application/zip"))
    runs_page.run()
    assert not runs_page.exception and not runs_page.error
    assert runs_page.session_state["import_config"]["optimizer"] == "sgd"
    assert _has_key(runs_page, "import_start")  # offered, not clicked: no run is started


def test_server_upload_limit_matches_ours():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] * 2**20 == BUNDLE_MAX_BYTES


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
def _cli_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("python -m optimizer_lab"), err
    assert "Traceback" not in err and "usage:" not in err
    return err


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


@pytest.mark.slow  # a real `python -m optimizer_lab` process (it imports TensorFlow)
@pytest.mark.parametrize("argv, fragment", [
    (["train", "--beta-1", "1.5"], "[0, 1)"),
    (["import", "/nonexistent/config.json"], "No such file or directory"),
])
def test_cli_process_exits_2_with_one_line_and_no_traceback(argv, fragment, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3",
               OPTIMIZER_LAB_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "optimizer_lab", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines()  # TensorFlow's own start-up notices
             if not line.startswith(("WARNING: All log messages", "I0000", "E0000"))]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in done.stderr, lines
    assert not (tmp_path / "runs.sqlite").exists()  # refused before the store was touched


# ----- 6. plugins ------------------------------------------------------------------------------
RULE_STUB = """
from optimizers.base import RuleOptimizer


class {cls}(RuleOptimizer):
    REGISTRY_NAME = {name!r}
"""
PLUGIN_FILES = {
    "syntax_error.py": "x = 1\n\ndef broken(:\n    pass\n",
    "raises.py": "import math\n\nraise RuntimeError('plugin refuses to load')\n",
    "exits.py": "import sys\nsys.exit(3)\n",
    "imports_missing.py": "import no_such_module_for_the_lab\n",
    "clash_builtin.py": RULE_STUB.format(cls="MyAdam", name="adam"),
    "clash_class.py": RULE_STUB.format(cls="SGD", name="my_sgd"),
    "bad_name.py": RULE_STUB.format(cls="Dotted", name="os.system"),
    "fine.py": RULE_STUB.format(cls="Fine", name="fine_plugin"),
}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch, clean_registry) -> Path:
    """A plugins folder of broken files; the contract check is stubbed to pass (it trains)."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    for name, text in PLUGIN_FILES.items():
        (folder / name).write_text(text)
    passed = [contract.CheckResult(item, title, True, "stub") for item, (title, _) in
              contract.ITEMS.items()]
    monkeypatch.setattr(contract, "check_optimizer", lambda cls: list(passed))
    return folder


PLUGIN_CASES = [
    # (file, fragments of the report's summary or note)
    ("syntax_error.py", ["line 3: SyntaxError: invalid syntax"]),
    ("raises.py", ["line 3: RuntimeError: plugin refuses to load"]),
    ("exits.py", ["line 2: SystemExit: 3"]),
    ("imports_missing.py", ["line 1: ModuleNotFoundError", "no_such_module_for_the_lab"]),
    ("clash_builtin.py", ["not registered: the name 'adam' is taken by Adam"]),
    ("clash_class.py", ["not registered: the class name SGD is taken by optimizer 'sgd'"]),
    ("bad_name.py", ["REGISTRY_NAME 'os.system' refused", "lower-case letters"]),
    ("fine.py", ["registered as 'fine_plugin'"]),
]


@pytest.mark.parametrize("file, fragments", PLUGIN_CASES, ids=[c[0] for c in PLUGIN_CASES])
def test_each_broken_plugin_is_reported_and_the_rest_load(plugin_dir, file, fragments):
    reports = {Path(r.path).name: r for r in plugins.discover(plugin_dir)}
    assert sorted(reports) == sorted(PLUGIN_FILES)  # one broken file never hides the others
    report = reports[file]
    text = report.summary if report.error else " ".join(c.note for c in report.classes)
    for fragment in fragments:
        assert fragment in text, text
    assert registry.get("adam").__name__ == "Adam" and registry.get("sgd").__name__ == "SGD"
    assert set(registry.OPTIMIZERS) - {"fine_plugin"} >= {"adam", "sgd"}
    assert "my_sgd" not in registry.OPTIMIZERS and "os.system" not in registry.OPTIMIZERS


def test_a_plugin_class_cannot_take_a_builtin_class_name_in_config_files(plugin_dir):
    plugins.discover(plugin_dir)
    assert parse_config('{"class_name": "SGD", "config": {}}').optimizer == "sgd"


def test_missing_plugins_folder(tmp_path):
    missing = tmp_path / "nope"
    assert plugins.discover(missing) == []
    assert f"plugins folder {missing} does not exist" in plugins.folder_problem(missing)
    afile = tmp_path / "file.py"
    afile.write_text("")
    assert "is not a folder" in plugins.folder_problem(afile)
    assert plugins.folder_problem(tmp_path) is None
    # `streamlit run app.py -- --plugins` without a folder must not exit the server
    assert plugins.plugins_dir(["--plugins"], {}) == plugins.DEFAULT_DIR


def _plugins_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "views" / "plugins.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_plugins_page_names_each_failed_file(plugin_dir, monkeypatch):
    monkeypatch.setenv(plugins.ENV_VAR, str(plugin_dir))
    # the contract check is stubbed in this process (see `plugin_dir`); a bounded check would
    # run it in a child that cannot see the stub (tests/test_plugin_timeout.py covers that path)
    monkeypatch.setattr(plugins, "check_bounded", lambda directory=None, *a: [
        dataclasses.asdict(report) for report in plugins.discover(directory)])
    at = _plugins_page()
    errors = [e.value for e in at.error]
    for name, fragment in [("syntax_error.py", "line 3: SyntaxError"),
                           ("raises.py", "RuntimeError: plugin refuses to load"),
                           ("exits.py", "SystemExit: 3")]:
        assert any(e.startswith(f"import of {name} failed: ") and fragment in e
                   for e in errors), errors
    warnings = " ".join(w.value for w in at.warning)
    assert "the name 'adam' is taken by Adam" in warnings
    assert "fine_plugin" in " ".join(s.value for s in at.success)


def test_plugins_page_with_a_missing_folder(tmp_path, monkeypatch, clean_registry):
    monkeypatch.setenv(plugins.ENV_VAR, str(tmp_path / "typo"))
    at = _plugins_page()
    assert any(f"plugins folder {tmp_path / 'typo'} does not exist" in w.value
               for w in at.warning)


# ----- 7. nothing named by input is imported, evaluated or unpickled --------------------------
@pytest.fixture
def watched(monkeypatch):
    """Record every import, eval, exec, unpickle and Keras deserialization while a test runs."""
    import builtins
    import importlib
    import pickle

    import tf_keras

    calls: list[tuple[str, str]] = []
    real_import = builtins.__import__

    def spy(kind, real=None):
        def wrapper(*args, **kwargs):
            calls.append((kind, str(args[0]) if args else ""))
            if real is None:
                raise AssertionError(f"{kind} called on input")
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(builtins, "__import__", spy("import", real_import))
    monkeypatch.setattr(importlib, "import_module", spy("import_module"))
    monkeypatch.setattr(builtins, "eval", spy("eval"))
    monkeypatch.setattr(builtins, "exec", spy("exec"))
    monkeypatch.setattr(pickle, "loads", spy("pickle"))
    monkeypatch.setattr(tf_keras.utils, "deserialize_keras_object", spy("deserialize"))
    monkeypatch.setattr(tf_keras.saving, "deserialize_keras_object", spy("deserialize"))
    monkeypatch.setattr(tf_keras.optimizers, "deserialize", spy("deserialize"))
    return calls


def _hostile_attempts(name: str):
    """(entry point, callable) pairs that put `name` where a registry name is expected."""
    export = _export_document()
    yield "optimizer", lambda: config_from_dict({"optimizer": name})
    yield "class_name", lambda: config_from_dict({"class_name": name, "config": {}})
    yield "options.inner", lambda: config_from_dict({"optimizer": "lookahead",
                                                     "options": {"inner": name}})
    yield "hyperparameter key", lambda: config_from_dict({"hyperparameters": {name: 0.1}})
    yield "dataset", lambda: config_from_dict({"dataset": name})
    yield "model", lambda: config_from_dict({"model": name})
    yield "hypergradients", lambda: config_from_dict({"hypergradients": [name]})
    yield "export class_name", lambda: config_from_dict(
        {**export, "optimizer": {"class_name": name, "config": {}}})
    yield "export run_config", lambda: config_from_dict({**export,
                                                         "run_config": {"optimizer": name}})
    yield "bundle", lambda: parse_import(_zip({"run-1/config.json": json.dumps(
        {"optimizer": name}).encode()}))
    yield "url optimizer", lambda: from_query_params({"optimizer": name})
    yield "url inner", lambda: from_query_params({"optimizer": "accumulation", "opt.inner": name})
    yield "url hyperparameter", lambda: from_query_params({"optimizer": "adam", f"hp.{name}": "1"})
    yield "url value", lambda: from_query_params({"optimizer": "adam", "hp.learning_rate": name})
    yield "url dataset", lambda: from_query_params({"optimizer": "adam", "dataset": name})


HOSTILE_CASES = [(name, where) for name in HOSTILE for where, _ in _hostile_attempts(name)]


@pytest.mark.parametrize("name, where", HOSTILE_CASES, ids=[f"{w}={n}" for n, w in HOSTILE_CASES])
def test_hostile_names_are_refused_and_never_imported(name, where, watched):
    attempt = dict(_hostile_attempts(name))[where]
    with pytest.raises((ConfigImportError, QueryParamsError)) as error:
        attempt()
    assert error.value.field  # the message names where the name was found
    assert not [c for c in watched if c[0] != "import"], watched
    imported = [module for kind, module in watched if kind == "import" and module]
    suspicious = [m for m in imported if m == name or name.startswith(m + ".")
                  or m.split(".")[0] in ("os", "subprocess", "builtins")]
    assert not suspicious, imported


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_on_the_command_line(name, tmp_path, capsys, watched):
    err = _cli_error(["train", "--optimizer", name], capsys)
    assert "invalid choice" in err
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"class_name": name}))
    err = _cli_error(["train", "--config", str(config)], capsys)
    assert "argument --config" in err and "is not a registered optimizer" in err
    assert not [c for c in watched if c[0] != "import"], watched


INPUT_MODULES = ["settings/config_file.py", "settings/run_config.py", "runs/export.py",
                 "settings/share_link.py", "optimizer_lab/cli.py", "views/runs_page.py",
                 "settings/decode.py", "settings/fields.py", "settings/cli_flags.py"]
# (getattr is not listed: every use in these modules takes its name from our own field tuples
# or the registry, e.g. `getattr(args, f"hp_{name}")` for `name` in `cli.hyper_specs()`.)
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__", "globals", "vars"}
FORBIDDEN_METHODS = {"import_module", "literal_eval", "deserialize_keras_object", "deserialize",
                     "from_config", "get_registered_object", "unsafe_load", "load",
                     "spec_from_file_location", "exec_module", "run_path", "run_module"}
FORBIDDEN_IMPORTS = {"pickle", "marshal", "shelve", "yaml", "dill", "cloudpickle", "importlib",
                     "runpy", "joblib"}


@pytest.mark.parametrize("path", INPUT_MODULES)
def test_input_paths_hold_no_eval_import_or_unpickling(path):
    tree = ast.parse((ROOT / path).read_text())
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
    builtins_called = {f.id for f in calls if isinstance(f, ast.Name)}
    methods_called = {f.attr for f in calls if isinstance(f, ast.Attribute)}
    assert not builtins_called & FORBIDDEN_BUILTINS, builtins_called & FORBIDDEN_BUILTINS
    assert not methods_called & FORBIDDEN_METHODS, methods_called & FORBIDDEN_METHODS
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import) else
                              [ast.alias(node.module or "")])}
    assert not imported & FORBIDDEN_IMPORTS, imported & FORBIDDEN_IMPORTS
