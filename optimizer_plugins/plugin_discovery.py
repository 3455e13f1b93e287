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
A plugin class that is a `Wrapper` is not registered (only the built-ins wrap).
It is not registered (and the report says why) when that name is not `NAME_PATTERN` or is taken,
or when its class name is already a registered class's: config files name optimizers by class
name too, so a plugin `Adam` must not answer for the built-in one.

A folder that does not exist is reported by `folder_problem`; a file that fails to import
(syntax error, exception, `sys.exit`) by its `PluginReport.error` and one-line `summary`.

`discover` imports in this process (tests, tools, the run process). The server and the command
line use `discover_bounded`: every file is imported and checked in a child process
(`python -m optimizer_plugins.plugin_discovery --check FILE...`, see `optimizer_plugins.plugin_process`) with a time
limit; the child also describes each passing class as catalog data (`ClassReport.catalog`:
specs, options, `is_rule`, where the class lives), which the caller registers WITHOUT importing
the file, so neither the server nor the CLI's parsing imports TensorFlow for plugins. A file that
hangs is reported "import did not finish in 10 s: not loaded"; the class is imported later, only
where an optimizer object is built (`registry.get`).

This module imports no TensorFlow at import time (`optimizer_classes` and the checks do).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

from optimizer_plugins import contract, plugin_process
from optimizers import registry
from optimizers.catalog import PLUGIN_PREFIX, CatalogEntry

ENV_VAR = "OPTIMIZER_LAB_PLUGINS"
# Set by the server for the run processes it starts: the plugin files it imported (os.pathsep).
LOADED_ENV_VAR = "OPTIMIZER_LAB_PLUGINS_LOADED"
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "plugins"
MODULE_PREFIX = "optimizer_lab_plugins"
# Registry names end up in widget keys, URL parameters and command-line choices.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass
class ClassReport:
    """One optimizer class of a plugin: its contract results and whether it was registered.

    `catalog` is the class described as data (`CatalogEntry.to_data`) when it passed every
    item and is a `RuleOptimizer`: what a process registers without importing the file.
    """

    name: str
    registry_name: str
    is_rule_optimizer: bool
    checks: list[contract.CheckResult]
    registered: bool
    note: str
    catalog: dict[str, Any] | None = None

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

    @classmethod
    def from_dict(cls, data: dict) -> PluginReport:
        """The report `dataclasses.asdict` made of one (as the check process prints it)."""
        classes = [ClassReport(**{**c, "checks": [contract.CheckResult(**x) for x in c["checks"]]})
                   for c in data.get("classes", [])]
        module = data.get("module") or f"{MODULE_PREFIX}.{Path(data['path']).stem}"
        return cls(data["path"], module, data.get("error"), classes)

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


def plugins_dir(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
                ) -> Path:
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
        # A None spec (or loader) fails with AttributeError, reported below as the plugin's error.
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        result: tuple[object | None, str | None] = (module, None)
    except BaseException as error:  # noqa: BLE001 - SystemExit in a plugin must not stop the app
        if isinstance(error, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        result = (None, "".join(traceback.format_exception(error)).strip())
    _MODULES[key] = result
    return result


def load_class(path: Path, attribute: str) -> type:
    """Class `attribute` of plugin file `path` (imported once per process): the loader this
    module hands the registry (`registry.use_plugin_loader`) for the entries it registers.

    Raises:
        ImportError: the file no longer imports (the message ends with its last error line).
        AttributeError: the file has no such class.
    """
    module, error = import_plugin(path)
    if module is None:
        raise ImportError(f"plugin {path} no longer imports: "
                          f"{(error or '').strip().splitlines()[-1:]}")
    return getattr(module, attribute)


registry.use_plugin_loader(load_class)


def optimizer_classes(module: Any) -> list[type]:
    """OptimizerV2 subclasses defined in `module` itself (not imported into it)."""
    from optimizers.wrapping import LegacyOptimizer  # TensorFlow: the module is a plugin's

    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, LegacyOptimizer) and obj.__module__ == module.__name__]


def _refusal(name: str, class_name: str) -> str | None:
    """Why a passing plugin class `class_name` cannot be registered as `name`, or None."""
    if not NAME_PATTERN.fullmatch(name):
        return (f"not registered: REGISTRY_NAME {name!r} refused; allowed: lower-case "
                "letters, digits and _, starting with a letter, at most 40 characters")
    if name in registry.OPTIMIZERS:
        return (f"not registered: the name {name!r} is taken by "
                f"{registry.class_name(name)}")
    taken = registry.class_names().get(class_name)
    if taken is not None:
        return (f"not registered: the class name {class_name} is taken by optimizer "
                f"{taken!r} (config files name optimizers by class name)")
    return None


def _same_entry(name: str, class_path: str) -> bool:
    """True when `name` is already registered for the class at `class_path`."""
    return name in registry.OPTIMIZERS and registry.entry(name).class_path == class_path


def class_path(path: Path | str, cls_name: str) -> str:
    """The catalog `class_path` of class `cls_name` of plugin file `path`."""
    return f"{PLUGIN_PREFIX}{Path(path).resolve()}:{cls_name}"


def _register(cls: type, report: ClassReport, path: Path | str | None = None) -> None:
    """Register the imported class `cls` (this process imported its file)."""
    name = report.registry_name
    where = class_path(path, cls.__name__) if path is not None else None
    if (where is not None and _same_entry(name, where)) or (
            name in registry.OPTIMIZERS and registry.entry(name).class_path
            == f"{cls.__module__}:{cls.__qualname__}" and registry.get(name) is cls):
        report.registered, report.note = True, "already registered"
        return
    refusal = _refusal(name, cls.__name__)
    if refusal is not None:
        report.note = refusal
        return
    registry.register(name, cls)
    report.registered, report.note = True, f"registered as {report.registry_name!r}"


def _register_data(report: ClassReport) -> None:
    """Register a class the check process described (`report.catalog`), without importing it."""
    try:
        # Not None: the only caller passes a report whose `catalog is not None`.
        found = CatalogEntry.from_data(report.catalog)  # type: ignore[arg-type]
    except ValueError as error:  # a child that sent something else than it should
        report.note = f"not registered: {error}"
        return
    if _same_entry(found.name, found.class_path):
        report.registered, report.note = True, "already registered"
        return
    refusal = _refusal(found.name, found.class_name)
    if refusal is not None:
        report.note = refusal
        return
    try:
        registry.register_entry(found)
    except ValueError as error:  # e.g. a name registered meanwhile
        report.note = f"not registered: {error}"
        return
    report.registered, report.note = True, f"registered as {found.name!r}"


def describe(cls: type[Any], name: str, path: Path | str) -> CatalogEntry:
    """The catalog entry of plugin class `cls` (a `RuleOptimizer`, imported from file `path`):
    its specs as an instance built with default arguments reports them (its `HYPERPARAMETERS`
    when it cannot be built without arguments), its `OPTIONS` with the constructor's defaults,
    its Keras registered name."""
    import tf_keras

    try:
        specs = tuple(cls().hyperparameter_specs())
    except TypeError:  # e.g. a constructor without a default `name`
        specs = tuple(cls.HYPERPARAMETERS)
    params = inspect.signature(cls.__init__).parameters
    options = tuple((option, params[option].default) for option in getattr(cls, "OPTIONS", ())
                    if option in params)
    return CatalogEntry(name, class_path(path, cls.__name__), cls.__name__,
                        tf_keras.saving.get_registered_name(cls), specs, options, True, None)


def plugin_files(directory: Path | str) -> list[Path]:
    """The plugin files of `directory`: `*.py` not starting with `_`, sorted by name (none for
    a folder with a `folder_problem`)."""
    folder = Path(directory)
    if folder_problem(folder) is not None:
        return []
    return [p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def check_file(path: Path, register: bool = False,
               on_imported: Callable[[], None] | None = None) -> PluginReport:
    """Import one plugin file (once per process), contract-check its classes and, with
    `register`, register those that pass. `on_imported` is called between the import and the
    check. Never raises for a broken plugin."""
    module, error = import_plugin(path)
    report = PluginReport(str(path), f"{MODULE_PREFIX}.{path.stem}", error)
    if on_imported is not None:
        on_imported()
    if module is not None:
        try:
            _check_classes(module, report, register, path)
        except Exception as failure:  # noqa: BLE001 - e.g. a module __getattr__ that raises
            report.error = "".join(traceback.format_exception(failure)).strip()
    return report


def discover(directory: Path | str | None = None, register: bool = True) -> list[PluginReport]:
    """Import every plugin of `directory` (default `plugins_dir()`) IN THIS PROCESS, check and
    register them (a file that hangs at import hangs the caller: the server uses
    `discover_bounded`).

    Returns one `PluginReport` per file, sorted by file name (none for a missing folder: see
    `folder_problem`). Never raises for a broken plugin.
    """
    folder = Path(directory) if directory is not None else plugins_dir()
    return [check_file(path, register) for path in plugin_files(folder)]


def discover_bounded(directory: Path | str | None = None, import_timeout: float | None = None,
                     check_timeout: float | None = None) -> list[PluginReport]:
    """`discover`, with every file first imported and checked in a child process, bounded in
    time (`plugin_process.check_in_child`; default limits from `OPTIMIZER_LAB_PLUGIN_TIMEOUT_S`,
    10 s per import, and `OPTIMIZER_LAB_PLUGIN_CHECK_TIMEOUT_S`, 120 s per contract check).

    A file whose import failed or overran in the child is reported; nothing is imported here:
    the classes that passed in the child are registered from the catalog data the child sent
    (`ClassReport.note` says so, or why not), and imported only when `registry.get` needs one.

    Raises:
        ValueError: a timeout environment variable is refused (the message names it).
    """
    return register_checked(check_bounded(directory, import_timeout, check_timeout))


def check_bounded(directory: Path | str | None = None, import_timeout: float | None = None,
                  check_timeout: float | None = None, nice: int = 0) -> list[dict]:
    """The slow half of `discover_bounded`: the child process's reports as JSON dicts, nothing
    registered (safe to run in a background thread; `register_checked` then registers in the
    caller's thread). `nice`: the child's CPU priority drop (`plugin_process.check_in_child`)."""
    folder = Path(directory) if directory is not None else plugins_dir()
    return plugin_process.check_in_child(plugin_files(folder), import_timeout, check_timeout,
                                         nice)


def register_checked(datas: list[dict]) -> list[PluginReport]:
    """Register the classes that passed in the child (`check_bounded`'s dicts) from their
    catalog data; returns the reports."""
    reports = []
    for data in datas:
        report = PluginReport.from_dict(data)
        for entry in report.classes:
            if entry.catalog is not None and entry.passed and entry.is_rule_optimizer:
                _register_data(entry)
        reports.append(report)
    return reports


def _check_classes(module: object, report: PluginReport, register: bool,
                   path: Path | str) -> None:
    from optimizers.base import RuleOptimizer
    from optimizers.wrapping import Wrapper

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
        elif issubclass(cls, Wrapper):
            entry.note = "not registered: only the built-in optimizers may wrap another one"
        else:
            try:  # what a process registers without importing the file (discover_bounded)
                data = describe(cls, entry.registry_name, path).to_data()
                json.dumps(data)  # the child sends it as JSON: refuse an exotic default here
                entry.catalog = data
            except Exception as failure:  # noqa: BLE001 - untrusted constructor/specs
                entry.note = (f"not registered: its specs could not be read "
                              f"({type(failure).__name__}: {failure})")
            else:
                if register:
                    _register(cls, entry, path)
        report.classes.append(entry)


def ensure_registered(name: str) -> None:
    """For the run process: when `name` is not registered, discover the plugins so a plugin that
    passed is found. Started by the server, it imports only the files the server imported
    (`OPTIMIZER_LAB_PLUGINS_LOADED`: they passed the bounded import); otherwise it discovers the
    folder (`OPTIMIZER_LAB_PLUGINS`) with `discover_bounded`.

    Raises:
        KeyError: `name` is still unknown (not a plugin, or one that failed its check).
    """
    if name not in registry.OPTIMIZERS:
        loaded = os.environ.get(LOADED_ENV_VAR)
        if loaded is None:
            discover_bounded()
        for path in loaded.split(os.pathsep) if loaded else ():
            check_file(Path(path), register=True)
    registry.get(name)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m optimizer_plugins.plugin_discovery [--nice N] --check FILE...`: the check
    process of `discover_bounded`.

    Lowers its CPU priority by N first (`os.nice`; a refusal leaves it as it is), then imports
    and contract-checks each file in turn (nothing registered) and writes one JSON line per event
    on its stdout (protocol: `optimizer_plugins.plugin_process`); the plugins' own output, and
    TensorFlow's, goes to stderr.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--nice"] and len(args) > 1 and args[1].isdigit():
        try:
            os.nice(int(args[1]))
        except OSError:  # a platform or sandbox that refuses: checked at full priority
            pass
        args = args[2:]
    if not args or args[0] != "--check":
        print("usage: python -m optimizer_plugins.plugin_discovery [--nice N] --check FILE...",
              file=sys.stderr)
        return 2
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(**event) -> None:
        channel.write(json.dumps(event) + "\n")
        channel.flush()

    # TensorFlow before "ready": its import time (this module does not import it) must not
    # count against the first plugin's import limit
    import optimizers.base  # noqa: F401  (imported for its side effect: TensorFlow loaded)

    say(event="ready")
    for path in args[1:]:
        say(event="import", path=path)
        report = check_file(Path(path), on_imported=lambda: say(event="check", path=path))
        say(event="report", report=asdict(report))
    return 0


__all__ = ["ensure_registered", "ClassReport", "ENV_VAR", "LOADED_ENV_VAR", "NAME_PATTERN", "PluginReport",
           "check_bounded", "check_file", "discover", "discover_bounded", "folder_problem",
           "import_plugin", "register_checked",
           "main", "plugin_files", "plugins_dir", "registry_name"]

if __name__ == "__main__":
    sys.exit(main())
