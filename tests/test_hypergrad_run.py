"""Hyper-gradients in a live run: worker records, auto-tune, response slices, the correctness
check, the store schema, the config fields, the page and its figure builders."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pydantic
import pytest

from components import hypergrad_figures as hf
from settings.run_config import RunConfig
from runs.protocol import COMMAND_KINDS
from runs.store.run_store import RunStore

STEPS = 60


def slice_slope_check(rows: pd.DataFrame) -> tuple[float, float] | None:
    """The check a response slice passes: (hyper-gradient at the centre, finite slope between the centre's two neighbours), or
    None when the centre is at an end of the sweep or has no hyper-gradient."""
    rows = rows.sort_values("value").reset_index(drop=True)
    idx = rows.index[rows["center"] == 1]
    if len(idx) == 0 or idx[0] == 0 or idx[0] == len(rows) - 1:
        return None
    i = idx[0]
    g = rows.loc[i, "hypergradient"]
    if g is None or not math.isfinite(float(g)):
        return None
    slope = (rows.loc[i + 1, "loss"] - rows.loc[i - 1, "loss"]) / (
        rows.loc[i + 1, "value"] - rows.loc[i - 1, "value"])
    return float(g), float(slope)


# ----- an in-process run following learning_rate and beta_1 ------------------------------------
@pytest.fixture(scope="module")
def hyper_run(tmp_path_factory):
    from optimizers.base import RuleOptimizer
    from runs.process import worker

    calls = []
    original = RuleOptimizer._set_hyper

    def spy(self, name, value):
        calls.append((name, float(value)))
        return original(self, name, value)

    RuleOptimizer._set_hyper = spy
    try:
        store = RunStore(tmp_path_factory.mktemp("hg") / "runs.sqlite")
        config = RunConfig(optimizer="adam", dataset="digits", model="mlp", steps=STEPS,
                           eval_every=10, hypergradients=["learning_rate", "beta_1"],
                           hypergradient_every=5, reverse_horizon=10, reverse_every=20,
                           autotune={"learning_rate": 1.0}, autotune_every=10)
        run_id = store.create_run(config.to_json_dict())
        # queued before the start: handled at the run's first command poll
        slice_id = store.send_command(run_id, "response_slice",
                                      {"name": "learning_rate", "horizon": 10, "points": 9})
        bad_id = store.send_command(run_id, "autotune",
                                    {"name": "beta_2", "hyper_learning_rate": 1.0})
        status = worker.train(run_id, store)
    finally:
        RuleOptimizer._set_hyper = original
    return store, run_id, status, slice_id, bad_id, calls


def test_records_are_present_and_finite(hyper_run):
    store, run_id, status, *_ = hyper_run
    run = store.run(run_id)
    assert status == "finished", run["message"]
    assert run["traces"] == 1  # the forward-mode step traced once, auto-tune included
    grads = store.hypergradients(run_id)
    assert set(grads["name"]) == {"learning_rate", "beta_1"}
    steps = sorted(set(grads["step"]))
    assert steps[0] == 1 and steps[-1] == STEPS and 5 in steps and 10 in steps
    assert np.isfinite(grads[["exact", "one_step", "val_loss"]].to_numpy()).all()
    # the slot statistics keep the engine's series (slots then update)
    stats = store.slot_stats(run_id)
    assert set(stats["slot"]) == {"m", "v", "update"} and stats["step"].max() == STEPS
    assert np.isfinite(stats[["norm", "mean", "std"]].to_numpy()).all()


def test_one_step_equals_exact_after_the_first_update(hyper_run):
    store, run_id, *_ = hyper_run
    grads = store.hypergradients(run_id)
    first = grads[grads["step"] == 1]
    for _, row in first.iterrows():
        assert row["one_step"] == pytest.approx(row["exact"], rel=1e-4, abs=1e-9), row["name"]
    later = grads[(grads["step"] == 20) & (grads["name"] == "learning_rate")].iloc[0]
    assert abs(later["one_step"] - later["exact"]) > 1e-3 * abs(later["exact"])


def test_reverse_mode_is_recorded_every_reverse_every_steps(hyper_run):
    store, run_id, *_ = hyper_run
    grads = store.hypergradients(run_id)
    reverse = grads.dropna(subset=["reverse"])
    assert sorted(set(reverse["step"])) == [20, 40, 60]
    assert np.isfinite(reverse["reverse"]).all()


def test_cost_meter(hyper_run):
    store, run_id, *_ = hyper_run
    meta = store.run(run_id)["hypergradient_meta"]
    assert meta["followed"] == ["learning_rate", "beta_1"]
    assert meta["plain_step_ms"] > 0 and meta["hyper_step_ms"] > 0
    assert meta["ratio"] == pytest.approx(meta["hyper_step_ms"] / meta["plain_step_ms"], rel=1e-2)
    assert meta["tangent_bytes"] > 0
    assert meta["window_bytes"] == 10 * meta["state_bytes"]


def test_autotune_moves_learning_rate_only_through_set_hyper(hyper_run):
    from optimizers import registry

    store, run_id, _, _, bad_id, calls = hyper_run
    changes = store.hyper_changes(run_id)
    auto = changes[changes["source"] == "auto-tune"]
    assert set(auto["name"]) == {"learning_rate"} and len(auto) >= 3
    assert (auto["step"] % 10 == 1).all()  # decided after step 10k, in effect from 10k + 1
    spec = {s.name: s for s in registry.specs("adam")}["learning_rate"]
    for value in auto["new"]:
        spec.validate(float(value))  # inside the allowed range
    assert auto["new"].iloc[-1] != pytest.approx(1e-3)
    set_values = [v for n, v in calls if n == "learning_rate"]
    for new in auto["new"]:
        assert any(v == pytest.approx(new, rel=1e-6) for v in set_values)
    assert not any(n == "beta_1" and v != pytest.approx(0.9) for n, v in calls)
    commands = store.commands(run_id).set_index("id")
    assert commands.loc[bad_id, "status"] == "refused" and "beta_2" in commands.loc[bad_id, "message"]


def test_response_slice_command(hyper_run):
    store, run_id, _, slice_id, *_ = hyper_run
    commands = store.commands(run_id).set_index("id")
    assert commands.loc[slice_id, "status"] == "done", commands.loc[slice_id, "message"]
    rows = store.response_slices(run_id, slice_id)
    assert len(rows) == 9 and np.isfinite(rows["loss"]).all()
    assert rows["center"].sum() == 1 and set(rows["name"]) == {"learning_rate"}
    values = rows["value"].to_numpy()
    center = rows.loc[rows["center"] == 1, "value"].iloc[0]
    assert values.min() == pytest.approx(center / 2, rel=1e-6)
    assert values.max() == pytest.approx(center * 2, rel=1e-6)
    g, slope = slice_slope_check(rows)
    assert math.isfinite(g) and np.sign(g) == np.sign(slope)
    assert g == pytest.approx(slope, rel=0.5)  # the secant over x/÷ 2^(1/4) is near the tangent


# ----- correctness check ------------------------------------------------------------------------
def test_correctness_check_for_adam_passes(capsys):
    from hypergrad import correctness

    assert correctness.main(["--optimizer", "adam", "--steps", "20"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    table = pd.DataFrame(result["rows"])
    assert list(table.columns) == list(correctness.COLUMNS)
    assert list(table["hyperparameter"]) == ["learning_rate", "beta_1", "beta_2", "epsilon"]
    assert result["passed"] and table["passed"].all()
    assert (table["rel_err_forward_reverse"] <= correctness.FORWARD_REVERSE_TOLERANCE).all()
    assert (table["rel_err_forward_fd"] <= correctness.FORWARD_FD_TOLERANCE).all()


# ----- config and store -------------------------------------------------------------------------
def test_config_fields_are_validated_naming_the_field():
    config = RunConfig(hypergradients=["learning_rate"], autotune={"learning_rate": 0.5})
    assert config.hypergradient_every == 5 and config.reverse_every == 50
    assert config.autotune_every == 10 and config.reverse_horizon == 0
    for fields, field in (({"hypergradients": ["momentum"]}, "hypergradients"),
                          ({"hypergradients": ["beta_1"], "autotune": {"learning_rate": 1.0}},
                           "autotune"),
                          ({"hypergradients": ["beta_1"], "autotune": {"beta_1": -1.0}},
                           "autotune"),
                          ({"reverse_horizon": 5}, "reverse_horizon"),
                          ({"hypergradients": ["beta_1"], "reverse_horizon": 201},
                           "reverse_horizon")):
        with pytest.raises(pydantic.ValidationError, match=field):
            RunConfig(**fields)


def test_old_store_gets_the_new_tables_and_column(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL"
                    " DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT"
                    " NULL, message TEXT NOT NULL DEFAULT '', optimizer TEXT NOT NULL, dataset"
                    " TEXT NOT NULL, model TEXT NOT NULL, seed INTEGER NOT NULL, device TEXT NOT"
                    " NULL DEFAULT '', total_steps INTEGER NOT NULL, step INTEGER NOT NULL"
                    " DEFAULT 0, config TEXT NOT NULL, optimizer_config TEXT NOT NULL DEFAULT"
                    " '{}', hyper_variables TEXT NOT NULL DEFAULT '[]', versions TEXT NOT NULL"
                    " DEFAULT '{}', traces INTEGER NOT NULL DEFAULT 0, pid INTEGER, heartbeat"
                    " REAL)")
        con.execute("INSERT INTO runs (created, updated, status, optimizer, dataset, model,"
                    " seed, total_steps, config) VALUES (1, 1, 'finished', 'adam', 'digits',"
                    " 'mlp', 0, 10, '{}')")
    store = RunStore(path)
    RunStore(path)  # opening twice is harmless
    assert store.run(1)["hypergradient_meta"] == {}
    assert store.hypergradients(1).empty and store.response_slices(1).empty
    assert {"autotune", "response_slice"} <= set(COMMAND_KINDS)


# ----- figures --------------------------------------------------------------------------------
def fake_grads() -> pd.DataFrame:
    rows = []
    for step in (1, 5, 10, 15, 20):
        rows.append((step, "learning_rate", -10.0 * step, -10.0 if step < 15 else 2.0,
                     -150.0 if step == 20 else None, 2.0 - 0.05 * step))
        rows.append((step, "beta_1", 0.1 * step, 0.1, None, 2.0 - 0.05 * step))
    return pd.DataFrame(rows, columns=["step", "name", "exact", "one_step", "reverse",
                                       "val_loss"])


def fake_slice() -> pd.DataFrame:
    values = 1e-3 * 2.0 ** np.linspace(-1, 1, 9)
    loss = 1.0 - 100 * (values - 1e-3) + 2e4 * (values - 1e-3) ** 2
    return pd.DataFrame({"request_id": 7, "step": 30, "name": "learning_rate", "value": values,
                         "loss": loss, "hypergradient": [None] * 4 + [-100.0] + [None] * 4,
                         "center": [0] * 4 + [1] + [0] * 4})


def test_hypergradient_figure_traces():
    fig = hf.hypergradient_figure(fake_grads(), uirevision=3)
    names = [(t.name, t.mode) for t in fig.data]
    assert names.count(("exact (forward mode)", "lines")) == 2
    assert names.count(("one-step (Baydin et al.)", "lines")) == 2
    reverse = [t for t in fig.data if t.mode == "markers"]
    assert len(reverse) == 1 and list(reverse[0].x) == [20] and list(reverse[0].y) == [-150.0]
    assert list(fig.data[0].y) == [-10.0, -50.0, -100.0, -150.0, -200.0]
    assert fig.layout.uirevision == 3
    assert "sign agreement 60%" in fig.layout.annotations[0].text
    # the percentage is explained on the chart itself
    assert fig.layout.annotations[-1].text == hf.SIGN_AGREEMENT_NOTE
    assert "same way" in hf.SIGN_AGREEMENT_NOTE
    assert hf.sign_agreement(fake_grads()) == {"learning_rate": 60.0, "beta_1": 100.0}
    symlog = hf.hypergradient_figure(fake_grads(), symlog=True)
    assert symlog.data[0].y[1] == pytest.approx(np.arcsinh(-50.0))
    assert symlog.data[0].customdata[1] == -50.0
    empty = hf.hypergradient_figure(pd.DataFrame())
    assert not empty.data and empty.layout.annotations[0].text == "waiting for data..."


def test_response_slice_figure_has_the_tangent_at_the_centre():
    rows = fake_slice()
    fig = hf.response_slice_figure(rows, log_x=True, horizon=20)
    curve, tangent, centre = fig.data
    assert len(curve.x) == 9
    xs, ys = np.array(tangent.x), np.array(tangent.y)
    assert np.allclose(ys, 1.0 - 100.0 * (xs - 1e-3))
    assert list(centre.x) == [pytest.approx(1e-3)] and fig.layout.xaxis.type == "log"
    assert "after 20 more steps" in fig.layout.title.text
    g, slope = slice_slope_check(rows)
    assert g == -100.0 and np.sign(slope) == -1
    newer = pd.concat([rows, rows.assign(request_id=8, name="beta_1")])
    assert set(hf.latest_slice(newer)["name"]) == {"beta_1"}
    assert not hf.response_slice_figure(hf.latest_slice(pd.DataFrame())).data


def test_cost_metrics_and_slice_values():
    metrics = dict((label, value) for label, value, _ in hf.cost_metrics(
        {"plain_step_ms": 1.5, "hyper_step_ms": 3.0, "ratio": 2.0, "tangent_bytes": 2_500_000,
         "window_bytes": 10_000_000, "reverse_horizon": 10}))
    assert metrics == {"plain step": "1.50 ms", "step with hyper-gradients": "3.00 ms",
                       "cost ratio": "2.00×", "tangent memory": "2.50 MB",
                       "reverse window": "10.00 MB"}
    assert dict((label, v) for label, v, _ in hf.cost_metrics({}))["reverse window"] == "off"
    from optimizers import registry
    from hypergrad.stepper import slice_values

    specs = {s.name: s for s in registry.specs("adam")}
    lr = slice_values(specs["learning_rate"], 1e-3)
    assert len(lr) == 9 and lr[0] == pytest.approx(5e-4) and lr[-1] == pytest.approx(2e-3)
    beta = slice_values(specs["beta_1"], 0.95)
    assert max(beta) < 1.0 and min(beta) == pytest.approx(0.85) and 0.95 in beta


# ----- the page -------------------------------------------------------------------------------
def test_page_shows_a_fake_run(tmp_path, monkeypatch):
    from tests._pages import page_test

    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    store = RunStore(tmp_path / "runs.sqlite")
    config = RunConfig(steps=20, hypergradients=["learning_rate", "beta_1"], reverse_horizon=5)
    run_id = store.create_run(config.to_json_dict())
    changes = [(1, n, None, v, "init") for n, v in
               (("learning_rate", 1e-3), ("beta_1", 0.9), ("beta_2", 0.999), ("epsilon", 1e-7))]
    changes.append((11, "learning_rate", 1e-3, 2e-3, "auto-tune"))
    store.append(run_id, hypergradients=list(fake_grads().itertuples(index=False, name=None)),
                 response_slices=[(7, 30, "learning_rate", r.value, r.loss, r.hypergradient,
                                   r.center) for r in fake_slice().itertuples()],
                 hyper_changes=changes, step=20)
    store.update_run(run_id, hypergradient_meta={
        "followed": ["learning_rate", "beta_1"], "autotune": {"learning_rate": 1.0},
        "plain_step_ms": 1.5, "hyper_step_ms": 3.0, "ratio": 2.0, "tangent_bytes": 2_500_000,
        "window_bytes": 5_000_000, "reverse_horizon": 5})
    store.set_status(run_id, "finished", "finished 20 steps")
    at = page_test("hypergrad", default_timeout=60).run()
    assert at.selectbox(key="hg_run").value is None  # not this session's run: opened by hand
    at.selectbox(key="hg_run").set_value(run_id).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="hg_run").value == run_id
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 3
    grads, trace, slice_fig = specs
    assert len([t for t in grads["data"] if t.get("mode") == "lines"]) == 4
    assert any(t.get("name") == "learning_rate changes" for t in trace["data"])
    assert any("tangent" in (t.get("name") or "") for t in slice_fig["data"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["cost ratio"] == "2.00×" and metrics["reverse window"] == "5.00 MB"
    assert at.toggle(key=f"hg_auto_{run_id}_learning_rate").value is True
    assert at.toggle(key=f"hg_auto_{run_id}_beta_1").value is False
    assert any("switches on or off" in m.value for m in at.markdown)
    assert at.button(key="hg_check_button") is not None
