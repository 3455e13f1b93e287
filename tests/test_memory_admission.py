"""The pool admits runs against a memory budget as well as a count (issue 16 item 8): the
estimate per run kind, the budget setting, FIFO admission with the reason shown to a waiting
run, and a run too large for the whole budget refused at Start. Fake budgets; no process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runs.service import control
from runs.store import admission
from runs.store.admission import MEMORY_BUDGET_ENV, admit, estimate_mb
from settings.run_config import RunConfig

TINY = dict(dataset="moons", model="logistic", eval_every=50)
PLAIN = RunConfig(**TINY, steps=10)
FOUR_HG = RunConfig(**TINY, steps=10, optimizer="adam",
                    hypergradients=["learning_rate", "beta_1", "beta_2", "epsilon"])
REVERSE = RunConfig(**TINY, steps=10, hypergradients=["learning_rate"], reverse_horizon=200)


@pytest.fixture()
def store(any_store):
    """A fresh store, once on SQLite and once on PostgreSQL (tests/conftest.py)."""
    return any_store


def test_estimates_match_the_measured_sizes():
    """Issue 16: plain 0.95-1.08 GB, 4 hyper-gradients 1.29 GB, reverse_horizon=200 2.61 GB."""
    assert 950 <= estimate_mb(PLAIN.to_json_dict()) <= 1080
    assert estimate_mb(FOUR_HG.to_json_dict()) == pytest.approx(1290, rel=0.05)
    assert estimate_mb(REVERSE.to_json_dict()) == pytest.approx(2610, rel=0.05)


def test_budget_setting(monkeypatch, tmp_path):
    monkeypatch.setenv(MEMORY_BUDGET_ENV, "3000")
    assert admission.memory_budget_mb() == 3000.0
    for raw in ("0", "-5", "lots", "nan", "inf"):
        monkeypatch.setenv(MEMORY_BUDGET_ENV, raw)
        with pytest.raises(ValueError, match=rf"{MEMORY_BUDGET_ENV}='{raw}' refused: must be a "
                                             "number of MB > 0"):
            admission.memory_budget_mb()
    monkeypatch.delenv(MEMORY_BUDGET_ENV)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        4096000 kB\nMemFree: 1 kB\n")
    assert admission.machine_memory_mb(str(meminfo)) == pytest.approx(4000.0)
    total = admission.machine_memory_mb()
    assert admission.memory_budget_mb() == pytest.approx(0.75 * total)


def test_admit_is_first_come_first_served_within_count_and_budget():
    # room for two plain runs in 2500 MB, the third waits for memory although a place is free
    ids, waiting = admit([(1, 1000), (2, 1000), (3, 1000)], [], 4, 2500)
    assert ids == [1, 2] and list(waiting) == [3]
    assert waiting[3] == (f"waits for memory: needs ~1000 MB, 2000 of 2500 MB "
                          f"({MEMORY_BUDGET_ENV}) held by 2 active run(s)")
    # a big run at the head is not overtaken by a small one behind it
    assert admit([(4, 2600), (5, 1000)], [1000], 4, 3000) == (
        [], {4: f"waits for memory: needs ~2600 MB, 1000 of 3000 MB ({MEMORY_BUDGET_ENV}) "
                "held by 1 active run(s)"})
    # the count still applies, and no budget means count only
    assert admit([(6, 10), (7, 10)], [5], 2, 1e9) == ([6], {})
    assert admit([(8, 1e6), (9, 1e6)], [], 2, None) == ([8, 9], {})
    # a run larger than the budget starts when nothing else is active (never waits forever)
    assert admit([(10, 5000)], [], 2, 3000) == ([10], {})


def test_claim_queued_holds_a_reverse_run_back_and_says_why(store):
    plain = store.create_run(PLAIN.to_json_dict(), status="queued")
    big = store.create_run(REVERSE.to_json_dict(), status="queued")
    assert store.claim_queued(2, budget_mb=3000) == [plain]
    waiting = store.run(big)
    assert waiting["status"] == "queued"
    assert waiting["message"].startswith("waits for memory: needs ~2680 MB, 1000 of 3000 MB")
    store.set_status(plain, "finished")
    assert store.claim_queued(2, budget_mb=3000) == [big]
    assert store.run(big)["message"] == ""


def test_start_refuses_a_run_larger_than_the_whole_budget(store, monkeypatch):
    monkeypatch.setenv(MEMORY_BUDGET_ENV, "2000")
    with pytest.raises(ValueError, match=r"run refused: it needs ~2680 MB .*reverse_horizon "
                                         r"200.*budget 2000 MB"):
        control.start_run(REVERSE, store)
    assert store.runs().empty


def test_dispatch_uses_the_budget(store, monkeypatch):
    monkeypatch.setenv(MEMORY_BUDGET_ENV, "1500")
    launched = []
    monkeypatch.setattr("runs.service.pool._launch", lambda store, run_id: launched.append(run_id))
    first = control.start_run(PLAIN, store)
    second = control.start_run(PLAIN, store)
    assert launched == [first]  # pool of 2, but memory for one
    assert store.run(second)["message"].startswith("waits for memory")


def test_an_ending_process_still_counts_in_the_memory_account(store):
    """A finished run whose process has not exited yet holds its memory: the next run waits
    (here the ending 'worker' is a sleeping child with a known resident size)."""
    from runs.store.processes import process_start, rss_mb

    child = subprocess.Popen([sys.executable, "-c",
                              "b = bytearray(200 * 2**20); import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while (rss_mb(child.pid) or 0) < 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ended = store.create_run(PLAIN.to_json_dict())
        store.update_run(ended, pid=child.pid, pid_start=process_start(child.pid))
        store.set_status(ended, "finished")
        queued = store.create_run(PLAIN.to_json_dict(), status="queued")
        assert store.claim_queued(2, budget_mb=1100) == []
        assert "MB by ending ones" in store.run(queued)["message"]
        child.kill()
        child.wait()
        assert store.claim_queued(2, budget_mb=1100) == [queued]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
