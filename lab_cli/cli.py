"""The command line: train, list, export and import runs of the run store, without the browser.

    optimizer-lab train --optimizer adam --learning-rate 0.01 --dataset digits \\
        --steps 500 --seed 0 [--config FILE.json] [--store PATH] [--name TEXT]
    optimizer-lab train --continue RUN_ID [--store PATH]
    optimizer-lab list [--store PATH]
    optimizer-lab export RUN_ID --out DIR [--store PATH] [--no-tensorboard]
    optimizer-lab import FILE.json|RUN.zip [--store PATH]

(`optimizer-lab` is the command `pip install -e .` installs; `python -m lab_cli` is the same.)

`train` and `import` create the run in the store (default `$OPTIMIZER_LAB_HOME/runs.sqlite`,
the one the Streamlit app shows) and start the same run process the Train page starts
(`runs.service.control.start_run`); the command polls the store and draws a progress bar on stderr.
Ctrl-C sends `stop` to the run and waits for it to end. `--detach` returns at once.

Every flag of `train` is generated from the settings table (`settings.cli_flags`): one per
`RunConfig` field (`--steps`, `--dtype`, `--hypergradients`, `--autotune NAME=X`, ...), one per
hyperparameter from the registry's `HyperSpec`s (`--learning-rate`, `--beta-1`, ...) and one per
option (`--amsgrad`, `--nesterov`, `--inner`, ...); the values go through the one decoder
(`settings.decode`) that the share link and the config file use too. Any refusal (a bad value,
an unknown name, a missing or unreadable file, a store that is not one, a bad
`OPTIMIZER_LAB_POOL_SIZE`, a run that cannot be continued) is ONE line on stderr,
`optimizer-lab <command>: error: argument --flag: ... allowed ...`, exit status 2, no
traceback. `import` takes a config JSON or an exported run zip. The run's exit status is 0
when it finished, 1 otherwise.

`train --continue RUN_ID` resumes an interrupted or stopped run (or one that failed because
the store could not be written) from its last checkpoint, under the same id, with its own config
(no config flags; `runs.service.continuing`), then follows it like a new run.

Plugins: `--optimizer NAME` for a name that is not built in loads the plugins folder first
(`--plugins DIR`, `$OPTIMIZER_LAB_PLUGINS`, default `./plugins`; each file imported in a
time-limited child process and contract-checked, as the app does, and registered from the
child's description without being imported here), so `train --optimizer adabelief` trains the
example plugin.

No TensorFlow for parsing: the flags, their ranges and every refusal come from the optimizer
catalog (`optimizers.catalog` through `optimizers.registry`); TensorFlow runs in the run
process only (tests/test_tf_free_server.py).

Same config and seed give the same curve: the run's weights, split and batch order are seeded
from `RunConfig.seed` alone.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from settings.cli_flags import (COMMAND_LINE, FlagError, add_run_flags, flag, hyper_specs,
                                option_types, values_from_args)
from settings.config_file import ConfigImportError
from settings.decode import decode
from settings.run_config import RunConfig
from runs.protocol import FINAL_STATUSES
from runs.store.run_store import RunStore

__all__ = ["build_parser", "config_from_args", "flag", "hyper_specs", "main", "option_types"]
PROG = "optimizer-lab"  # the installed command ([project.scripts] in pyproject.toml)
POLL_S = 0.2
FINAL_SCALARS = ("train_loss", "val_loss", "val_accuracy")  # printed when a followed run ends
MAX_NAME_CHARS = 120  # as `RunStore.rename_run`


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `prog: error: message (see --help)`, exit status 2.

    The stock parser prints the usage first, dozens of lines for `train`, which buries the one
    line that says what was wrong. Sub-parsers inherit this class.
    """

    def error(self, message: str):  # noqa: D102 - argparse's hook
        one_line = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=_store_location, default=None,
                        help="run-store SQLite file or postgresql:// URL (default "
                             "$OPTIMIZER_LAB_STORE, else $OPTIMIZER_LAB_HOME/runs.sqlite)")


def _store_location(text: str) -> Path | str:
    """A `--store` value: a PostgreSQL URL as written (a Path would fold its `//`), else a
    path."""
    from runs.store.connection import is_url

    return text if is_url(text) else Path(text)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="", help="display name of the run")
    parser.add_argument("--detach", action="store_true",
                        help="start the run and return at once (no progress bar)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--executor", choices=("local", "ray"), default=None,
                        help="what trains the run: local run hosts or Ray actors (default "
                             "$OPTIMIZER_LAB_EXECUTOR, else local)")
    parser.add_argument("--ray-address", default=None,
                        help="the Ray cluster with --executor ray: auto, host:port or "
                             "ray://host:10001 (default $OPTIMIZER_LAB_RAY_ADDRESS, else auto)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; hyperparameter and option flags come from the registry."""
    parser = Parser(prog=PROG,
                    description="Optimizer Lab from the command line.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train one run into the store",
                                description="Train one run; flags override --config.")
    train.add_argument("--config", type=Path, default=None,
                       help="start from this config JSON (an export or a bare RunConfig) or "
                            "exported run zip")
    add_run_flags(train)  # generated from the settings table (settings.cli_flags)
    train.add_argument("--continue", dest="continue_id", type=int, default=None,
                       metavar="RUN_ID",
                       help="resume this interrupted or stopped run from its last checkpoint "
                            "(same id, its own config: no config flags)")
    _store_argument(train)
    _run_arguments(train)
    sweep = train.add_argument_group(
        "learning-rate range test (Smith 2017): --lr-range sweeps a fresh copy of this run in "
        "this process instead of training it; nothing is stored")
    sweep.add_argument("--lr-range", action="store_true",
                       help="sweep the learning rate geometrically from --lr-min to --lr-max and "
                            "print the steepest descent and the divergence point")
    sweep.add_argument("--lr-min", type=float, default=1e-5, help="first rate (default 1e-5)")
    sweep.add_argument("--lr-max", type=float, default=10.0, help="last rate (default 10)")
    sweep.add_argument("--lr-steps", type=int, default=200, help="steps (default 200)")
    sweep.add_argument("--lr-out", type=Path, default=None,
                       help="write the sweep's rows (step, learning_rate, loss, smoothed) to "
                            "this CSV file")

    listing = commands.add_parser("list", help="list the runs of the store")
    _store_argument(listing)

    export = commands.add_parser("export", help="export a run: config JSON, CSV/Parquet, "
                                                "TensorBoard events, zip")
    export.add_argument("run_id", type=int)
    export.add_argument("--out", type=Path, required=True, help="output directory")
    export.add_argument("--no-tensorboard", action="store_true")
    _store_argument(export)

    imported = commands.add_parser("import", help="start a run from a config JSON file or an "
                                                  "exported run zip")
    imported.add_argument("file", type=Path)
    _store_argument(imported)
    _run_arguments(imported)
    return parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RunConfig:
    """The `RunConfig` of `train`'s flags (over `--config`); refusals are `parser.error`."""
    base: dict[str, Any] = {}
    if args.config is not None:
        from runs.io.export import load_import  # pandas: only when a file is given

        try:
            base = load_import(args.config).to_json_dict()
        except (ConfigImportError, OSError) as error:
            parser.error(f"argument --config: {args.config}: {_os_message(error)}")
    given = values_from_args(args)
    if "optimizer" in given and given["optimizer"] != base.get("optimizer", given["optimizer"]):
        base.pop("hyperparameters", None)  # another optimizer: the file's values do not apply
        base.pop("options", None)
    for field, value in given.items():
        if isinstance(value, dict):  # name -> value fields: the flags add to the file's
            base[field] = {**base.get(field, {}), **value}
        else:
            base[field] = value
    try:
        return decode(base, COMMAND_LINE)
    except FlagError as error:
        parser.error(str(error))
    raise AssertionError("unreachable")


def check_environment(parser: argparse.ArgumentParser) -> None:
    """Refuse a bad `OPTIMIZER_LAB_POOL_SIZE` or `OPTIMIZER_LAB_WORKER_NICE` as one line
    (`parser.error`, exit status 2) before a store is opened or a run started."""
    from runs.service import pool

    try:
        pool.pool_size()
        pool.worker_nice()
    except ValueError as error:
        parser.error(f"environment variable {error}")


def check_executor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """`--executor` and `--ray-address` (they set `OPTIMIZER_LAB_EXECUTOR` and
    `OPTIMIZER_LAB_RAY_ADDRESS` for this command and what it starts), checked and, for Ray,
    connected before a store is opened or a run stored (`runs.service.executor.check`): a
    refusal is `parser.error` naming the flag and the variable. On Ray this command owns the
    host actors and they end with it, so `--detach` is refused there."""
    from runs.service import executor

    if args.executor:
        os.environ[executor.EXECUTOR_ENV] = args.executor
    if args.ray_address:
        os.environ[executor.ADDRESS_ENV] = args.ray_address
    try:
        chosen = executor.check()
    except ValueError as error:
        parser.error(f"argument --executor/--ray-address: {error}")
    if args.ray_address and not chosen.ray:
        parser.error("argument --ray-address: refused with the local executor; add --executor "
                     "ray (or OPTIMIZER_LAB_EXECUTOR=ray)")
    if chosen.ray and args.detach:
        parser.error("argument --detach: refused with --executor ray: the run hosts are Ray "
                     "actors owned by this command, and they end with it")


def _os_message(error: Exception) -> str:
    """`[Errno 2] No such file or directory: 'x'` -> `No such file or directory`."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


def open_store(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RunStore:
    """The run store of `--store` (default `$OPTIMIZER_LAB_HOME/runs.sqlite`).

    `list` and `export` only read: a `--store` that does not exist is refused rather than
    created empty. Every failure to open is `parser.error` naming `--store`.
    """
    if (isinstance(args.store, Path) and args.command in ("list", "export")
            and not args.store.is_file()):
        parser.error(f"argument --store: {args.store}: no such run-store file")
    try:
        return RunStore(args.store) if args.store else RunStore()
    except (OSError, sqlite3.Error) as error:
        where = args.store or "the default store (OPTIMIZER_LAB_HOME)"
        parser.error(f"argument --store: {where}: not a usable run store ({_os_message(error)})")
    raise AssertionError("unreachable")


def _progress(store: RunStore, run_id: int, total: int, show: bool) -> dict[str, Any]:
    """Poll the run until it ends, drawing a rich progress bar on stderr; returns the run."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]run {task.fields[run]}[/] {task.fields[status]}"),
                  BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[loss]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                  disable=not show) as bar:
        task = bar.add_task("train", total=total, run=f"#{run_id}", status="starting", loss="")
        while True:
            store.mark_interrupted()  # a run whose process died ends the wait
            run = store.run(run_id)
            loss = store.scalars(run_id, ["train_loss"]).tail(1)
            text = f"loss {loss['value'].iloc[0]:.4g}" if not loss.empty else ""
            bar.update(task, completed=run["step"], status=run["status"], loss=text)
            if run["status"] in FINAL_STATUSES:
                return run
            time.sleep(POLL_S)


def final_scalars(store: RunStore, run_id: int) -> str:
    """The run's last recorded value of each of `FINAL_SCALARS` with its step, e.g.
    `train_loss 0.2131 (step 40) · val_loss 0.2544 (step 40) · val_accuracy 0.9222 (step 40)`
    (4 significant digits; a scalar never recorded is left out; "" when none is)."""
    table = store.scalars(run_id, FINAL_SCALARS)
    last = table.groupby("name", sort=False).tail(1).set_index("name")
    return " · ".join(f"{name} {last.loc[name, 'value']:.4g} (step {int(last.loc[name, 'step'])})"
                      for name in FINAL_SCALARS if name in last.index)


def run_config(config: RunConfig, store: RunStore, args: argparse.Namespace) -> int:
    """Start `config` as a run and (unless `--detach`) follow it; returns the exit status."""
    from runs.service import control

    run_id = control.start_run(config, store, name=args.name)
    print(f"run {run_id} started: {config.optimizer} on {config.dataset}/{config.model}, "
          f"{config.steps} steps, seed {config.seed} (store {store.path})", file=sys.stderr)
    return follow(store, run_id, config.steps, args)


def continue_run(store: RunStore, args: argparse.Namespace,
                 parser: argparse.ArgumentParser) -> int:
    """`train --continue RUN_ID`: requeue the run from its checkpoint
    (`runs.service.continuing.continue_run`) and (unless `--detach`) follow it; returns the exit
    status. A refusal is `parser.error` naming `--continue`, the run and why."""
    from runs.service import continuing

    run_id = args.continue_id
    try:
        done = continuing.continue_run(store, run_id)
    except KeyError as error:
        parser.error(f"argument --continue: {error.args[0]}")
    except ValueError as error:
        parser.error(f"argument --continue: {error}")
    total = int(store.run(run_id)["total_steps"])
    print(f"run {run_id} {done.note}; it trains on to step {total} (store {store.path})",
          file=sys.stderr)
    return follow(store, run_id, total, args)


def follow(store: RunStore, run_id: int, total: int, args: argparse.Namespace) -> int:
    """Follow a started run to its end with a progress bar (or return at once with `--detach`);
    Ctrl-C stops it. Returns the exit status (0 when it finished)."""
    from runs.service import control, waiting

    if args.detach:
        print(run_id)
        return 0
    from runs.service import executor, warm_pool

    if executor.chosen() == executor.RAY:  # the host actors of this command (connected above)
        warm_pool.keep_warm(store)
    try:
        run = _progress(store, run_id, total, show=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\nstopping run {run_id}...", file=sys.stderr)
        try:
            control.stop(store, run_id)
        except ValueError:
            pass
        run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=60)
    print(f"run {run_id} {run['status']}: {run['message']}", file=sys.stderr)
    final = final_scalars(store, run_id)
    if final:  # the validation numbers too, not only the progress bar's train loss
        print(f"run {run_id} final: {final}", file=sys.stderr)
    print(run_id)
    return 0 if run["status"] == "finished" else 1


def lr_range_test(config: RunConfig, args: argparse.Namespace,
                  parser: argparse.ArgumentParser) -> int:
    """`train --lr-range`: a range test from the start of `config`, in this process; prints
    the marks (and writes the rows to `--lr-out`). Returns 0."""
    from runs.process import sweeps

    try:
        table, result = sweeps.sweep_from_start(config, args.lr_min, args.lr_max, args.lr_steps)
    except ValueError as error:
        field = str(error).split("=")[0]
        flag_name = {"lr_min": "--lr-min", "lr_max": "--lr-max", "steps": "--lr-steps"}.get(
            field, "--lr-range")
        parser.error(f"argument {flag_name}: {error}")
    print(f"learning-rate range test of {config.optimizer} on {config.dataset}/{config.model} "
          f"from the start, {len(table)} of {args.lr_steps} steps", file=sys.stderr)
    print(sweeps.summary(result))
    if args.lr_out is not None:
        try:
            table.to_csv(args.lr_out, index=False)
        except OSError as error:
            parser.error(f"argument --lr-out: {args.lr_out}: {_os_message(error)}")
        print(f"rows written to {args.lr_out}", file=sys.stderr)
    return 0


def list_runs(store: RunStore) -> str:
    """The runs of `store` as a plain-text table (newest first)."""
    import pandas as pd

    store.mark_interrupted()  # list a run whose process died as interrupted
    table = store.runs()
    if table.empty:
        return f"no runs in {store.path}"
    last = store.last_scalars(("val_loss", "val_accuracy"))
    finals = last.pivot_table(index="run_id", columns="name", values="value", aggfunc="last")
    table = table.join(finals, on="id")
    table["created"] = pd.to_datetime(table["created"], unit="s").dt.strftime("%Y-%m-%d %H:%M")
    table["steps"] = table["step"].astype(str) + "/" + table["total_steps"].astype(str)
    columns = ["id", "name", "status", "optimizer", "dataset", "model", "seed", "steps",
               "val_loss", "val_accuracy", "created"]
    for column in ("val_loss", "val_accuracy"):
        if column not in table:
            table[column] = float("nan")
    return table[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")


def requested_optimizer(argv: Sequence[str]) -> str | None:
    """The value of `--optimizer` in `argv` (`--optimizer X` or `--optimizer=X`), or None."""
    for index, arg in enumerate(argv):
        if arg == "--optimizer" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--optimizer="):
            return arg.split("=", 1)[1]
    return None


def load_plugins_for(argv: Sequence[str]) -> list[str]:
    """Register the plugins folder's optimizers when `--optimizer` names one that is not built
    in (before the parser is built: its choices come from the registry). Returns the notes of
    the files that did not load (printed by the caller; the parser then refuses the name).

    `--plugins DIR` is read from `argv` and removed from it by the caller's parser; the run
    process finds the same folder through `OPTIMIZER_LAB_PLUGINS` (set here).
    """
    import os

    from optimizer_plugins import plugin_discovery as plugins
    from optimizers import registry

    name = requested_optimizer(argv)
    if name is None or name in registry.OPTIMIZERS:
        return []
    directory = plugins.plugins_dir(list(argv))
    if plugins.folder_problem(directory):
        return [plugins.folder_problem(directory)]
    os.environ[plugins.ENV_VAR] = str(directory)
    reports = plugins.discover_bounded(directory)
    os.environ[plugins.LOADED_ENV_VAR] = os.pathsep.join(
        r.path for r in reports if r.error is None)
    return [f"plugin {Path(r.path).name}: {(r.error or '').splitlines()[-1]}"
            for r in reports if r.error]


def _without_plugins_flag(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--plugins":
            skip = True
        elif not arg.startswith("--plugins="):
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `optimizer-lab` and `python -m lab_cli`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        for note in load_plugins_for(argv):
            print(f"{PROG}: {note}", file=sys.stderr)
    except ValueError as error:  # a refused plugin timeout variable
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    argv = _without_plugins_flag(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(getattr(args, "name", "")) > MAX_NAME_CHARS:
        parser.error(f"argument --name: {len(args.name)} characters refused; allowed: at most "
                     f"{MAX_NAME_CHARS}")
    if args.command == "train" and args.continue_id is not None:
        given = [field for field, value in values_from_args(args).items()
                 if not (isinstance(value, dict) and not value)]
        if given or args.config is not None:
            parser.error(f"argument --continue: refused with {', '.join(given) or '--config'}: a "
                         "continued run keeps its own config (no config flags)")
        check_environment(parser)
        check_executor(args, parser)
        return continue_run(open_store(args, parser), args, parser)
    if args.command == "train":
        config = config_from_args(args, parser)  # before the store: a refusal touches nothing
        check_environment(parser)
        if args.lr_range:
            return lr_range_test(config, args, parser)
        check_executor(args, parser)
        return run_config(config, open_store(args, parser), args)
    if args.command == "import":
        from runs.io.export import load_import

        try:
            config = load_import(args.file)
        except (ConfigImportError, OSError) as error:
            parser.error(f"argument file: {args.file}: {_os_message(error)}")
        check_environment(parser)
        check_executor(args, parser)
        return run_config(config, open_store(args, parser), args)
    store = open_store(args, parser)
    if args.command == "list":
        print(list_runs(store))
        return 0
    if args.command == "export":
        from runs.io.export import export_run

        try:
            paths = export_run(store, args.run_id, args.out, tensorboard=not args.no_tensorboard)
        except KeyError as error:
            parser.error(f"argument run_id: {error.args[0]}")
        except OSError as error:
            parser.error(f"argument --out: {args.out}: cannot write the export "
                         f"({_os_message(error)}: {error.filename or args.out})")
        print(f"exported run {args.run_id} to {paths.directory}")
        print(f"  config      {paths.config}")
        for name, path in paths.tables.items():
            print(f"  {name:<11} {path} (+ .parquet)")
        print(f"  zip         {paths.zip}")
        if not args.no_tensorboard:
            print(f"open in TensorBoard: tensorboard --logdir {paths.directory / 'tensorboard'}")
        return 0
    parser.error(f"unknown command {args.command!r}")
    return 2
