"""Nothing named by input is ever imported, evaluated or unpickled: hostile names put where
a registry name is expected, at every entry point, are refused naming the field.
"""

from __future__ import annotations

import ast
import json

import pytest

from settings.share_link import QueryParamsError, from_query_params
from settings.config_file import ConfigImportError, config_from_dict
from runs.io.export import parse_import


from bad_input_common import (  # noqa: F401  (fixtures used by name)
    HOSTILE, ROOT, _cli_error, _export_document, _zip, no_run_started)


# ----- 7. nothing named by input is imported, evaluated or unpickled --------------------------
@pytest.fixture
def watched(monkeypatch):
    """Record every import, eval, exec, unpickle and Keras deserialization while a test runs."""
    import builtins
    import importlib
    import pickle

    import tf_keras

    # The standard library imports a codec module on its first use (json reads bytes through
    # `utf-8-sig`); importlib runs that module with `exec`. Load it before watching, so that
    # only what input could cause is seen, whichever tests ran before.
    b"{}".decode("utf-8-sig")
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


INPUT_MODULES = ["settings/config_file.py", "settings/run_config.py", "runs/io/export.py",
                 "settings/share_link.py", "lab_cli/cli.py", "views/runs.py",
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
