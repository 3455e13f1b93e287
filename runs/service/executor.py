"""Which executor trains the runs, and the connection to a Ray cluster. No Streamlit, no
TensorFlow; `ray` is imported only when the Ray executor is chosen (the Streamlit server and the
CLI's parsing stay free of it otherwise).

Settings (environment variables; the CLI's `--executor` and `--ray-address` set the first two):

* `OPTIMIZER_LAB_EXECUTOR`: `local` (default: run hosts are processes of this machine,
  `runs.service.warm_pool`) or `ray` (run hosts are Ray actors placed by Ray's scheduler,
  `runs.service.ray_hosts`).
* `OPTIMIZER_LAB_RAY_ADDRESS`: the cluster: `auto` (default: the cluster `ray start` runs on
  this machine), a GCS address `host:port` (`ray start --head` prints it), or a Ray Client
  address `ray://host:port` (port 10001 by default on the head).
* `OPTIMIZER_LAB_RAY_CPUS_PER_HOST`: the CPUs one host actor reserves (`num_cpus`, default 1:
  a host trains its runs in one thread, step by step).
* `OPTIMIZER_LAB_RAY_RUNTIME_ENV`: `auto` (default), `on` or `off`: whether a host actor gets a
  Ray runtime environment built from requirements.txt and the project's code
  (`runs.service.ray_hosts.runtime_env`). `auto` skips it when every node of the cluster is
  this machine: those nodes run this very Python with its packages, and a `pip` runtime
  environment would build a second virtualenv of TensorFlow (minutes, ~2 GB) for nothing.

Every bad value is refused with a `ValueError` naming the variable and the allowed values; a
Ray executor that cannot be used (ray not importable, no cluster at the address) is refused
when it is first needed - the CLI before it stores a run, the server when it keeps its pool -
with `ExecutorRefused`. The local executor is never substituted for Ray.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any

EXECUTOR_ENV = "OPTIMIZER_LAB_EXECUTOR"
EXECUTORS = ("local", "ray")
LOCAL, RAY = EXECUTORS
ADDRESS_ENV = "OPTIMIZER_LAB_RAY_ADDRESS"
ADDRESS_ALLOWED = "'auto', a GCS address host:port, or a Ray Client address ray://host:port"
CPUS_ENV = "OPTIMIZER_LAB_RAY_CPUS_PER_HOST"
CPUS_RANGE = (0.1, 64.0)
RUNTIME_ENV_ENV = "OPTIMIZER_LAB_RAY_RUNTIME_ENV"
RUNTIME_ENV_CHOICES = ("auto", "on", "off")
NAMESPACE = "optimizer-lab"
# How long the address's port may take to answer before the cluster counts as unreachable
# (seconds): a closed port answers at once, a dropped packet would otherwise hang `ray.init`.
CONNECT_TIMEOUT_S = 5.0
_ADDRESS = re.compile(r"^(ray://)?([A-Za-z0-9_.\-]{1,253}|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})$")


class ExecutorRefused(ValueError):
    """The Ray executor was chosen but cannot be used: ray cannot be imported, or no Ray
    cluster answers at the address (the message names the setting and what to change)."""


@dataclass(frozen=True)
class ExecutorSettings:
    """The executor settings of this process (`settings()`).

    Attributes:
        executor: `local` or `ray`.
        address: the Ray address (`auto`, `host:port`, `ray://host:port`); "" for local.
        cpus_per_host: `num_cpus` of a host actor (CPUs, > 0).
        runtime_env: `auto`, `on` or `off` (see the module docstring).
    """

    executor: str
    address: str
    cpus_per_host: float
    runtime_env: str

    @property
    def ray(self) -> bool:
        """True for the Ray executor."""
        return self.executor == RAY


def env_choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    """The setting `name` (case and surrounding space ignored), `default` when unset.

    Raises:
        ValueError: a value outside `allowed` (the message names the setting and the choices).
    """
    value = os.environ.get(name, "").strip().lower() or default
    if value not in allowed:
        raise ValueError(f"{name}={value!r} refused: must be one of {', '.join(allowed)}")
    return value


WARM_ENV = "OPTIMIZER_LAB_WARM_WORKERS"
WARM_CHOICES = ("on", "off")


def warm_enabled() -> bool:
    """Whether runs go to run hosts: `OPTIMIZER_LAB_WARM_WORKERS` = `on` (default) or `off`
    (every run gets a cold process of its own; refused with the Ray executor).

    Raises:
        ValueError: another value.
    """
    return env_choice(WARM_ENV, "on", WARM_CHOICES) == "on"


def chosen() -> str:
    """The executor: `OPTIMIZER_LAB_EXECUTOR` = `local` (default) or `ray`. Parsing only.

    Raises:
        ValueError: another value (the message names the variable and the allowed values).
    """
    return env_choice(EXECUTOR_ENV, LOCAL, EXECUTORS)


def checked_address(address: str) -> str:
    """`address` stripped when it is `auto`, `host:port` or `ray://host:port` (port 1-65535).

    Raises:
        ValueError: anything else (the message names `OPTIMIZER_LAB_RAY_ADDRESS`).
    """
    text = address.strip()
    if text.lower() == "auto":
        return "auto"
    found = _ADDRESS.match(text)
    if found is None or not 1 <= int(found.group(3)) <= 65535:
        raise ValueError(f"{ADDRESS_ENV}={address!r} refused: must be {ADDRESS_ALLOWED}")
    return text


def settings() -> ExecutorSettings:
    """Every executor setting of this process, checked (see the module docstring). Parsing
    only: nothing is imported or connected.

    Raises:
        ValueError: a bad `OPTIMIZER_LAB_EXECUTOR`, `OPTIMIZER_LAB_RAY_ADDRESS`,
            `OPTIMIZER_LAB_RAY_CPUS_PER_HOST` or `OPTIMIZER_LAB_RAY_RUNTIME_ENV`, or the Ray
            executor with run hosts off (`OPTIMIZER_LAB_WARM_WORKERS=off`: on Ray every run
            lives in a host actor; a cold local process would be the local executor).
    """
    executor = chosen()
    if executor == LOCAL:
        return ExecutorSettings(LOCAL, "", 0.0, "off")
    address = checked_address(os.environ.get(ADDRESS_ENV, "") or "auto")
    raw = os.environ.get(CPUS_ENV, "").strip() or "1"
    try:
        cpus = float(raw)
    except ValueError:
        cpus = -1.0
    low, high = CPUS_RANGE
    if not low <= cpus <= high:
        raise ValueError(f"{CPUS_ENV}={raw!r} refused: must be a number of CPUs in "
                         f"[{low:g}, {high:g}]")
    runtime = env_choice(RUNTIME_ENV_ENV, "auto", RUNTIME_ENV_CHOICES)
    if not warm_enabled():
        raise ValueError(f"{WARM_ENV}=off refused with {EXECUTOR_ENV}=ray: on Ray every run "
                         "trains in a run host actor; set it to 'on' or use "
                         f"{EXECUTOR_ENV}=local")
    return ExecutorSettings(RAY, address, cpus, runtime)


def import_ray() -> Any:
    """The `ray` module.

    Raises:
        ExecutorRefused: it cannot be imported (names `OPTIMIZER_LAB_EXECUTOR`).
    """
    try:
        import ray
    except ImportError as error:
        raise ExecutorRefused(
            f"{EXECUTOR_ENV}=ray refused: the ray package cannot be imported ({error}); "
            f"install it (pip install 'ray[default]==2.60.*') or set {EXECUTOR_ENV}=local") from None
    return ray


def _probe(address: str) -> None:
    """Refuse at once an address whose port does not answer (a TCP connect).

    Raises:
        ExecutorRefused: nothing listens at host:port within `CONNECT_TIMEOUT_S`.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise ExecutorRefused(
            f"{ADDRESS_ENV}={address!r} refused: no Ray cluster answers there ({error}); start "
            f"one (ray start --head) or give {ADDRESS_ALLOWED}; the local executor is not "
            "used instead") from None


_LOCK = threading.Lock()


def connect(chosen_settings: ExecutorSettings | None = None) -> Any:
    """Connect this process to the Ray cluster of the settings (once; later calls return at
    once) and return the `ray` module. The connection is a Ray driver in namespace
    `optimizer-lab`; this process owns the host actors it starts (they end with it).

    Raises:
        ValueError: a bad setting (`settings`), or the local executor is chosen.
        ExecutorRefused: ray cannot be imported, or no Ray cluster answers at the address.
    """
    chosen_settings = chosen_settings or settings()
    if not chosen_settings.ray:
        raise ValueError(f"{EXECUTOR_ENV}=local: no Ray cluster to connect to")
    ray = import_ray()
    address = chosen_settings.address
    with _LOCK:
        if ray.is_initialized():
            return ray
        if address != "auto":
            _probe(address)
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                     logging_level="warning")
        except Exception as error:  # noqa: BLE001 - ConnectionError, RuntimeError, gRPC errors
            raise ExecutorRefused(
                f"{ADDRESS_ENV}={address!r} refused: cannot connect to a Ray cluster there "
                f"({type(error).__name__}: {error}); give {ADDRESS_ALLOWED}; the local "
                "executor is not used instead") from None
    return ray


def local_cluster(ray: Any) -> bool:
    """True when every live node of the connected cluster has this machine's IP address (a
    cluster of `ray start` processes or `ray.cluster_utils.Cluster` nodes on one machine)."""
    here = ray.util.get_node_ip_address()
    return all(node.get("NodeManagerAddress") == here for node in ray.nodes()
               if node.get("Alive"))


def check() -> ExecutorSettings:
    """Check the executor settings and, for Ray, connect now: what a command that starts runs
    calls before it stores anything. Returns the settings.

    Raises:
        ValueError: a bad setting (`settings`).
        ExecutorRefused: ray cannot be imported, or no Ray cluster answers at the address.
    """
    chosen_settings = settings()
    if chosen_settings.ray:
        connect(chosen_settings)
    return chosen_settings
