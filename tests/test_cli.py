"""`python -m lab_cli` (the `optimizer-lab` command): a short real run into a store, list,
export, import-and-rerun, and argparse-style refusals naming the flag and its range."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_cli.cli import build_parser, config_from_args, main
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--optimizer", "sgd", "--learning-rate", "0.05", "--momentum", "0.9",
         "--dataset", "digits", "--model", "logistic", "--steps", "40", "--eval-every", "20",
         "--seed", "3"]


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "lab_cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_train_list_export_import_rerun(tmp_path, capsys):
    store_path = tmp_path / "runs.sqlite"
    done = _cli(*TRAIN, "--name", "from the cli", "--store", str(store_path))
    assert done.returncode == 0, done.stderr[-2000:]
    run_id = int(done.stdout.split()[-1])
    assert "40/40" in done.stderr and "finished" in done.stderr  # the progress bar's last state
    store = RunStore(store_path)
    final = next(line for line in done.stderr.splitlines()
                 if line.startswith(f"run {run_id} final: "))
    last = store.scalars(run_id, ["train_loss", "val_loss", "val_accuracy"]).groupby("name").last()
    assert sorted(last.index) == ["train_loss", "val_accuracy", "val_loss"]
    for name, row in last.iterrows():  # the validation numbers, not only the train loss
        assert f"{name} {row['value']:.4g} (step {int(row['step'])})" in final, final
    run = store.run(run_id)
    assert (run["status"], run["step"], run["name"]) == ("finished", 40, "from the cli")
    assert run["config"]["hyperparameters"] == {"learning_rate": 0.05, "momentum": 0.9}
    assert run["config"]["model"] == "logistic" and run["config"]["seed"] == 3

    assert main(["list", "--store", str(store_path)]) == 0
    listing = capsys.readouterr().out
    assert "from the cli" in listing and "40/40" in listing and "finished" in listing

    assert main(["export", str(run_id), "--out", str(tmp_path / "out"),
                 "--store", str(store_path), "--no-tensorboard"]) == 0
    config_path = tmp_path / "out" / f"run-{run_id}" / "config.json"
    assert config_path.exists() and "tensorboard --logdir" not in capsys.readouterr().out

    again = _cli("import", str(config_path), "--store", str(store_path), "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    rerun = int(again.stdout.split()[-1])
    assert store.run(rerun)["config"] == run["config"]
    losses = [store.scalars(r, ["train_loss"])["value"].tolist() for r in (run_id, rerun)]
    assert len(losses[0]) == 40 and losses[0] == losses[1]  # same config and seed: same curve


def test_final_line_names_train_and_validation_numbers(tmp_path):
    from lab_cli.cli import final_scalars
    from tests.fake_runs import add_fake_run

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = add_fake_run(store, steps=30)
    text = final_scalars(store, run_id)
    assert text == (f"train_loss {2.3 * math.exp(-30 / 11):.4g} (step 30) · "
                    f"val_loss {2.3 * math.exp(-30 / 13.2):.4g} (step 30) · "
                    "val_accuracy 0.9 (step 30)")
    empty = store.create_run(RunConfig(steps=5).to_json_dict())
    assert final_scalars(store, empty) == ""  # nothing recorded yet


def _error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        config_from_args(build_parser().parse_args(argv), build_parser())
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, fragments", [
    (["--learning-rate", "-1"], ["argument --learning-rate", "must be a float in (0, 10]"]),
    (["--beta-1", "1.5"], ["argument --beta-1", "beta_1=1.5 refused", "[0, 1)"]),
    (["--momentum", "0.9"], ["argument --momentum", "adam has no hyperparameter momentum"]),
    (["--nesterov"], ["argument --nesterov", "adam takes --amsgrad"]),
    (["--steps", "0"], ["argument --steps", "greater than or equal to 1",
                        "allowed: an integer in [1, 1000000]"]),
    (["--optimizer", "accumulation", "--accumulation-steps", "0"],
     ["argument --accumulation-steps", "accumulation_steps=0 refused: must be an int in [1, 10000]"]),
    (["--dataset", "tokens"], ["argument --model", "model='mlp' refused for dataset='tokens'"]),
])
def test_bad_flag_values_are_argparse_errors(argv, fragments, capsys):
    err = _error(["train", *argv], capsys)
    assert err.startswith("optimizer-lab: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_parse_time_type_errors_and_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--learning-rate", "fast"])
    assert "argument --learning-rate: invalid float value: 'fast'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--optimizer", "os.system"])
    assert "invalid choice: 'os.system'" in capsys.readouterr().err


def test_flags_override_a_config_file(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text('{"optimizer": "sgd", "hyperparameters": {"momentum": 0.5}, "steps": 9}')
    args = build_parser().parse_args(["train", "--config", str(path), "--learning-rate", "0.2"])
    config = config_from_args(args, build_parser())
    assert config.hyperparameters == {"learning_rate": 0.2, "momentum": 0.5}
    assert config.steps == 9 and config.optimizer == "sgd"
    other = build_parser().parse_args(["train", "--config", str(path), "--optimizer", "adam"])
    assert config_from_args(other, build_parser()).hyperparameters["learning_rate"] == 0.001
    path.write_text('{"class_name": "os.system"}')
    err = _error(["train", "--config", str(path)], capsys)
    assert "argument --config" in err and "'os.system' is not a registered optimizer" in err


def test_hypergradient_and_dtype_flags_are_generated():
    args = build_parser().parse_args([
        "train", "--hypergradients", "learning_rate", "beta_1", "--hypergradient-every", "3",
        "--reverse-horizon", "5", "--reverse-every", "20", "--autotune", "learning_rate=0.01",
        "--autotune-every", "4", "--dtype", "float64"])
    config = config_from_args(args, build_parser())
    assert config.hypergradients == ["learning_rate", "beta_1"] and config.dtype == "float64"
    assert (config.hypergradient_every, config.reverse_horizon, config.reverse_every,
            config.autotune_every) == (3, 5, 20, 4)
    assert config.autotune == {"learning_rate": 0.01}


@pytest.mark.parametrize("argv, fragments", [
    (["--autotune", "learning_rate=nan", "--hypergradients", "learning_rate"],
     ["argument --autotune", "must be finite"]),
    (["--autotune", "learning_rate=0.1"], ["argument --autotune", "only followed"]),
    (["--reverse-horizon", "201", "--hypergradients", "learning_rate"],
     ["argument --reverse-horizon", "[0, 200]"]),
    (["--hypergradients", "momentum"], ["argument --hypergradients", "adam has"]),
])
def test_hypergradient_flag_refusals_name_the_flag(argv, fragments, capsys):
    err = _error(["train", *argv], capsys)
    assert err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_autotune_flag_syntax_is_checked_by_argparse(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--autotune", "learning_rate"])
    assert "argument --autotune: 'learning_rate' is not NAME=X" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["abc", "0", "1025", "1.5"])
def test_bad_pool_size_is_one_line_naming_the_variable(value, tmp_path, monkeypatch, capsys):
    """`OPTIMIZER_LAB_POOL_SIZE=abc optimizer-lab train`: one line naming the variable, no
    traceback."""
    monkeypatch.setenv("OPTIMIZER_LAB_POOL_SIZE", value)
    store = tmp_path / "runs.sqlite"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--steps", "1", "--store", str(store)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"OPTIMIZER_LAB_POOL_SIZE={value!r} refused" in err and "[1, 1024]" in err, err
    assert not store.exists()  # refused before the store was touched


@pytest.mark.slow  # a real process (it imports TensorFlow)
def test_bad_worker_nice_is_one_line_naming_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPTIMIZER_LAB_WORKER_NICE", "-5")
    store = tmp_path / "runs.sqlite"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--steps", "1", "--store", str(store)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OPTIMIZER_LAB_WORKER_NICE='-5' refused" in err, err
    assert "[0, 19]" in err and not store.exists()


def test_bad_pool_size_process_exits_2_without_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3",
               OPTIMIZER_LAB_HOME=str(tmp_path), OPTIMIZER_LAB_POOL_SIZE="abc")
    done = subprocess.run([sys.executable, "-m", "lab_cli", "train", "--steps", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines()  # TensorFlow's own start-up notices
             if not line.startswith(("WARNING: All log messages", "I0000", "E0000"))]
    assert len(lines) == 1 and "OPTIMIZER_LAB_POOL_SIZE='abc' refused" in lines[0], lines
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # the plugin check runs in a child process that imports TensorFlow
def test_the_command_line_loads_plugins_for_a_plugin_optimizer(tmp_path, monkeypatch, capsys,
                                                              request):
    from lab_cli import cli
    from optimizer_plugins import plugin_discovery as plugins
    from optimizers import registry

    state = registry.snapshot()  # the plugins registered here are dropped afterwards
    request.addfinalizer(lambda: registry.restore(state))
    monkeypatch.setenv(plugins.ENV_VAR, str(plugins.DEFAULT_DIR))
    monkeypatch.delenv(plugins.LOADED_ENV_VAR, raising=False)
    # an earlier test of this process may have imported the plugin files (discovery in-process):
    # forget them here, so that the check below sees only what load_plugins_for imports
    for module in [m for m in sys.modules if m.startswith(plugins.MODULE_PREFIX + ".")]:
        monkeypatch.delitem(sys.modules, module)
    assert "adabelief" not in registry.OPTIMIZERS
    argv = ["train", "--optimizer", "adabelief", "--beta-2", "0.95", "--epsilon", "1e-12",
            "--steps", "5"]
    notes = cli.load_plugins_for(argv)
    assert all(not note.startswith(("plugin good_optimizer", "plugin template")) for note in notes)
    assert {"adabelief", "accumulated_sgd"} <= set(registry.OPTIMIZERS)  # the example and template
    # registered from the check process's description: the files are not imported here
    assert not {"optimizer_lab_plugins.good_optimizer",
                "optimizer_lab_plugins.template_optimizer"} & set(sys.modules)
    parser = build_parser()
    config = config_from_args(parser.parse_args(argv), parser)
    assert config.optimizer == "adabelief" and config.hyperparameters["beta_2"] == 0.95
    assert config.hyperparameters["epsilon"] == 1e-12
    # a built-in name loads nothing (no child process)
    monkeypatch.setattr(plugins, "discover_bounded", lambda *a: pytest.fail("loaded plugins"))
    assert cli.load_plugins_for(["train", "--optimizer", "adam"]) == []


def test_the_installed_command_is_the_cli():
    """`pip install -e .` (as .ci/run does) puts `optimizer-lab` on the PATH: the same parser
    as `python -m lab_cli`."""
    import shutil

    command = shutil.which("optimizer-lab")
    if command is None:
        pytest.skip("the project is not installed here (pip install -e .)")
    done = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _cli("--help").stdout
