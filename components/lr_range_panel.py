"""The Train page's learning-rate range test (Smith 2017, arXiv:1506.01186): a button that
queues `lr_range` for the selected run (a copy is swept in its process; the run does not move),
the sweep's progress, the loss against the learning rate with its marks, and "use this learning
rate" (a live `set_hyper`, the run's owner only). The maths is `engine.lr_range`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from components import session_runs
from components.charts import chart
from components.diagnostic_figures import lr_range_figure
from engine import diagnostic_costs, lr_range
from optimizers.hyperparams import InvalidHyperparameter
from runs.protocol import ACTIVE_STATUSES
from runs.service import control
from runs.service.ownership import NotOwner
from runs.store.run_store import RunStore

START_LABELS = {"current": "from the run's current state", "init": "from the start (θ₀)"}


def cost_meter() -> None:
    """The measured costs (`bench/bench_lr_range.py`) as metrics beside the plain step."""
    costs = diagnostic_costs.MEASURED
    cols = st.columns(3)
    cols[0].metric("range-test step", f"{costs['range_step_ratio']:.2f}× a train step",
                   help=diagnostic_costs.SOURCE)
    cols[1].metric("default sweep (200 steps)", f"{costs['range_sweep_s']:.2f} s",
                   help="the run waits meanwhile; " + diagnostic_costs.SOURCE)
    cols[2].metric("plain train step", f"{costs['plain_step_ms']:.1f} ms",
                   help=diagnostic_costs.SOURCE)


def _latest_request(commands: pd.DataFrame) -> pd.Series | None:
    mine = commands[commands["kind"] == "lr_range"] if not commands.empty else commands
    return None if mine.empty else mine.iloc[-1]


def _request_form(store: RunStore, run: dict[str, Any]) -> None:
    run_id = run["id"]
    cols = st.columns(4)
    lr_min = cols[0].number_input("from lr", min_value=lr_range.LR_BOUNDS[0],
                                  max_value=lr_range.LR_BOUNDS[1], value=lr_range.LR_MIN,
                                  format="%.1e", key=f"lrr_min_{run_id}")
    lr_max = cols[1].number_input("to lr", min_value=lr_range.LR_BOUNDS[0],
                                  max_value=lr_range.LR_BOUNDS[1], value=lr_range.LR_MAX,
                                  format="%.1e", key=f"lrr_max_{run_id}")
    steps = cols[2].number_input("steps", min_value=lr_range.STEP_BOUNDS[0],
                                 max_value=lr_range.STEP_BOUNDS[1], value=lr_range.STEPS,
                                 step=50, key=f"lrr_steps_{run_id}")
    start = cols[3].radio("copy", list(START_LABELS), format_func=START_LABELS.get,
                          key=f"lrr_start_{run_id}")
    if st.button("Run a learning-rate range test", key=f"lrr_go_{run_id}",
                 help="sweeps a copy of the run in its process; the run itself does not move "
                      "(it waits while the copy trains)"):
        try:
            command_id = control.lr_range(store, run_id, float(lr_min), float(lr_max),
                                          int(steps), start, caller=session_runs.caller())
        except (ValueError, NotOwner) as error:
            st.warning(str(error))
        else:
            st.session_state[f"lrr_request_{run_id}"] = command_id


def _use_rate(store: RunStore, run: dict[str, Any], result: lr_range.RangeResult) -> None:
    choices = {"steepest descent": result.steepest,
               "lowest loss / 10": None if result.minimum is None else result.minimum / 10,
               "divergence point / 10": None if result.divergence is None
               else result.divergence / 10}
    choices = {k: v for k, v in choices.items() if v is not None}
    if not choices:
        return
    cols = st.columns([2, 1])
    pick = cols[0].radio("pick", list(choices), horizontal=True, key=f"lrr_pick_{run['id']}",
                         format_func=lambda k: f"{k}: {choices[k]:.3g}")
    if cols[1].button("Use this learning rate", key=f"lrr_use_{run['id']}",
                      help="a live set_hyper of learning_rate on the run (no retrace)"):
        try:
            control.set_hyper(store, run["id"], "learning_rate", float(f"{choices[pick]:.3g}"),
                              source="lr range test", caller=session_runs.caller())
        except (ValueError, KeyError, NotOwner, InvalidHyperparameter) as error:
            st.warning(str(error.args[0]) if error.args else str(error))
        else:
            st.success(f"learning_rate = {choices[pick]:.3g} sent to run #{run['id']}")


def panel(store: RunStore, run: dict[str, Any]) -> None:
    """The range-test view of `run` (a `store.run` dict): request form (owner, active run),
    the latest sweep with its progress, its marks and "use this learning rate"."""
    st.caption("Smith (2017): train a copy for a few hundred steps while the learning rate "
               "grows geometrically, and read the curve. The steepest descent is a good "
               "rate to train at; the divergence point is the stability limit 2/λ the loss's "
               "blow-up implies (on a quadratic of curvature λ, SGD diverges above 2/λ).")
    cost_meter()
    active = run["status"] in ACTIVE_STATUSES and session_runs.owns(run)
    if active:
        _request_form(store, run)
    request = _latest_request(store.commands(run["id"]))
    if request is None:
        if not active:
            st.info("No range test of this run (only its owner can start one while it runs).")
        return
    rows = store.lr_range(run["id"], int(request["id"]))
    payload = request["payload"]
    payload = json.loads(payload) if isinstance(payload, str) else dict(payload)
    steps = int(payload.get("steps", lr_range.STEPS))
    if request["status"] == "pending":
        st.progress(min(len(rows) / steps, 1.0),
                    text=f"range test #{request['id']}: {len(rows)} of {steps} steps")
    elif request["status"] == "refused":
        st.warning(f"range test #{request['id']} refused: {request['message']}")
        return
    if rows.empty:
        return
    result = lr_range.analyse(rows["learning_rate"], rows["loss"])
    chart(lr_range_figure(rows, result, title=f"range test #{request['id']} of run "
                          f"#{run['id']} ({len(rows)} steps)"), key=f"lrr_fig_{run['id']}")
    marks = [f"steepest descent **{result.steepest:.3g}**" if result.steepest else None,
             f"lowest smoothed loss at **{result.minimum:.3g}**" if result.minimum else None,
             f"divergence point **{result.divergence:.3g}** (curvature λ ≈ "
             f"{result.curvature:.3g})" if result.divergence else
             "no divergence within the sweep (raise *to lr*)"]
    st.markdown(" · ".join(m for m in marks if m))
    if active and request["status"] == "done":
        _use_rate(store, run, result)
