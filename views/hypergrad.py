"""The Hyper-gradients page: d(validation loss)/d(hyperparameter) of a live run, its cost,
online tuning (RTHO), response slices and the correctness proof.

Thin on purpose: no TensorFlow maths here. The run process computes everything
(`hypergrad.stepper`) and writes it to the run store; this page reads the store every 0.5 s
(`components.live_area`), sends `autotune` / `response_slice` commands, and runs the correctness
check as a subprocess (`python -m hypergrad.correctness`).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from components.page_store import store
from components.store_guard import guard_page
from components import correctness_runner
from components import figures
from components.charts import chart
from components import live_area
from components import lesson_panel
from components import links
from components import session_runs
from components import hypergrad_figures as hf
from optimizers import registry
from runs.protocol import ACTIVE_STATUSES
from teaching import glossary

FD_EXPLANATION = """
**Why a tanh model in float64?** Forward and reverse mode compute the *same* derivative
(Franceschi et al. 2017, sec. 3), so they agree to round-off. Central finite differences
`(E(λ+h) − E(λ−h)) / 2h` only approximate it when the validation loss after T steps is a
*smooth* function of λ. In a ReLU network trained with Adam it is not: a tiny change of λ
moves the weights a little, and somewhere along the trajectory a unit whose pre-activation was
near 0 switches on or off (dead units come back, live ones die). The loss is then piecewise in λ
and the difference quotient measures those jumps instead of the slope; Adam's normalised,
sign-like steps make every small gradient count, so it happens often. tanh has no kinks, and
float64 keeps the quotient's round-off (~1e-16/h) far below the 1e-4 tolerance.
"""


@st.cache_data(show_spinner=False)
def specs_of(optimizer: str, options_json: str) -> dict[str, Any]:
    return {s.name: s for s in registry.specs(optimizer, json.loads(options_json))}


def run_specs(run: dict[str, Any]) -> dict[str, Any]:
    """name -> spec of every followable name of the run: the optimizer's `HyperSpec`s and, for
    `lr_schedule.<param>`, the schedule parameter's (`hf.schedule_specs`)."""
    config = run["config"]
    try:
        specs = dict(specs_of(config["optimizer"],
                              json.dumps(config.get("options", {}), sort_keys=True)))
    except (KeyError, ValueError):
        specs = {}
    return {**specs, **hf.schedule_specs(config.get("lr_schedule"))}


def labels_of(run: dict[str, Any]) -> dict[str, str]:
    """Followed name -> its label (a schedule parameter names its schedule)."""
    config = run["config"]
    return {n: hf.parameter_label(n, config.get("lr_schedule"))
            for n in config.get("hypergradients") or []}


def default_eta(spec) -> float:
    """A starting hyper learning rate: dimensionless in log space, small in linear space.

    0.1 on digits/MLP/Adam moves the learning rate steadily (1e-4 -> 4.4e-4 in 600 steps,
    validation loss 0.100 vs 0.116 for a fixed 1e-3); 1.0 hits the x/÷2 cap and oscillates."""
    return 0.1 if spec is not None and spec.log_scale else 1e-3


def run_label(runs_table: pd.DataFrame, run_id: int) -> str:
    r = runs_table.loc[runs_table["id"] == run_id].iloc[0]
    config = json.loads(r["config"])
    followed = config.get("hypergradients") or []
    tag = f"follows {', '.join(followed)}" if followed else "no hyper-gradients"
    return f"#{run_id} {r['optimizer']} on {r['dataset']}/{r['model']} - {r['status']} · {tag}"


# ----- commands -----------------------------------------------------------------------------
def on_autotune(run_id: int, name: str) -> None:
    from runs.service import control

    state = st.session_state
    on = state.get(f"hg_auto_{run_id}_{name}", False)
    eta = state.get(f"hg_eta_{run_id}_{name}")
    try:
        command = control.autotune(store(), run_id, name, float(eta) if on else None,
                                   caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        state["hg_messages"] = [("error", str(error.args[0] if error.args else error))]
        return
    text = f"auto-tune {name} {'on, eta = ' + format(float(eta), '.3g') if on else 'off'}"
    state["hg_messages"] = [("success", f"{text} sent to run #{run_id} (command {command})")]


def on_slice(run_id: int) -> None:
    from runs.service import control

    state = st.session_state
    try:
        command = control.response_slice(store(), run_id, state[f"hg_slice_name_{run_id}"],
                                         int(state[f"hg_slice_horizon_{run_id}"]),
                                         caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        state["hg_messages"] = [("error", str(error.args[0] if error.args else error))]
        return
    state[f"hg_slice_request_{run_id}"] = command
    state["hg_messages"] = [("info", f"response slice requested (command {command})")]


def on_check_run(run_id: int) -> None:
    from runs.service import control

    state = st.session_state
    try:
        command = control.check_hypergradients(store(), run_id,
                                               int(state[f"hg_check_horizon_{run_id}"]),
                                               caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        state["hg_check_messages"] = [("error", str(error.args[0] if error.args else error))]
        return
    state["hg_check_messages"] = [("info", f"check of run #{run_id} sent (command {command}): "
                                           "the run pauses for it; the table below updates")]


# ----- sections -------------------------------------------------------------------------------
def autotune_controls(run: dict[str, Any]) -> None:
    rid, specs = run["id"], run_specs(run)
    meta = run.get("hypergradient_meta") or {}
    live = meta.get("autotune", run["config"].get("autotune") or {})
    active = run["status"] in ACTIVE_STATUSES and session_runs.owns(run)
    st.markdown("**Auto-tune (RTHO)**: every K = "
                f"{run['config'].get('autotune_every', 10)} steps, λ ← λ − η·dE/dλ "
                "(in log space for log-scale hyperparameters), projected onto the allowed range "
                "and written with `_set_hyper`.")
    for name in run["config"].get("hypergradients") or []:
        spec = specs.get(name)
        left, right = st.columns([1, 1])
        on_key, eta_key = f"hg_auto_{rid}_{name}", f"hg_eta_{rid}_{name}"
        st.session_state.setdefault(on_key, name in live)
        st.session_state.setdefault(eta_key, float(live.get(name, default_eta(spec))))
        left.toggle(f"auto-tune {hf.parameter_label(name, run['config'].get('lr_schedule'))}",
                    key=on_key, disabled=not active,
                    on_change=on_autotune, args=(rid, name))
        right.number_input(f"η for {name}", key=eta_key, min_value=1e-9, format="%.3g",
                           disabled=not active, on_change=on_autotune, args=(rid, name),
                           help="hyper learning rate (dimensionless for log-scale "
                                "hyperparameters: the log step is η·λ·dE/dλ, capped at ×/÷2)")


def slice_controls(run: dict[str, Any]) -> None:
    rid = run["id"]
    followed = run["config"].get("hypergradients") or []
    st.markdown("**Response slice**: from the current state, the validation loss after T more "
                "steps (on the run's next batches; the run itself does not move) for 9 values "
                "around the current one; the dashed line is the hyper-gradient of that same "
                "function, i.e. its tangent at the current value.")
    left, mid, right = st.columns([2, 1, 1])
    labels = labels_of(run)
    left.selectbox("hyperparameter", followed, key=f"hg_slice_name_{rid}",
                   format_func=lambda n: labels.get(n, n))
    st.session_state.setdefault(f"hg_slice_horizon_{rid}", 20)
    mid.number_input("horizon T", min_value=1, max_value=200, step=5,
                     key=f"hg_slice_horizon_{rid}")
    right.button("Compute slice", key=f"hg_slice_button_{rid}", on_click=on_slice, args=(rid,),
                 disabled=run["status"] not in ACTIVE_STATUSES or not session_runs.owns(run),
                 width="stretch")


def correctness_result(result: dict[str, Any]) -> None:
    """A check's verdict and its table (`hypergrad.correctness` / `run_check` JSON)."""
    table = hf.correctness_table(result)
    if result["passed"]:
        st.success(f"PASS · all {len(table)} parameters within tolerance")
    else:
        failed = ", ".join(table.loc[~table["passed"], "hyperparameter"])
        st.error(f"FAIL · {failed} outside tolerance")
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        c: st.column_config.NumberColumn(format="%.6e")
        for c in ("forward", "reverse", "finite_difference", "rel_err_forward_reverse",
                  "rel_err_forward_fd")})


def run_check_panel(run: dict[str, Any]) -> None:
    """The check on the user's own run: a float64 copy of it from its current state, over its
    next few batches (`hypergrad.run_check`), sent as a command to the run's process."""
    rid = run["id"]
    st.markdown(f"**On run #{rid} itself**: its model ({run['config'].get('model')}), its "
                "weights, slots and hyperparameters now, copied in float64; the copy trains its "
                "next batches, the run does not move.")
    steerable = run["status"] in ACTIVE_STATUSES and session_runs.owns(run)
    left, right = st.columns([2, 1], vertical_alignment="bottom")
    left.number_input("horizon (steps of the copy)", 1, 20, 5, key=f"hg_check_horizon_{rid}",
                      disabled=not steerable)
    right.button("Check my run", key=f"hg_check_run_{rid}", on_click=on_check_run,
                 args=(rid,), disabled=not steerable, width="stretch",
                 help="only the owner of an active run may send it a check")
    for level, text in st.session_state.get("hg_check_messages", []):
        getattr(st, level)(text)
    result = run.get("correctness_check") or {}
    if result.get("rows"):
        st.caption(f"copy of step {result.get('step', 0):,}, {result.get('horizon')} steps, "
                   f"{result.get('seconds', 0):.1f} s; learning rate "
                   f"{result.get('learning_rate', '')}")
        correctness_result(result)


def correctness_panel(run: dict[str, Any] | None) -> None:
    st.subheader("Correctness: forward = reverse = finite differences")
    config = run["config"] if run else {"optimizer": registry.DEFAULT_OPTIMIZER}
    if config["optimizer"] in registry.OPTIMIZERS and not registry.is_rule(config["optimizer"]):
        st.info(f"{config['optimizer']} is a wrapper that overrides apply_gradients, not a pure "
                "update rule: it has no hyper-gradients to check.")
        return
    if run is not None:
        run_check_panel(run)
        st.markdown("**On a smooth toy problem** (the same optimizer and hyperparameters):")
    st.caption(f"{config['optimizer']} with the run's hyperparameters "
               f"{json.dumps(config.get('hyperparameters', {}))}, learning rate "
               f"{hf.learning_rate_text(config.get('lr_schedule'), config.get('decay') or 0.0)}, "
               "a 5-6-3 tanh model on 120 examples, 30 steps of batch 24, float64, every "
               "hyperparameter and every float parameter of the schedule; tolerances relative "
               "1e-8 (forward vs reverse) and 1e-4 (forward vs central differences).")
    key = f"hg_check_{correctness_runner.cache_key(config)}"
    if st.button("Run the check", key="hg_check_button"):
        with st.spinner("Training the check model three ways (forward, reverse, finite "
                        "differences)..."):
            st.session_state[key] = correctness_runner.check(config)
    result = st.session_state.get(key)
    if result is not None:
        if "error" in result:
            st.error(result["error"])
        else:
            correctness_result(result)
    with st.expander("Why not check a ReLU + Adam run with finite differences?"):
        st.markdown(FD_EXPLANATION)


def live_view(run: dict[str, Any], active: bool) -> None:
    """One refresh of the live area (`components.live_area`): cost, hyper-gradients, the
    hyperparameter trace and the latest response slice."""
    run_id = run["id"]
    meta = run.get("hypergradient_meta") or {}
    st.markdown(f"**Run #{run_id}** · status **{run['status']}** · step "
                f"{run['step']}/{run['total_steps']} · traces {run['traces']} (1 = no retrace)")
    silent = store().stalled_for(run)
    with st.container():  # a fixed slot: a warning that comes and goes must not shift the charts
        if silent is not None:
            st.warning(f"no heartbeat for {silent:.0f} s: the run process lives but does not "
                       "answer (stalled); its owner can stop it on the Train page")
    cols = st.columns(5)
    for col, (label, value, help_text) in zip(cols, hf.cost_metrics(meta)):
        col.metric(label, value, help=help_text)
    grads = store().hypergradients(run_id)
    symlog = st.session_state.get(f"hg_symlog_{run_id}", False)
    chart(hf.hypergradient_figure(grads, uirevision=run_id, symlog=symlog, labels=labels_of(run)),
          f"hg_fig_{run_id}", active)
    specs = run_specs(run)
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Hyperparameter trace** (◆ = change by the user or auto-tune)")
        changes = store().hyper_changes(run_id)
        followed = run["config"].get("hypergradients") or []
        shown = changes[changes["name"].isin(followed)] if followed else changes
        log_names = tuple(n for n, s in specs.items() if s.log_scale)
        chart(figures.hyper_trace_figure(shown, run["step"], uirevision=run_id,
                                         log_names=log_names), f"hg_trace_{run_id}", active)
    with right:
        slices = store().response_slices(run_id)
        rows = hf.latest_slice(slices)
        name = str(rows["name"].iloc[0]) if not rows.empty else ""
        spec = specs.get(name)
        commands = store().commands(run_id)
        pending = commands[(commands["kind"] == "response_slice")
                           & (commands["status"] == "pending")]
        horizon = None
        done = commands[(commands["kind"] == "response_slice") & (commands["status"] == "done")]
        if not rows.empty and not done.empty:
            match = done[done["id"] == int(rows["request_id"].iloc[0])]
            if not match.empty:
                horizon = json.loads(match["payload"].iloc[0]).get("horizon")
        if not pending.empty:
            st.info("computing a response slice in the run process...")
        chart(hf.response_slice_figure(rows, uirevision=f"{run_id}-slice",
                                       log_x=bool(spec and spec.log_scale), horizon=horizon,
                                       label=labels_of(run).get(name)),
              f"hg_slice_{run_id}", active)
        refused = commands[commands["kind"].isin(["autotune", "response_slice"])
                           & (commands["status"] == "refused")]
        for _, row in refused.tail(2).iterrows():
            st.warning(f"command {row['id']} {row['kind']} refused: {row['message']}")


HG_SETUP_LINK = {"label": "Open the Train page set up to follow the learning rate's hyper-gradient",
                 "icon": ":material/play_arrow:", "query_params": {"lesson": "hypergradients"}}


@guard_page  # a read-only or full data directory: one line, not a traceback
def page() -> None:
    st.title("Optimizer Lab · Hyper-gradients")
    lesson_panel.show("hypergrad")
    with st.expander("What the terms on this page mean"):
        st.markdown(glossary.explain())
    st.caption("dE_val/dλ: how the validation loss at the current weights would change if a "
               "hyperparameter had been slightly different over the whole run so far "
               "(forward mode, Franceschi et al. 2017), next to the one-step approximation of "
               "hypergradient descent (Baydin et al. 2018) and truncated reverse mode.")
    runs_table = store().runs()
    ids = [int(i) for i in runs_table["id"]]
    if not ids:
        st.info("No run yet: on the **Train** page, open **Hyper-gradients** in the Setup "
                "sidebar, tick *follow hyper-gradients* and press **Start**.")
        links.page_link("train", **HG_SETUP_LINK)
        correctness_panel(None)
        return
    state = st.session_state
    if state.get("hg_run") not in ids:
        # A session opens on its own newest run, never on another user's (see session_runs).
        mine = [i for i in session_runs.my_runs(store()) if i in ids]
        state["hg_run"] = mine[-1] if mine else None
    st.selectbox("run", ids, key="hg_run", format_func=lambda i: run_label(runs_table, i),
                 placeholder="open a run of the store (view only unless it is yours)",
                 help="this session's newest run by default; other sessions' runs are view only")
    if state["hg_run"] is None:
        st.info("No run in this session yet: on the **Train** page, open **Hyper-gradients** in "
                "the Setup sidebar, tick *follow hyper-gradients* and press **Start**, or open a "
                "run of the store above.")
        links.page_link("train", **HG_SETUP_LINK)
        st.divider()
        correctness_panel(None)
        return
    run = store().run(int(state["hg_run"]))
    if not session_runs.owns(run):
        st.caption(f"View only: run #{run['id']} belongs to another browser session (or to "
                   "none); only its owner may auto-tune it or compute slices.")
    if not run["config"].get("hypergradients"):
        st.info(f"Run #{run['id']} does not follow hyper-gradients. On the **Train** page open "
                "**Hyper-gradients** in the Setup sidebar, tick *follow hyper-gradients* and "
                "start a run.")
        links.page_link("train", **HG_SETUP_LINK)
    else:
        active = run["status"] in ACTIVE_STATUSES
        st.checkbox("asinh scale (keeps signs, compresses decades)", key=f"hg_symlog_{run['id']}",
                    help=glossary.TERMS["asinh axis"])
        live_area.live_area(run["id"], active, live_view, live_statuses=ACTIVE_STATUSES)
        for level, text in st.session_state.get("hg_messages", []):
            getattr(st, level)(text)
        left, right = st.columns(2)
        with left:
            autotune_controls(run)
        with right:
            slice_controls(run)
    st.divider()
    correctness_panel(run)
