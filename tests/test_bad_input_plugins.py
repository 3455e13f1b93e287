"""Broken plugin files (`optimizer_plugins.plugin_discovery`, the Plugins page): each one reported by name,
the others still load; a missing folder is one message.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from optimizer_plugins import contract, plugin_discovery as plugins
from optimizers import registry
from settings.config_file import parse_config


from bad_input_common import (  # noqa: F401  (fixtures used by name)
    ROOT, clean_registry, no_run_started)
from tests._pages import page_test


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
    at = page_test("plugins", default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_plugins_page_names_each_failed_file(plugin_dir, monkeypatch):
    monkeypatch.setenv(plugins.ENV_VAR, str(plugin_dir))
    # the contract check is stubbed in this process (see `plugin_dir`); a bounded check would
    # run it in a child that cannot see the stub (tests/test_plugin_timeout.py covers that path)
    monkeypatch.setattr(plugins, "check_bounded", lambda directory=None, *a, **kw: [
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
