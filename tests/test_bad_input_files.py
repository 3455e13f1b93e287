"""Bad input in files: a run-config file (`settings.config_file`, `RunConfig`), an exported
run zip (`runs.io.export.parse_import`) and the Runs page upload. Each refusal names the field
and what it allows; no run process is started (`no_run_started`).
"""

from __future__ import annotations

import io
import json
import tomllib
import zipfile

import pytest
from streamlit.testing.v1 import AppTest

from settings.config_file import MAX_BYTES, ConfigImportError, parse_config
from runs.io.export import BUNDLE_MAX_BYTES, export_run, parse_import


from bad_input_common import (  # noqa: F401  (fixtures used by name)
    LR_RANGE, ROOT, STEPS_RANGE, _export_document, _zip, no_run_started)
from tests._pages import page_test


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
    ("unknown optimizer", {"optimizer": "shampoo"}, "optimizer", ["'shampoo' is not a registered",
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
    from runs.store.run_store import RunStore

    home = tmp_path_factory.mktemp("bundle")
    store = RunStore(home / "runs.sqlite")
    run_id = add_fake_run(store, "sgd", 0.1)
    return export_run(store, run_id, home / "exports", tensorboard=False).zip.read_bytes()



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
    at = page_test("runs", default_timeout=60)
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
