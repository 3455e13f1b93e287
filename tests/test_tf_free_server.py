"""Issue 13: the Streamlit server and the CLI's parsing never import TensorFlow.

Each TF-free claim runs in a FRESH child process (this pytest process may already hold
TensorFlow) with an import hook that records the first import of tensorflow / tf_keras / keras
and the lab frames that caused it, so a failure names the import chain to cut.

Also: the catalog (`optimizers.catalog`, plain data) agrees with every class it describes, a
plugin is registered from the check process's data without importing it, and the device list
comes from a child process.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optimizers import catalog, registry
from optimizers.catalog import CatalogEntry
from optimizers.hyperparams import HyperSpec

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "tf_keras", "keras")
CHILD_TIMEOUT_S = 600  # a loaded 2-core machine; the TF-free children take a few seconds

# Prepended to every probe: records the first heavy import with the lab frames that asked for
# it, runs the probe's body, then prints {"heavy": [...loaded...], "chain": [...]} as JSON.
HOOK = textwrap.dedent('''
    import importlib.abc, json, sys, traceback
    CHAIN = []
    class _Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if not CHAIN and name.split(".")[0] in {heavy!r}:
                CHAIN.append("first heavy import: " + name)
                CHAIN.extend(f"{{f.filename}}:{{f.lineno}} {{f.line}}"
                             for f in traceback.extract_stack() if {root!r} in f.filename)
            return None
    sys.meta_path.insert(0, _Watch())
    def report(**extra):
        print("@@" + json.dumps(dict(
            heavy=sorted(m for m in {heavy!r} if m in sys.modules), chain=CHAIN, **extra)))
''').format(heavy=HEAVY, root=str(ROOT))


def probe(body: str, env: dict[str, str] | None = None) -> dict:
    """Run `body` (which must call `report(...)`) after `HOOK` in a fresh Python; its report."""
    environ = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    done = subprocess.run([sys.executable, "-c", HOOK + textwrap.dedent(body)], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("@@")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][2:])


def assert_tf_free(result: dict) -> None:
    assert result["heavy"] == [], "\n".join(result["chain"])


# ----- the server and the CLI without TensorFlow ----------------------------------------------
def test_import_app_and_the_registry_api_load_no_tensorflow(tmp_path):
    result = probe("""
        import app  # Streamlit's bare mode: the page calls are no-ops
        from optimizers import registry
        specs = registry.specs("accumulation", {"inner": "sgd", "nesterov": True})
        values = registry.validate_hypers("lookahead", {"sync_period": 3.0})
        report(names=registry.names(), specs=[s.name for s in specs], values=values,
               rules=[n for n in registry.names() if registry.is_rule(n)],
               wrappers=list(registry.WRAPPERS),
               defaults=registry.option_defaults("moving_average"))
    """, env={"OPTIMIZER_LAB_HOME": str(tmp_path)})
    assert_tf_free(result)
    assert result["names"][:2] == ["adam", "sgd"]
    assert result["specs"] == ["learning_rate", "momentum"]  # SGD's, through the wrapper
    assert result["values"] == {"sync_period": 3.0, "slow_step_size": 0.5, "learning_rate": 1e-3,
                                "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
    assert "lookahead" not in result["rules"] and "accumulation" in result["rules"]
    assert result["wrappers"] == ["accumulation", "lookahead", "moving_average"]
    assert result["defaults"] == {"inner": "adam", "start_step": 0, "dynamic_decay": False}


def page_dependencies(page: str) -> list[str]:
    """The lab modules page module `views/<page>` imports (read with ast, not run)."""
    import ast

    tree = ast.parse((ROOT / "views" / page).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{a.name}" if node.module in ("components", "settings")
                      else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    lab = ("components", "settings", "runs", "optimizers", "teaching", "hypergrad", "engine")
    return sorted({m for m in found if m.split(".")[0] in lab})


@pytest.mark.parametrize("page", ["home.py", "train.py", "runs.py", "hypergrad.py"])
def test_the_page_modules_dependencies_load_no_tensorflow(page):
    modules = page_dependencies(page)
    result = probe(f"""
        import importlib
        for name in {modules!r}:
            importlib.import_module(name)
        report()
    """)
    assert_tf_free(result)


def test_cli_help_loads_no_tensorflow():
    result = probe("""
        import contextlib, io, runpy, sys
        texts = []
        for argv in (["--help"], ["train", "--help"]):
            sys.argv = ["lab_cli", *argv]
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                runpy.run_module("lab_cli", run_name="__main__", alter_sys=True)
            texts.append(out.getvalue())
        report(texts=texts)
    """)
    assert_tf_free(result)
    assert "{train,list,export,import}" in result["texts"][0]
    assert "--learning-rate" in result["texts"][1] and "--nesterov" in result["texts"][1]


def test_cli_refusal_of_a_bad_flag_loads_no_tensorflow():
    result = probe("""
        import contextlib, io
        from lab_cli import cli
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            cli.main(["train", "--optimizer", "nope"])
        report(err=err.getvalue())
    """)
    assert_tf_free(result)
    assert "argument --optimizer" in result["err"] and "'nope'" in result["err"]


def test_cli_config_validation_loads_no_tensorflow():
    result = probe("""
        from lab_cli import cli
        parser = cli.build_parser()
        args = parser.parse_args(["train", "--optimizer", "sgd", "--nesterov", "--momentum",
                                  "0.5", "--learning-rate", "0.1", "--steps", "5"])
        config = cli.config_from_args(args, parser)
        report(config=config.model_dump(mode="json"))
    """)
    assert_tf_free(result)
    assert result["config"]["options"] == {"nesterov": True}
    assert result["config"]["hyperparameters"] == {"learning_rate": 0.1, "momentum": 0.5}


APPTEST = """
    from tests._pages import app_test, open_page
    at = app_test(default_timeout=300)
    {switch}
    at.run()
    report(exception=[e.message for e in at.exception], titles=[t.value for t in at.title],
           buttons=[b.label for b in at.button])
"""


def test_home_renders_without_tensorflow(tmp_path):
    result = probe(APPTEST.format(switch=""), env={"OPTIMIZER_LAB_HOME": str(tmp_path)})
    assert result["exception"] == []
    assert result["titles"] == ["Optimizer Lab"]
    assert_tf_free(result)


def test_train_renders_without_tensorflow(tmp_path):
    result = probe(APPTEST.format(switch='open_page(at, "train")'),
                   env={"OPTIMIZER_LAB_HOME": str(tmp_path)})
    assert result["exception"] == []
    assert "Start" in result["buttons"]
    assert_tf_free(result)


def test_start_and_every_command_from_the_train_page_load_no_tensorflow(tmp_path):
    """The server's side of a run: Start on the Train page (a run process is not started here:
    `_launch` is a stand-in), then a live change, speed, pause, step, resume, the hyper-gradient
    commands and stop as the pages send them. A payload module that imported
    `engine.recording` at module level would put TensorFlow in the server on the first Start
    (4-5 s quiet, ~15 s beside a warm-up on 2 cores, ~750 MB)."""
    result = probe("""
        from runs.service import control, pool
        from runs.store.files import default_store_path
        from runs.store.run_store import RunStore
        from tests._pages import app_test, open_page
        launched = []
        pool._launch = lambda store, run_id: launched.append(run_id)
        at = app_test(default_timeout=300)
        open_page(at, "train").run()
        at.checkbox(key="hg_follow").check().run()  # for autotune and response slices
        at.button(key="start").click().run()
        store = RunStore(default_store_path())
        run_id = int(store.runs()["id"].max())
        store.set_status(run_id, "running", "", only_from=("starting",))
        at.run()
        at.number_input(key="hp_adam_learning_rate").set_value(0.002).run()
        control.set_speed(store, run_id, 5.0)
        control.pause(store, run_id)
        store.set_status(run_id, "paused", "", only_from=("running",))
        control.step(store, run_id)
        control.resume(store, run_id)
        control.autotune(store, run_id, "learning_rate", 1e-3)
        control.response_slice(store, run_id, "learning_rate")
        control.stop(store, run_id)
        report(exception=[e.message for e in at.exception], launched=launched,
               kinds=store.commands(run_id)["kind"].tolist())
    """, env={"OPTIMIZER_LAB_HOME": str(tmp_path)})
    assert result["exception"] == [] and result["launched"] == [1]
    assert result["kinds"][:2] == ["set_speed", "set_hyper"] and "stop" in result["kinds"]
    assert_tf_free(result)


def test_export_loads_no_tensorflow(tmp_path):
    """The Runs page exports in the server: tables, TensorBoard events (`runs.io.export.RecordFile`)
    and the zip, with no TensorFlow."""
    from runs.store.run_store import RunStore
    from tests.fake_runs import add_fake_run

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = add_fake_run(store)
    result = probe(f"""
        from runs.io.export import export_run
        from runs.store.run_store import RunStore
        export_run(RunStore({str(store.path)!r}), {run_id}, {str(tmp_path / "exports")!r})
        report()
    """)
    assert_tf_free(result)
    assert list((tmp_path / "exports").rglob("events.out.tfevents.*"))


@pytest.mark.parametrize("page, title", [("runs", "Optimizer Lab · Runs"), (
    "hypergrad", "Optimizer Lab · Hyper-gradients"), ("class_board", "Optimizer Lab · Class")])
def test_runs_and_hypergradient_pages_render_without_tensorflow(tmp_path, page, title):
    result = probe(APPTEST.format(switch=f"open_page(at, {page!r})"),
                   env={"OPTIMIZER_LAB_HOME": str(tmp_path)})
    assert result["exception"] == []
    assert result["titles"] == [title]
    assert_tf_free(result)


# ----- one source of truth: the catalog and the classes agree ----------------------------------
def _bool_combinations(defaults: dict) -> list[dict]:
    keys = [k for k, v in defaults.items() if isinstance(v, bool)]
    return [dict(zip(keys, values)) for values in itertools.product([False, True],
                                                                     repeat=len(keys))]


def _option_combinations(name: str) -> list[dict]:
    """Every combination of `name`'s bool options and (for a wrapper) every inner rule it
    accepts, with the inner rule's bool options too when the wrapper passes them on; other
    options at their defaults."""
    own = _bool_combinations(registry.option_defaults(name))
    if not registry.is_wrapper(name):
        return own
    out = []
    for inner in [n for n in registry.names() if _wraps(name, n)]:
        inner_choices = [{}]
        if registry.entry(name).wrapper.passes_inner_options:
            inner_choices = _bool_combinations(registry.option_defaults(inner))
        out += [{**choice, "inner": inner, **extra} for choice in own for extra in inner_choices]
    return out


def _wraps(wrapper: str, inner: str) -> bool:
    try:
        registry.validate_options(wrapper, {"inner": inner})
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", list(catalog.BUILTINS))
def test_catalog_agrees_with_the_class(name):
    import tf_keras

    from optimizers.base import RuleOptimizer
    from optimizers.wrapping import Wrapper

    entry = catalog.BUILTINS[name]
    cls = registry.get(name)
    assert (cls.__name__, tf_keras.saving.get_registered_name(cls)) == (entry.class_name,
                                                                         entry.keras_name)
    assert f"{cls.__module__}:{cls.__name__}" == entry.class_path
    assert issubclass(cls, RuleOptimizer) == entry.is_rule
    assert issubclass(cls, Wrapper) == (entry.wrapper is not None)
    assert tuple(cls.OPTIONS) == catalog.option_names(name)
    params = inspect.signature(cls.__init__).parameters
    for option, default in entry.options:  # the constructor's defaults (inner: a name)
        if option != "inner":
            assert params[option].default == default, option
            assert type(params[option].default) is type(default), option
    if entry.wrapper is not None:
        assert registry.name_of(cls.DEFAULT_INNER) == entry.option_defaults()["inner"]
        assert getattr(cls, "PASSES_INNER_OPTIONS", False) == entry.wrapper.passes_inner_options
        assert issubclass(cls.INNER_BASE, RuleOptimizer) == entry.wrapper.inner_must_be_rule
    for spec in entry.hyperparameters:  # the spec default is the constructor's default
        assert float(params[spec.name].default) == spec.default, spec.name
    combinations = _option_combinations(name)
    assert len(combinations) >= 1
    for options in combinations:  # the specs an instance reports, with every option choice
        instance = registry.create(name, {}, options)
        assert registry.specs(name, options) == tuple(instance.hyperparameter_specs()), options


@pytest.mark.parametrize("name", [n for n, e in catalog.BUILTINS.items() if e.option_ranges])
def test_option_ranges_refuse_what_the_constructor_refuses(name):
    """The catalog's option limits (checked without building the class) give the very
    refusal the constructor gives, on both sides of every limit."""
    from optimizers import accumulation

    assert catalog.MAX_ACCUMULATION_STEPS == accumulation.MAX_ACCUMULATION_STEPS
    cls = registry.get(name)
    for option, limits in catalog.BUILTINS[name].option_ranges:
        kind = type(registry.option_defaults(name)[option])
        bad = ([kind(limits.low - 1)] if math.isfinite(limits.low) else []) + (
            [kind(limits.high + 1)] if math.isfinite(limits.high) else [])
        bad += [math.nan, math.inf, -math.inf] if kind is float else []
        for value in bad:
            with pytest.raises(ValueError) as built:
                cls(**{option: value})
            with pytest.raises(ValueError) as checked:
                registry.validate_options(name, {option: value})
            assert str(checked.value) == str(built.value)
            assert type(checked.value) is type(built.value)
        good = [kind(x) for x in (limits.low, limits.high) if math.isfinite(x)]
        for value in good:
            assert registry.validate_options(name, {option: value})[option] == value
            cls(**{option: value})  # accepted by the constructor too


def test_module_level_spec_constants_equal_the_catalog():
    """RHO, WEIGHT_DECAY, ... still declared in the class modules must not drift."""
    import importlib

    checked = 0
    for entry in catalog.BUILTINS.values():
        module = importlib.import_module(entry.class_path.split(":")[0])
        for attribute, value in vars(module).items():
            if isinstance(value, HyperSpec) and hasattr(catalog, attribute):
                assert value == getattr(catalog, attribute), f"{module.__name__}.{attribute}"
                checked += 1
    assert checked >= 5  # SGD_LEARNING_RATE, RHO, WEIGHT_DECAY, SYNC_PERIOD, ... at least


def test_pure_rule_sources_read_without_import_equal_inspect():
    import inspect

    from optimizers.rule_source import pure_rule_sources

    for name, entry in catalog.BUILTINS.items():
        cls = registry.get(name)
        module = inspect.getmodule(cls)
        found = pure_rule_sources(entry.class_path)
        for qualified, text in found.items():  # what inspect reads from the imported class
            owner, _, function = qualified.rpartition(".")
            target = getattr(cls if owner else module, function)
            assert text == inspect.getsource(target), (name, qualified)
        methods = [m for m in ("coefficients", "update") if m in vars(cls)]
        assert [q for q in found if "." in q] == [f"{cls.__name__}.{m}" for m in methods], name
    adam = pure_rule_sources(catalog.BUILTINS["adam"].class_path)
    assert list(adam) == ["Adam.coefficients", "adam_coefficients", "Adam.update", "adam_update",
                          "adam_decrement", "adam_moments"]  # followed transitively
    assert pure_rule_sources("optimizers.no_such_module:X") == {}


def test_wrapper_refusals_name_the_option():
    with pytest.raises(ValueError, match=r"option inner='lookahead' refused: accumulation wraps "
                                         r"a plain rule \(not accumulation, lookahead, "
                                         r"moving_average\)"):
        registry.validate_options("accumulation", {"inner": "lookahead"})
    with pytest.raises(ValueError, match="option inner='moving_average' refused: cannot wrap "
                                         "itself"):
        registry.validate_options("moving_average", {"inner": "moving_average"})
    with pytest.raises(KeyError, match="optimizer='nope' is unknown; known: adam, sgd"):
        registry.validate_options("lookahead", {"inner": "nope"})
    with pytest.raises(ValueError, match="option 'nesterov' refused: lookahead takes inner"):
        registry.validate_options("lookahead", {"inner": "sgd", "nesterov": True})
    assert registry.validate_options("accumulation", {"inner": "sgd", "nesterov": True}) == {
        "inner": "sgd", "accumulation_steps": 2, "nesterov": True}


def test_catalog_entry_round_trips_as_json_with_infinite_bounds():
    entry = catalog.BUILTINS["adam"]
    data = json.loads(json.dumps(entry.to_data(), allow_nan=False))  # strict JSON
    assert data["hyperparameters"][0]["library_high"] == "inf"
    assert CatalogEntry.from_data(data) == entry
    assert math.isinf(CatalogEntry.from_data(data).hyperparameters[0].library_high)
    with pytest.raises(ValueError, match="catalog entry refused: KeyError"):
        CatalogEntry.from_data({"name": "x"})


def test_register_a_class_directly_still_works():
    from optimizers.adam import Adam

    class SlowAdam(Adam):
        HYPERPARAMETERS = (dataclasses.replace(Adam.HYPERPARAMETERS[0], default=1e-4),
                           *Adam.HYPERPARAMETERS[1:])

    state = registry.snapshot()
    try:
        registry.register("slow_adam", SlowAdam)
        assert "slow_adam" in registry.OPTIMIZERS and registry.get("slow_adam") is SlowAdam
        assert registry.specs("slow_adam")[0].default == 1e-4
        assert registry.option_defaults("slow_adam") == {"amsgrad": False}
        assert registry.name_of(SlowAdam) == "slow_adam"
        assert registry.class_named("SlowAdam") is SlowAdam
        assert registry.validate_hypers("slow_adam", {})["learning_rate"] == 1e-4
        assert registry.create("slow_adam", {"beta_1": 0.5}).get_config()["beta_1"] == 0.5
        with pytest.raises(ValueError, match="already registered"):
            registry.register("slow_adam", SlowAdam)
        with pytest.raises(ValueError, match="is not a RuleOptimizer subclass"):
            registry.register("not_one", int)
    finally:
        registry.restore(state)
    assert "slow_adam" not in registry.OPTIMIZERS


# ----- plugins: described by the check process, registered without importing them -------------
@pytest.mark.slow
def test_a_plugin_is_registered_from_the_check_process_data_without_tensorflow(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(ROOT / "plugins" / "good_optimizer.py", folder / "good_optimizer.py")
    shutil.copy(ROOT / "plugins" / "bad_optimizer.py", folder / "bad_optimizer.py")
    result = probe(f"""
        import sys
        from optimizer_plugins import plugin_discovery as plugins
        from optimizers import registry
        reports = plugins.discover_bounded({str(folder)!r})
        notes = {{c.name: c.note for r in reports for c in r.classes}}
        specs = [s.name for s in registry.specs("adabelief")]
        values = registry.validate_hypers("adabelief", {{"learning_rate": 3e-4}})
        imported = sorted(m for m in sys.modules if m.startswith(plugins.MODULE_PREFIX))
        rule, known = registry.is_rule("adabelief"), registry.class_names().get("AdaBelief")
        report(notes=notes, specs=specs, values=values, imported=imported, rule=rule,
               known=known, names=registry.names())
    """)
    assert_tf_free(result)  # TensorFlow ran in the check process only
    assert result["imported"] == []  # the plugin file was never imported here
    assert result["notes"]["AdaBelief"] == "registered as 'adabelief'"
    assert result["notes"]["BadMomentum"].startswith("not registered: failed")
    assert result["names"][-1] == "adabelief" and result["rule"]
    assert result["known"] == "adabelief"
    assert result["specs"] == ["learning_rate", "beta_1", "beta_2", "epsilon"]
    assert result["values"]["learning_rate"] == 3e-4 and result["values"]["beta_2"] == 0.999
    assert result["values"]["epsilon"] == 1e-8


def test_a_plugin_entry_imports_its_class_only_when_built(tmp_path):
    from optimizer_plugins import plugin_discovery as plugins

    source = ROOT / "plugins" / "good_optimizer.py"
    entry = CatalogEntry("adabelief_lazy", plugins.class_path(source, "AdaBelief"), "AdaBelief",
                         "OptimizerLabPlugins>AdaBelief", (registry.specs("adam")[0],), (), True)
    state = registry.snapshot()
    try:
        registry.register_entry(entry)
        assert registry.class_name("adabelief_lazy") == "AdaBelief"
        optimizer = registry.create("adabelief_lazy", {"learning_rate": 0.01})
        assert type(optimizer).__name__ == "AdaBelief"
        assert float(optimizer._get_hyper("learning_rate")) == pytest.approx(0.01)
        with pytest.raises(ValueError, match="already registered"):
            registry.register_entry(entry)
    finally:
        registry.restore(state)


# ----- the device list from a child process ----------------------------------------------------
def test_device_probe_lists_the_cpu_from_a_child_process():
    from components import device_list

    found = device_list.probe()
    assert found.final and found.error == ""
    assert found.names[0] == "/device:CPU:0"
    assert all(name.startswith("/device:") for name in found.names)


def test_device_probe_failures_fall_back_to_the_cpu(tmp_path):
    from components import device_list

    late = device_list.probe(timeout_s=0.01)
    assert late == device_list.DeviceList(("/device:CPU:0",), True,
                                          "device probe did not answer in 0.01 s")
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    broken.chmod(0o755)
    failed = device_list.probe(python=str(broken))
    assert failed.names == ("/device:CPU:0",) and failed.final
    assert failed.error == "device probe failed: boom"


def test_device_names_are_provisional_until_the_probe_answers(monkeypatch):
    from components import device_list

    device_list._reset_for_tests()
    release = __import__("threading").Event()

    def slow_probe():
        release.wait(30)
        return device_list.DeviceList(("/device:CPU:0", "/device:GPU:0"), True)

    monkeypatch.setattr(device_list, "probe", slow_probe)
    try:
        assert device_list.device_names() == device_list.DeviceList(("/device:CPU:0",), False)
        release.set()
        answer = device_list.device_names(wait_s=30)
        assert answer.final and answer.names == ("/device:CPU:0", "/device:GPU:0")
    finally:
        release.set()
        device_list._reset_for_tests()
