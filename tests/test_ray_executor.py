"""The Ray executor: run hosts as Ray actors on a local cluster the tests start.

Fast tests (no cluster): every executor setting is refused naming its variable (bad value, bad
address, no cluster at the address, ray not importable, run hosts off); the CLI refuses them
before storing a run; a run started with the Ray executor and no reachable cluster waits in the
queue (never a local process); the server imports no ray with the local executor; the runtime
environment and the actor options; GPU runs are given to a host actor that reserved a GPU; a
cluster gone while runs train is said for the page.

Slow tests share one local cluster (`ray.cluster_utils.Cluster`: a head and two nodes, one
declaring `num_gpus=1`) and one pool of two host actors (`warm_pool.keep_warm` with
`OPTIMIZER_LAB_EXECUTOR=ray`): the same run-control sequence (start, a live `set_hyper`, pause,
one step, resume, stop; records and hyper-gradients stored) runs once per executor; a GPU host
actor lands on the GPU node with Ray's GPU id; the CLI trains a run on Ray with a host actor
of its own; a killed actor (`ray.kill`) interrupts its run
with the truth and Continue resumes it from its checkpoint on the other host actor; a lost node
interrupts the run of the host actor it carried.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _waiting import wait_until
from runs.protocol import FINAL_STATUSES
from runs.service import (continuing, control, executor, host_pool, pool, ray_actor, ray_hosts,
                          ray_table, waiting, warm_pool, worker_table)
from runs.store import checkpoint_files as files
from runs.store import admission, checkpoints
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

pytestmark = pytest.mark.warm  # run hosts on (tests/conftest.py turns them off elsewhere)

TINY = dict(dataset="digits", model="logistic", eval_every=20, optimizer="sgd",
            hyperparameters={"learning_rate": 0.1, "momentum": 0.0})
RAY_START_S = 300  # ray.init under load took minutes once on the 2-core machine
HOST_READY_S = 400  # two TensorFlow imports on 2 cores beside the cluster
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _environment_kept():
    """The CLI sets `OPTIMIZER_LAB_EXECUTOR` / `OPTIMIZER_LAB_RAY_ADDRESS` in its own process's
    environment (its hosts inherit them); called in-process here it must not leave them to the
    test files that run next in this process."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# ----- settings, refusals (no cluster) --------------------------------------------------------
@pytest.mark.parametrize("env, named", [
    ({"OPTIMIZER_LAB_EXECUTOR": "dask"}, "OPTIMIZER_LAB_EXECUTOR='dask' refused: must be one of "
                                         "local, ray"),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray", "OPTIMIZER_LAB_RAY_ADDRESS": "http://x"},
     "OPTIMIZER_LAB_RAY_ADDRESS='http://x' refused"),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray", "OPTIMIZER_LAB_RAY_ADDRESS": "head:70000"},
     "OPTIMIZER_LAB_RAY_ADDRESS='head:70000' refused"),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray", "OPTIMIZER_LAB_RAY_CPUS_PER_HOST": "0"},
     "OPTIMIZER_LAB_RAY_CPUS_PER_HOST='0' refused: must be a number of CPUs in [0.1, 64]"),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray", "OPTIMIZER_LAB_RAY_RUNTIME_ENV": "maybe"},
     "OPTIMIZER_LAB_RAY_RUNTIME_ENV='maybe' refused: must be one of auto, on, off"),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray", "OPTIMIZER_LAB_WARM_WORKERS": "off"},
     "OPTIMIZER_LAB_WARM_WORKERS=off refused with OPTIMIZER_LAB_EXECUTOR=ray"),
])
def test_bad_executor_settings_are_refused_naming_the_variable(monkeypatch, env, named):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError) as refused:
        executor.settings()
    assert named in str(refused.value)


def test_the_settings_default_to_local_and_parse_ray(monkeypatch):
    monkeypatch.delenv(executor.EXECUTOR_ENV, raising=False)
    assert executor.settings() == executor.ExecutorSettings("local", "", 0.0, "off")
    monkeypatch.setenv(executor.EXECUTOR_ENV, " Ray ")
    monkeypatch.setenv(executor.CPUS_ENV, "2.5")
    got = executor.settings()
    assert (got.ray, got.address, got.cpus_per_host, got.runtime_env) == (True, "auto", 2.5,
                                                                          "auto")
    for address in ("ray://head.example:10001", "10.0.0.5:6379", "[::1]:6379", "AUTO"):
        assert executor.checked_address(address) == (address if address != "AUTO" else "auto")


def test_ray_missing_or_no_cluster_is_refused_at_start(monkeypatch):
    monkeypatch.setenv(executor.EXECUTOR_ENV, "ray")
    monkeypatch.setenv(executor.ADDRESS_ENV, "127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(executor.ExecutorRefused) as refused:
        executor.check()
    assert "OPTIMIZER_LAB_RAY_ADDRESS='127.0.0.1:1' refused: no Ray cluster answers" in str(
        refused.value)
    assert "the local executor is not used instead" in str(refused.value)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(executor.ExecutorRefused) as missing:
        executor.check()
    assert str(missing.value).startswith("OPTIMIZER_LAB_EXECUTOR=ray refused: the ray package "
                                         "cannot be imported")


def test_the_cli_refuses_a_bad_executor_before_storing_a_run(tmp_path, monkeypatch, capsys):
    from lab_cli.cli import main

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    cases = [(["--executor", "dask"], "argument --executor: invalid choice: 'dask'"),
             (["--executor", "ray", "--ray-address", "127.0.0.1:1"],
              "OPTIMIZER_LAB_RAY_ADDRESS='127.0.0.1:1' refused: no Ray cluster answers"),
             (["--executor", "ray", "--ray-address", "not an address"],
              "OPTIMIZER_LAB_RAY_ADDRESS='not an address' refused"),
             (["--executor", "local", "--ray-address", "auto"],
              "argument --ray-address: refused with the local executor")]
    for flags, named in cases:
        with pytest.raises(SystemExit) as exited:
            main(["train", "--steps", "5", *flags])
        assert exited.value.code == 2
        assert named in capsys.readouterr().err
        # the flags set these in this process; gone without a record (monkeypatch would put
        # the flag's value back at its teardown, for the test files that follow)
        os.environ.pop(executor.EXECUTOR_ENV, None)
        os.environ.pop(executor.ADDRESS_ENV, None)
    assert not (tmp_path / "runs.sqlite").exists()  # nothing was stored


def test_a_bad_executor_setting_refuses_a_start_before_the_run_is_stored(store, monkeypatch):
    monkeypatch.setenv(executor.EXECUTOR_ENV, "threads")
    with pytest.raises(ValueError, match="OPTIMIZER_LAB_EXECUTOR='threads' refused"):
        control.start_run(RunConfig(**TINY, steps=5, seed=1), store)
    assert store.runs().empty


def test_the_ray_executor_never_falls_back_to_a_local_process(store, monkeypatch):
    monkeypatch.setenv(executor.EXECUTOR_ENV, "ray")
    monkeypatch.setenv(executor.ADDRESS_ENV, "127.0.0.1:1")
    run_id = control.start_run(RunConfig(**TINY, steps=5, seed=1), store)
    pool.dispatch(store)
    run = store.run(run_id)
    assert (run["status"], run["pid"], run["worker"]) == ("queued", None, "")
    assert pool._PROCESSES == {} and pool._HOST_CHILDREN == {}
    with pytest.raises(executor.ExecutorRefused):
        warm_pool.keep_warm(store)  # the page's heartbeat: refused, not a local pool
    assert warm_pool.current() is None
    assert "OPTIMIZER_LAB_RAY_ADDRESS='127.0.0.1:1' refused" in (ray_hosts.problem() or "")


def test_the_server_imports_no_ray_with_the_local_executor():
    """The pages' and the CLI's modules (and the Ray modules themselves) import `ray` only
    when the Ray executor connects (a fresh process: this one may hold ray already)."""
    code = ("import sys, views.train, lab_cli.cli, runs.service.ray_hosts, runs.service.pool;"
            "from runs.service import ray_hosts; assert ray_hosts.problem() is None;"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    env = {k: v for k, v in os.environ.items() if k != executor.EXECUTOR_ENV}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_runtime_env_and_actor_options(monkeypatch):
    monkeypatch.setenv(executor.EXECUTOR_ENV, "ray")
    chosen = executor.settings()
    local = ray_actor.runtime_env(chosen, on_this_machine=True)
    assert set(local) == {"env_vars"}  # a cluster on this machine: no pip, no upload
    assert local["env_vars"]["PYTHONPATH"].split(":")[0] == str(ray_actor.PROJECT_ROOT)
    assert local["env_vars"]["TF_USE_LEGACY_KERAS"] == "1"
    remote = ray_actor.runtime_env(chosen, on_this_machine=False, gpu=True)
    assert remote["working_dir"] == str(ray_actor.PROJECT_ROOT) and "tests" in remote["excludes"]
    names = [line.split("=")[0].split("[")[0].split(">")[0] for line in remote["pip"]]
    assert "tensorflow" in names and "tf-keras" in names and "streamlit" in names
    assert not {"pytest", "ray", "mypy", "ruff", "playwright"} & set(names)
    assert any(line.startswith("tensorflow[and-cuda]==") for line in remote["pip"])
    options = ray_actor.actor_options(chosen, gpu=True, runtime=local, memory_mb=2820.0)
    assert (options["num_cpus"], options["num_gpus"], options["max_restarts"]) == (1.0, 1, 0)
    assert options["memory"] == 2820 * 2**20  # bytes, as Ray counts them
    assert ray_actor.actor_options(chosen, False, local, 2820.0)["num_gpus"] == 0
    monkeypatch.setenv(pool.RUNS_PER_HOST_ENV, "32")  # a full host: TensorFlow + 32 runs
    assert ray_hosts.RayPool.reservation_mb() == 900 + 32 * 60


def test_gpu_runs_go_to_a_gpu_host_and_a_dead_host_interrupts_its_runs(any_store):
    """The store's side of Ray hosts, on SQLite and PostgreSQL: GPU routing, no pid on a
    Ray-held run, the requeue with its reason, and the truth written when a host dies."""
    store = any_store
    cpu_host, gpu_host = worker_table.register(store, 1), worker_table.register(store, 1)
    ray_table.add_host(store, cpu_host, "a" * 32, 0)
    ray_table.add_host(store, gpu_host, "b" * 32, 1)
    ray_table.set_node(store, gpu_host, "c" * 56, 4242)
    for host_id in (cpu_host, gpu_host):
        worker_table.set_state(store, host_id, "ready")
    gpu_run = store.create_run(RunConfig(**TINY, steps=5, seed=1,
                                         device="/device:GPU:0").to_json_dict())
    cpu_run = store.create_run(RunConfig(**TINY, steps=5, seed=2).to_json_dict())
    assert ray_table.assign(store, cpu_run, 4) == cpu_host
    assert ray_table.assign(store, gpu_run, 4) == gpu_host
    assert ray_table.assign(store, gpu_run, 4) is None  # a second call: it has its host
    run = store.run(gpu_run)
    assert (run["worker"], run["pid"]) == (f"host {gpu_host}", None)
    late = store.create_run(RunConfig(**TINY, steps=5, seed=3, device="GPU:0").to_json_dict())
    assert ray_table.assign_or_requeue(store, late, 1) is None  # the GPU host is full
    assert (store.run(late)["status"], store.run(late)["message"]) == (
        "queued", ray_table.GPU_WAIT_MESSAGE)
    store.update_run(gpu_run, step=17)
    store.set_status(gpu_run, "running")
    assert store.mark_interrupted() == []  # no pid, a fresh heartbeat: alive
    assert ray_table.interrupt_host(store, gpu_host, "ActorDiedError: killed") == [gpu_run]
    run = store.run(gpu_run)
    assert (run["status"], run["message"]) == ("interrupted", (
        f"run host {gpu_host} (Ray actor {'b' * 32} on node {'c' * 12}) died: ActorDiedError: "
        "killed; interrupted after step 17, the last committed step; every record up to it is "
        "kept"))
    assert worker_table.row(store, gpu_host)["state"] == "gone"
    assert store.run(cpu_run)["status"] == "starting"  # another host's run is untouched


def test_host_actors_are_bounded_by_the_memory_ray_has_unreserved(store, monkeypatch):
    """Ray's `memory` resource, not this machine's budget, bounds how many host actors start:
    each reserves a full host (TensorFlow + `OPTIMIZER_LAB_RUNS_PER_HOST` default runs)."""

    class Cluster:
        def __init__(self, free_bytes):
            self.free_bytes = free_bytes

        def available_resources(self):
            return {} if self.free_bytes is None else {"CPU": 8.0, "memory": self.free_bytes}

    monkeypatch.setenv(pool.HOSTS_ENV, "4")
    monkeypatch.setenv(pool.RUNS_PER_HOST_ENV, "10")
    monkeypatch.setenv(admission.MEMORY_BUDGET_ENV, "1")  # 1 MB here: not the hosts' memory
    kept = ray_hosts.RayPool.__new__(ray_hosts.RayPool)
    host_pool.WarmPool.__init__(kept, store)
    one_host = (900 + 10 * 60) * 2**20
    for free, live, wanted in ((None, 1, 3), (10 * one_host, 1, 3), (2.5 * one_host, 1, 2),
                               (0.9 * one_host, 0, 0), (10 * one_host, 4, 0)):
        kept.ray = Cluster(free)
        assert kept.hosts_wanted(live) == wanted, (free, live)


# ----- on a local Ray cluster -------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory, module_postgres_database):
    """A head (no CPU), a node of 3 CPUs declaring one GPU and a node of 2 CPUs (logical
    CPUs: Ray's bookkeeping, the machine has 2 cores), this process connected as
    the pool's driver; run hosts on, two host actors, checkpoints every 0.5 s. The store is
    PostgreSQL, as for a cluster of several machines: runs, commands, records and checkpoints
    all go through it."""
    import ray
    from ray.cluster_utils import Cluster

    patch = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("ray")
    small = dict(object_store_memory=100 * 2**20)
    # no CPU on the head: every host actor lives on a node a test may remove
    nodes = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0,
                    include_dashboard=False, **small))
    gpu_node = nodes.add_node(num_cpus=3, num_gpus=1, **small)  # a CPU left for a GPU host
    nodes.add_node(num_cpus=2, **small)
    for key, value in {"OPTIMIZER_LAB_HOME": str(home), executor.EXECUTOR_ENV: "ray",
                       executor.ADDRESS_ENV: nodes.address, pool.HOSTS_ENV: "2",
                       pool.WARM_ENV: "on", files.EVERY_ENV: "0.5"}.items():
        patch.setenv(key, value)
    started = time.monotonic()
    executor.connect()
    assert time.monotonic() - started < RAY_START_S
    store = RunStore(module_postgres_database)
    first = warm_pool.keep_warm(store)
    assert isinstance(first, ray_hosts.RayPool)
    first.wait_ready(2, HOST_READY_S)
    yield dict(store=store, nodes=nodes, gpu_node=gpu_node, ray=ray, patch=patch, home=home)
    warm_pool.shutdown()
    ray.shutdown()
    nodes.shutdown()
    patch.undo()


@pytest.fixture()
def kept(cluster):
    """The cluster's pool of two ready host actors (kept again if a test's `store` fixture shut
    this process's pool down meanwhile)."""
    pool_ = warm_pool.keep_warm(cluster["store"])
    assert isinstance(pool_, ray_hosts.RayPool)
    pool_.wait_ready(2, HOST_READY_S)
    return pool_


def _control_sequence(store: RunStore, run_id: int) -> dict:
    """Start -> running, a live set_hyper, pause, one step, resume, stop; returns the run."""
    waiting.wait_for_status(store, run_id, ("running",), timeout_s=HOST_READY_S)
    waiting.wait_for_step(store, run_id, 5, timeout_s=120)
    command = control.set_hyper(store, run_id, "learning_rate", 0.02)
    assert waiting.wait_for_command(store, command, 60)["status"] == "done"
    assert waiting.wait_for_command(store, control.pause(store, run_id), 60)["status"] == "done"
    paused = waiting.wait_for_status(store, run_id, ("paused",), timeout_s=60)["step"]
    assert waiting.wait_for_command(store, control.step(store, run_id), 60)["status"] == "done"
    wait_until(lambda: store.run(run_id)["step"] > paused, 60, "one step")
    assert store.run(run_id)["step"] == paused + 1 and store.run(run_id)["status"] == "paused"
    assert waiting.wait_for_command(store, control.resume(store, run_id), 60)["status"] == "done"
    waiting.wait_for_step(store, run_id, paused + 6, timeout_s=60)
    assert store.mark_interrupted() == []  # a healthy run is never judged by a foreign pid
    control.stop(store, run_id)
    return waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=60)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["local", "ray"])
def test_run_control_is_the_same_on_each_executor(cluster, kept, kind, tmp_path, monkeypatch):
    if kind == "local":  # today's executor: a local process, its own store
        monkeypatch.setenv(executor.EXECUTOR_ENV, "local")
        monkeypatch.setenv(pool.WARM_ENV, "off")
        store = RunStore(tmp_path / "runs.sqlite")
    else:
        store = cluster["store"]
    config = RunConfig(**TINY, steps=5000, seed=7, hypergradients=["learning_rate"])
    run_id = control.start_run(config, store, steps_per_second=40.0)
    run = _control_sequence(store, run_id)
    assert run["status"] == "stopped" and run["device"] == "/device:CPU:0"
    host = worker_table.host_id_of(run["worker"])
    if kind == "ray":
        assert host is not None and ray_table.host(store, host)["node_id"]
        assert run["pid"] is None and run["pid_start"] is None
    else:
        assert run["worker"] == "cold"
    changes = store.hyper_changes(run_id)
    user = changes[changes["source"] == "user"]
    assert list(user["name"]) == ["learning_rate"] and abs(user["new"].iloc[0] - 0.02) < 1e-7
    losses = store.scalars(run_id, ["train_loss"])
    assert len(losses) > 0 and int(losses["step"].max()) <= run["step"]
    assert losses["step"].is_unique
    hyper = store.hypergradients(run_id)  # forward-mode d(val loss)/d(learning_rate)
    assert set(hyper["name"]) == {"learning_rate"} and hyper["exact"].notna().any()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_host_actor_reserves_a_full_host_on_its_node(cluster, kept):
    ray = cluster["ray"]
    reserved = ray.cluster_resources()["memory"] - ray.available_resources()["memory"]
    assert reserved >= 2 * kept.reservation_mb() * 2**20  # the two ready host actors


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_gpu_host_actor_lands_on_the_gpu_node(cluster):
    ray = cluster["ray"]
    chosen = executor.settings()
    options = ray_actor.actor_options(chosen, True, ray_actor.runtime_env(chosen, True, True),
                                      ray_hosts.RayPool.reservation_mb())
    actor = ray.remote(ray_actor.HostActor).options(**options).remote()
    try:
        where = ray.get(actor.where.remote(), timeout=RAY_START_S)
    finally:
        ray.kill(actor)
    assert where["node_id"] == cluster["gpu_node"].node_id
    assert where["gpu_ids"] == ["0"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cli_trains_a_run_on_ray_with_its_own_host_actor(cluster, tmp_path):
    """`optimizer-lab train --executor ray --ray-address ...`: the command connects, keeps its
    own host actor and follows the run to its end; `--detach` is refused there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMIZER_LAB_")}
    env.update(OPTIMIZER_LAB_HOME=str(tmp_path), OPTIMIZER_LAB_HOSTS="1", PYTHONPATH=str(ROOT),
               TF_USE_LEGACY_KERAS="1")
    base = [sys.executable, "-m", "lab_cli", "train", "--executor", "ray", "--ray-address",
            cluster["nodes"].address, "--dataset", "digits", "--model", "logistic"]
    done = subprocess.run([*base, "--steps", "60", "--no-progress"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=HOST_READY_S)
    assert done.returncode == 0, done.stderr[-2000:]
    run = RunStore(tmp_path / "runs.sqlite").run(int(done.stdout.split()[-1]))
    assert (run["status"], run["step"], run["pid"]) == ("finished", 60, None)
    assert worker_table.host_id_of(run["worker"]) is not None  # a host actor, never cold
    detached = subprocess.run([*base, "--steps", "5", "--detach"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=HOST_READY_S)
    assert detached.returncode == 2
    assert "argument --detach: refused with --executor ray" in detached.stderr


def _checkpoint_step(place) -> int:
    """The step of a run's checkpoint, -1 while it has none."""
    try:
        return int(place.read_meta()["step"])
    except files.CheckpointError:
        return -1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_actor_interrupts_its_run_truthfully_and_continue_resumes_it(cluster, kept):
    store, ray = cluster["store"], cluster["ray"]
    run_id = control.start_run(RunConfig(**TINY, steps=300, seed=11), store,
                               steps_per_second=30.0)
    waiting.wait_for_status(store, run_id, ("running",), timeout_s=HOST_READY_S)
    place = checkpoints.of_run(store, run_id)
    wait_until(lambda: _checkpoint_step(place) >= 20, 120, "a checkpoint past step 20")
    # a row of the store, which the server and every node reach: no shared disk needed
    assert isinstance(place, checkpoints.StoreCheckpoints)
    assert not list(cluster["home"].rglob("*.npz"))
    host = worker_table.host_id_of(store.run(run_id)["worker"])
    actor_id = ray_table.host(store, host)["actor_id"]
    ray.kill(kept.actor(host))
    assert ray_hosts.wait_for_actor_death(kept, host, 60)
    run = store.run(run_id)
    assert run["status"] == "interrupted"
    assert run["message"].startswith(f"run host {host} (Ray actor {actor_id} on node ")
    assert "died: " in run["message"] and "the last committed step" in run["message"]
    assert f"interrupted after step {run['step']}," in run["message"]
    assert worker_table.row(store, host)["state"] == "gone"
    done = continuing.continue_run(store, run_id)
    run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=HOST_READY_S)
    assert run["status"] == "finished", run["message"]
    assert run["step"] == 300
    other = worker_table.host_id_of(run["worker"])
    assert other is not None and other != host
    assert f"continued from step {done.from_step}" in continuing.notes(store, run_id)[0]
    losses = store.scalars(run_id, ["train_loss"])
    assert losses["step"].is_unique and int(losses["step"].max()) == 300


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_lost_node_interrupts_the_runs_of_its_host_actors(cluster, kept):
    store, nodes = cluster["store"], cluster["nodes"]
    run_id = control.start_run(RunConfig(**TINY, steps=100000, seed=12), store,
                               steps_per_second=30.0)
    waiting.wait_for_step(store, run_id, 3, timeout_s=HOST_READY_S)
    host = worker_table.host_id_of(store.run(run_id)["worker"])
    node_id = ray_table.host(store, host)["node_id"]
    node = {n.node_id: n for n in nodes.worker_nodes}[node_id]
    nodes.remove_node(node, allow_graceful=False)  # the machine is gone, not shut down
    run = waiting.wait_for_status(store, run_id, ("interrupted",), timeout_s=120)
    assert run["message"].startswith(f"run host {host} (Ray actor ")
    assert f"on node {node_id[:12]}) died: " in run["message"]
    # the broken connection alone is not taken for a death: Ray's verdict is quoted
    assert ("; Ray: the actor is DEAD (" in run["message"]
            or f"; Ray: its node {node_id[:12]} is no longer alive" in run["message"])
    assert f"interrupted after step {run['step']}, the last committed step" in run["message"]
    assert worker_table.row(store, host)["state"] == "gone"


def test_a_cluster_gone_while_runs_train_is_said_never_substituted(store, monkeypatch):
    """The pool's watch of its actors fails (the head is gone): a clear error naming the
    address for the page (`ray_hosts.problem`), the run stays with its Ray host, and nothing
    local is started."""

    class GoneRay:
        def wait(self, refs, timeout):
            raise ConnectionError("GCS at 10.0.0.5:6379 unreachable")

    monkeypatch.setenv(executor.EXECUTOR_ENV, "ray")
    monkeypatch.setenv(executor.ADDRESS_ENV, "10.0.0.5:6379")
    kept = ray_hosts.RayPool.__new__(ray_hosts.RayPool)  # a pool whose cluster went away
    host_pool.WarmPool.__init__(kept, store)
    kept.settings, kept.ray, kept.cluster_error = executor.settings(), GoneRay(), ""
    kept._actors = {1: ray_hosts._Host(actor=None, ref=object(), gpu=False)}
    monkeypatch.setattr(host_pool, "_POOL", [kept])
    with pytest.raises(executor.ExecutorRefused):
        kept.collect()
    said = ray_hosts.problem() or ""
    assert said.startswith("the Ray cluster (OPTIMIZER_LAB_RAY_ADDRESS=10.0.0.5:6379) cannot be "
                           "reached: ConnectionError: GCS at 10.0.0.5:6379 unreachable")
    assert "the local executor is not used instead" in said
    shown: list[str] = []
    ray_hosts.report_problem(shown.append)
    assert shown == [said] and pool._PROCESSES == {}
    kept.cluster_error, kept.failures, kept.last_error = "", 3, "ModuleNotFoundError: tensorflow"
    assert ray_hosts.problem() == ("3 Ray run hosts in a row died before they were ready, so no "
                                   "more are started: ModuleNotFoundError: tensorflow")
