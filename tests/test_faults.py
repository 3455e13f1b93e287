"""Faults: a run process killed with SIGKILL mid-write, the Streamlit server killed mid-run,
and a run that diverges. Real worker processes, real `streamlit run` servers, real SQLite files.

Each test has its own store (`OPTIMIZER_LAB_HOME` = the test's tmp_path); every worker started
here is killed and reaped at the end (see the `store` fixture).
"""

from __future__ import annotations

import math
import os
import re
import signal
import sqlite3
import time
import urllib.request
from pathlib import Path

from _streamlit_server import health, streamlit_server
from engine import recording
from runs.service import control, pool, waiting
from settings.run_config import RunConfig
from runs.protocol import FINAL_STATUSES
from runs.store.processes import pid_alive

TABLES = ("scalars", "slot_stats", "histograms", "hyper_changes")


# ----- helpers --------------------------------------------------------------------------------
def integrity(path: Path) -> str:
    con = sqlite3.connect(path, timeout=30)
    try:
        return "; ".join(row[0] for row in con.execute("PRAGMA integrity_check"))
    finally:
        con.close()


def writer_busy(path: Path) -> bool:
    """True when some connection holds the write lock right now (a transaction in progress):
    our own `BEGIN IMMEDIATE` fails at once instead of waiting."""
    con = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            return True
        raise
    finally:
        con.close()


def counts(path: Path, run_id: int) -> dict[str, int]:
    """Rows per record table of one run and `runs.step`, read in ONE read transaction."""
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        con.execute("BEGIN")  # one snapshot for all the counts
        out = {t: con.execute(f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", (run_id,)).fetchone()[0]
               for t in TABLES}
        out["step"] = con.execute("SELECT step FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
        con.execute("COMMIT")
        return out
    finally:
        con.close()


def steps_of(frame, name: str | None = None) -> list[int]:
    if name is not None:
        frame = frame[frame["name"] == name]
    return sorted(set(int(s) for s in frame["step"]))


def server_pid(url: str) -> int:
    """The pid of the `streamlit run` child of this process serving `url` (its port)."""
    port = url.rsplit(":", 1)[1]
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and b"streamlit" in argv and port.encode() in argv:
            return int(entry.name)
    raise LookupError(f"no streamlit child of pid {me} serving {url}")


# ----- a. SIGKILL of a run process while it writes ---------------------------------------------
def test_sigkill_mid_write_loses_no_committed_record(store):
    config = RunConfig(dataset="moons", model="mlp", steps=500_000, eval_every=50)
    run_id = control.start_run(config, store)
    waiting.wait_for_step(store, run_id, 1, timeout_s=120)
    time.sleep(2.0)  # records for a couple of seconds...
    waiting.wait_for_step(store, run_id, 1_500, timeout_s=60)  # ...and past 1,000 (stride 10)
    running = store.run(run_id)
    assert running["status"] == "running", running
    pid = running["pid"]
    assert pid == pool._PROCESSES[run_id].pid and pid_alive(pid)

    # Kill while a batch transaction is open: poll the write lock, count, kill.
    deadline = time.monotonic() + 10.0
    while not writer_busy(store.path) and time.monotonic() < deadline:
        pass
    before = counts(store.path, run_id)  # the last committed state (WAL readers never block)
    os.kill(pid, signal.SIGKILL)
    proc = pool._PROCESSES[run_id]
    assert proc.wait(timeout=30) == -signal.SIGKILL
    pool.reap()

    assert integrity(store.path) == "ok"
    assert store.mark_interrupted() == [run_id]
    killed = store.run(run_id)
    assert killed["status"] == "interrupted"
    assert killed["message"] == "the run process ended without finishing"

    after = counts(store.path, run_id)
    for table in TABLES:  # nothing committed before the kill was lost
        assert after[table] >= before[table], (table, before, after)
    assert after["step"] >= before["step"] > 1_000

    # The committed records are exactly the schedule up to the last committed batch's step
    # (`runs.step`): every batch is one transaction, so a kill drops whole batches only.
    last = after["step"]
    scalars = store.scalars(run_id)
    assert steps_of(scalars, "train_loss") == [
        s for s in range(1, last + 1) if recording.should_record(s)]
    assert steps_of(scalars, "val_loss") == list(range(0, last + 1, config.eval_every))
    assert steps_of(scalars, "val_accuracy") == steps_of(scalars, "val_loss")
    assert len(scalars) == after["scalars"]
    assert all(math.isfinite(v) for v in scalars["value"])
    stats = store.slot_stats(run_id)
    per_step = stats.groupby("step").size()
    assert list(per_step.index) == steps_of(scalars, "train_loss")
    assert per_step.nunique() == 1  # every recorded step has every (variable, slot) series
    series = stats[["variable", "slot"]].drop_duplicates()
    hist_steps = [s for s in range(1, last + 1) if recording.should_histogram(s)]
    with sqlite3.connect(store.path) as con:
        rows = con.execute("SELECT step, COUNT(*) FROM histograms WHERE run_id = ? GROUP BY step"
                           " ORDER BY step", (run_id,)).fetchall()
    assert [s for s, _ in rows] == hist_steps
    assert {n for _, n in rows} == {len(series)}
    assert len(store.hyper_changes(run_id)) == 4  # the init rows of Adam's 4 hyperparameters

    # The store takes a new run after the kill, and it finishes (the killed run freed its place).
    fresh = control.start_run(RunConfig(dataset="moons", model="mlp", steps=300, eval_every=50),
                           store)
    done = waiting.wait_for_status(store, fresh, FINAL_STATUSES, timeout_s=180)
    assert done["status"] == "finished", done
    assert done["step"] == 300
    assert steps_of(store.scalars(fresh), "train_loss") == list(range(1, 301))
    assert store.run(run_id)["status"] == "interrupted"
    assert counts(store.path, run_id) == after  # the new run did not touch the old records
    assert integrity(store.path) == "ok"


# ----- b. The Streamlit server killed mid-run ---------------------------------------------------
def test_server_sigkill_mid_run_the_run_trains_on_and_finishes(store, tmp_path):
    config = RunConfig(dataset="moons", model="mlp", steps=4_000, eval_every=100)
    with streamlit_server(tmp_path) as url:
        run_id = control.start_run(config, store)
        # Paced, so that it is still training when the second server is up however slow the
        # restart: at full speed a busy machine has seen it finish in between.
        control.set_speed(store, run_id, 40.0)
        assert health(int(url.rsplit(":", 1)[1])) == "ok"
        running = waiting.wait_for_step(store, run_id, 1, timeout_s=120)
        assert running["status"] == "running"
        server = server_pid(url)
        os.kill(server, signal.SIGKILL)
        killed_at = time.time()
        step_at_kill = store.run(run_id)["step"]
        deadline = time.monotonic() + 10
        while pid_alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(server)
    assert pid_alive(running["pid"])  # its own session: the server's death does not reach it

    with streamlit_server(tmp_path) as url:  # a fresh server on the same home
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as resp:
            assert resp.read().decode().strip() == "ok"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
        assert integrity(store.path) == "ok"
        table = store.runs()  # the store reads, and the run is still listed and still live
        row = table[table["id"] == run_id]
        assert len(row) == 1
        assert row.iloc[0]["status"] == "running", row.iloc[0].to_dict()
        again = store.run(run_id)
        assert again["pid"] == running["pid"] and pid_alive(again["pid"])
        assert again["step"] > step_at_kill and again["heartbeat"] > killed_at
        control.set_speed(store, run_id, None)

    done = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=300)
    assert done["status"] == "finished", done  # never interrupted
    assert done["step"] == config.steps and done["message"] == f"finished {config.steps} steps"
    scalars = store.scalars(run_id)
    assert steps_of(scalars, "train_loss") == [
        s for s in range(1, config.steps + 1) if recording.should_record(s)]
    assert steps_of(scalars, "val_loss") == list(range(0, config.steps + 1, config.eval_every))
    assert pool._PROCESSES[run_id].wait(timeout=30) == 0
    assert integrity(store.path) == "ok"


# ----- c. Divergence ---------------------------------------------------------------------------
DIVERGED = re.compile(
    r"diverged at step (?P<step>\d+): (?:(?P<scalar>train_loss|val_loss) is not finite \(\S+\)"
    r"|(?P<slot>\S+) of (?P<variable>\S+) is not finite"
    r" \((?:norm=\S+, mean=\S+, std=\S+|holds NaN or inf)\))"
)


def test_divergence_ends_diverged_with_step_and_quantity_and_finite_records(store):
    # SGD at the largest learning rate its spec allows (10) on the default digits MLP blows up
    # in a few steps (Adam at 10 does not: its step is bounded by the learning rate).
    config = RunConfig(optimizer="sgd", hyperparameters={"learning_rate": 10.0}, steps=300)
    assert (config.dataset, config.model) == ("digits", "mlp")
    run_id = control.start_run(config, store)
    run = waiting.wait_for_status(store, run_id, FINAL_STATUSES, timeout_s=180)
    assert run["status"] == "diverged", run
    match = DIVERGED.fullmatch(run["message"])
    assert match, run["message"]
    at = int(match["step"])
    assert 1 <= at < config.steps
    scalars, stats = store.scalars(run_id), store.slot_stats(run_id)
    if match["slot"] is not None:  # a slot statistic of a (variable, slot) series of the run
        assert ((stats["variable"] == match["variable"]) & (stats["slot"] == match["slot"])).any()
    # The step that diverged left no record; every step before it is kept (steps <= 1,000 are
    # all recorded), and the worker wrote them before setting the status.
    last = at if match["scalar"] == "val_loss" else at - 1
    assert run["step"] == last
    assert steps_of(scalars, "train_loss") == list(range(1, last + 1))
    assert steps_of(stats) == list(range(1, last + 1))
    assert steps_of(scalars, "val_loss")[0] == 0
    assert all(math.isfinite(v) for v in scalars["value"]), scalars
    assert stats[["norm", "mean", "std"]].map(math.isfinite).all().all()
    assert store.pending(run_id) == []
    assert pool._PROCESSES[run_id].wait(timeout=30) == 0  # diverged is an end, not a failure
    assert "Traceback" not in pool.log_path(store, run_id).read_text()
