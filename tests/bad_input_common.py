"""Shared pieces of the bad-input tests (`tests/test_bad_input_*.py`): the hostile names,
the ranges the messages must state, the fixture that fails any test starting a run, the
registry guard for plugin tests, an exported run document and a zip builder, the CLI refusal reader."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from lab_cli import cli
from optimizer_plugins import plugin_discovery as plugins
from optimizers import registry
from settings.run_config import RunConfig
from runs.io.export import export_config


ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["os.system", "__import__('os')", "../../etc/passwd", "optimizers.adam.Adam",
           "builtins.eval", "subprocess.Popen"]
LR_RANGE = "(0, 10]"
STEPS_RANGE = "[1, 1000000]"


@pytest.fixture(autouse=True)
def no_run_started(monkeypatch, tmp_path):
    """Bad input must be refused before a run exists: starting one fails the test."""
    from runs.service import control

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


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _cli_error(argv: list[str], capsys) -> str:
    """The one stderr line `cli.main(argv)` exits 2 with (no stdout, no traceback, no usage)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("optimizer-lab"), err
    assert "Traceback" not in err and "usage:" not in err
    return err
