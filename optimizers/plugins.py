"""Plugin discovery: user-written optimizers from a folder, checked before they are offered.

The folder is, first found wins: `--plugins DIR` among the script's arguments (`streamlit run
app.py -- --plugins DIR`), the environment variable `OPTIMIZER_LAB_PLUGINS`, else `./plugins`
of the project. Every `*.py` file in it (not `_*.py`) is imported on its own, once per process,
as module `optimizer_lab_plugins.<stem>`; an exception during the import is captured with its
traceback and reported, and the other files still load. Code is only ever read from that folder
(never from the browser).

Each OptimizerV2 subclass a plugin defines goes through `contract.check_optimizer`; a subclass
of `RuleOptimizer` that passes every item is added to the registry under its `REGISTRY_NAME`
class attribute (default: the class name in lower case), so it appears in every optimizer list.
It is not registered (and the report says why) when that name is not `NAME_PATTERN` or is taken,
or when its class name is already a registered class's: config files name optimizers by class
name too, so a plugin `Adam` must not answer for the built-in one.

A folder that does not exist is reported by `folder_problem`; a file that fails to import
(syntax error, exception, `sys.exit`) by its `PluginReport.error` and one-line `summary`.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import tf_keras

from optimizers import contract, registry
from optimizers.base import RuleOptimizer

ENV_VAR = "OPTIMIZER_LAB_PLUGINS"
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "plugins"
MODULE_PREFIX = "optimizer_lab_plugins"
# Registry names end up in widget keys, URL parameters and command-line choices.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer


@dataclass
class ClassReport:
    """One optimizer class of a plugin: its contract results and whether it was registered."""

    name: str
    registry_name: str
    is_rule_optimizer: bool
    checks: list[contract.CheckResult]
    registered: bool
    note: str

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


@dataclass
class PluginReport:
    """One plugin file: `error` is the import traceback (None when the import worked)."""

    path: str
    module: str
    error: str | None
    classes: list[ClassReport] = field(default_factory=list)

    @property
    def summary(self) -> str | None:
        """The import error in one line, with the plugin's line when known, e.g.
        `line 3: SyntaxError: invalid syntax`; None when the import worked."""
        if self.error is None:
            return None
        lines = self.error.strip().splitlines()
        # the deepest frame in the plugin file itself (a SyntaxError's frame names it too)
        where = [m.group(1) for m in re.finditer(rf'File "{re.escape(self.path)}", line (\d+)',
                                                 self.error)]
        return f"line {where[-1]}: {lines[-1]}" if where else lines[-1]


def folder_problem(directory: Path | str) -> str | None:
    """Why `directory` cannot be a plugins folder (missing, not a folder), or None."""
    folder = Path(directory)
    if not folder.exists():
        return (f"plugins folder {folder} does not exist (set it with --plugins DIR or "
                f"{ENV_VAR}); no plugin was loaded")
    if not folder.is_dir():
        return f"plugins folder {folder} is not a folder; no plugin was loaded"
    return None


def plugins_dir(argv: Sequence[str] | None = None, environ: dict | None = None) -> Path:
    """The plugins folder from `--plugins DIR` in `argv` (default `sys.argv[1:]`), else
    `$OPTIMIZER_LAB_PLUGINS`, else the project's `plugins/`. A `--plugins` without a value is
    ignored (argparse would exit the whole server)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--plugins")
    try:
        flag = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))[0].plugins
    except argparse.ArgumentError:
        flag = None
    environ = os.environ if environ is None else environ
    chosen = flag or environ.get(ENV_VAR)
    return Path(chosen).expanduser().resolve() if chosen else DEFAULT_DIR


def registry_name(cls: type) -> str:
    return str(getattr(cls, "REGISTRY_NAME", cls.__name__.lower()))


_MODULES: dict[str, tuple[object | None, str | None]] = {}  # path -> (module, error), per process


def import_plugin(path: Path) -> tuple[object | None, str | None]:
    """Import one plugin file once per process; returns (module or None, traceback or None)."""
    key = str(path.resolve())
    if key in _MODULES:
        return _MODULES[key]
    name = f"{MODULE_PREFIX}.{path.stem}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        result = (module, None)
    except BaseException as error:  # noqa: BLE001 - SystemExit in a plugin must not stop the app
        if isinstance(error, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        result = (None, "".join(traceback.format_exception(error)).strip())
    _MODULES[key] = result
    return result


def optimizer_classes(module: object) -> list[type]:
    """OptimizerV2 subclasses defined in `module` itself (not imported into it)."""
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, LegacyOptimizer) and obj.__module__ == module.__name__]


def _register(cls: type, report: ClassReport) -> None:
    name = report.registry_name
    existing = registry.OPTIMIZERS.get(name)
    if existing is cls:
        report.registered, report.note = True, "already registered"
        return
    if not NAME_PATTERN.fullmatch(name):
        report.note = (f"not registered: REGISTRY_NAME {name!r} refused; allowed: lower-case "
                       "letters, digits and _, starting with a letter, at most 40 characters")
        return
    if existing is not None:
        report.note = f"not registered: the name {name!r} is taken by {existing.__name__}"
        return
    same_class = [n for n, c in registry.OPTIMIZERS.items() if c.__name__ == cls.__name__]
    if same_class:
        report.note = (f"not registered: the class name {cls.__name__} is taken by optimizer "
                       f"{same_class[0]!r} (config files name optimizers by class name)")
        return
    registry.register(name, cls)
    report.registered, report.note = True, f"registered as {report.registry_name!r}"


def discover(directory: Path | str | None = None, register: bool = True) -> list[PluginReport]:
    """Import every plugin of `directory` (default `plugins_dir()`), check and register them.

    Returns one `PluginReport` per file, sorted by file name (none for a missing folder: see
    `folder_problem`). Never raises for a broken plugin.
    """
    folder = Path(directory) if directory is not None else plugins_dir()
    reports = []
    for path in sorted(folder.glob("*.py")) if folder_problem(folder) is None else []:
        if path.name.startswith("_"):
            continue
        module, error = import_plugin(path)
        report = PluginReport(str(path), f"{MODULE_PREFIX}.{path.stem}", error)
        if module is not None:
            try:
                _check_classes(module, report, register)
            except Exception as failure:  # noqa: BLE001 - e.g. a module __getattr__ that raises
                report.error = "".join(traceback.format_exception(failure)).strip()
        reports.append(report)
    return reports


def _check_classes(module: object, report: PluginReport, register: bool) -> None:
    for cls in optimizer_classes(module):
        checks = contract.check_optimizer(cls)
        is_rule = issubclass(cls, RuleOptimizer)
        entry = ClassReport(cls.__name__, registry_name(cls), is_rule, checks, False, "")
        if not entry.passed:
            failed = ", ".join(c.item for c in checks if not c.passed)
            entry.note = f"not registered: failed {failed}"
        elif not is_rule:
            entry.note = ("not registered: passes the contract but is not a RuleOptimizer "
                          "(the Train page needs coefficients/update)")
        elif register:
            _register(cls, entry)
        report.classes.append(entry)


def ensure_registered(name: str) -> None:
    """For the run process: when `name` is not registered, discover the plugins (same folder as
    the server: it exports `OPTIMIZER_LAB_PLUGINS`) so a plugin that passed is found.

    Raises:
        KeyError: `name` is still unknown (not a plugin, or one that failed its check).
    """
    if name not in registry.OPTIMIZERS:
        discover()
    registry.get(name)


__all__ = ["ensure_registered", "ClassReport", "ENV_VAR", "NAME_PATTERN", "PluginReport",
           "discover", "folder_problem", "import_plugin", "plugins_dir", "registry_name"]
