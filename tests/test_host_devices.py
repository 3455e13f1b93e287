"""The device list a local run host writes for the server (`runs.store.host_devices`) and the
server's probe that takes it instead of starting a TensorFlow child (`components.device_list`)."""

from __future__ import annotations

import json
import subprocess

import pytest

from components import device_list
from runs.store import host_devices

NAMES = ["/device:CPU:0", "/device:GPU:0"]


def test_a_live_writers_names_are_read_back(tmp_path):
    host_devices.write(tmp_path, NAMES)
    assert host_devices.read(tmp_path) == tuple(NAMES)
    assert not list(tmp_path.glob(".devices.json.*"))  # written whole, then renamed
    assert device_list.host_answer(tmp_path) == device_list.DeviceList(tuple(NAMES), True)


def test_a_file_whose_writer_is_gone_or_that_is_unreadable_counts_for_nothing(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / host_devices.FILE_NAME).write_text(json.dumps(
        {"names": NAMES, "pid": gone.pid, "pid_start": 1}))
    assert host_devices.read(tmp_path) is None
    for body in ("{", json.dumps({"names": []}), json.dumps([1, 2]),
                 json.dumps({"names": [3], "pid": 1, "pid_start": 1})):
        (tmp_path / host_devices.FILE_NAME).write_text(body)
        assert host_devices.read(tmp_path) is None, body
    assert host_devices.read(tmp_path / "missing") is None


def test_an_unwritable_data_directory_is_skipped(tmp_path):
    host_devices.write(tmp_path / "missing" / "dir", NAMES)  # no error: the server probes


@pytest.fixture()
def fresh_probe():
    device_list._reset_for_tests()
    yield
    device_list._reset_for_tests()


def test_the_probe_takes_a_live_hosts_answer_and_starts_no_child(tmp_path, monkeypatch,
                                                                  fresh_probe):
    children = []
    monkeypatch.setattr(device_list, "probe", lambda *a, **k: children.append(1))
    monkeypatch.setattr(device_list, "local_hosts_dir", lambda: tmp_path)
    host_devices.write(tmp_path, NAMES)
    assert device_list.device_names(wait_s=5.0) == device_list.DeviceList(tuple(NAMES), True)
    assert children == []


def test_without_a_hosts_answer_in_time_the_probe_starts_its_own_child(tmp_path, monkeypatch,
                                                                        fresh_probe):
    own = device_list.DeviceList(("/device:CPU:0",), True)
    monkeypatch.setattr(device_list, "probe", lambda *a, **k: own)
    monkeypatch.setattr(device_list, "local_hosts_dir", lambda: tmp_path)
    monkeypatch.setattr(device_list, "HOST_WAIT_S", 0.3)
    assert device_list.device_names(wait_s=5.0) is own


@pytest.mark.parametrize("env, expected", [
    ({}, "data dir"), ({"OPTIMIZER_LAB_WARM_WORKERS": "off"}, None),
    ({"OPTIMIZER_LAB_WARM_WORKERS": "sometimes"}, None),
    ({"OPTIMIZER_LAB_EXECUTOR": "ray"}, None)])
def test_only_a_server_with_local_run_hosts_waits_for_their_answer(tmp_path, monkeypatch, env,
                                                                    expected):
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    for name in ("OPTIMIZER_LAB_WARM_WORKERS", "OPTIMIZER_LAB_EXECUTOR", "OPTIMIZER_LAB_STORE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    found = device_list.local_hosts_dir()
    assert found == (tmp_path if expected else None)
