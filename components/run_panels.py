"""The three panels of a run on the Train page: Curves, Slots, Config.

Streamlit calls only; the figures come from the pure builders of `components.figures` and the
data from the run store passed in.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from components import figures, slot_figures
from components.charts import chart
from components import inspect_figures
from components import rule_view
from schedules import preview as schedule_curves, table as schedule_specs
from optimizers.routing import ROUTES_KEY
from runs.store.run_store import RunStore
from components.figures import DISPLAY_POINTS
from components.slot_figures import HEATMAP_STEPS

ADAM_UPDATE = ("`lr_t * m / (sqrt(v) + epsilon)` with `lr_t = lr * sqrt(1 - beta_2^t) / "
               "(1 - beta_1^t)`")


# The schedule-free eval point's series name (`engine.recording.EVAL_POINT_SERIES`; that
# module imports TensorFlow, which the server does not).
EVAL_POINT = "x"


def slot_caption(optimizer: str, slots: list[str]) -> str:
    """The Slots tab's caption, naming the run's optimizer (the Adam formula only for Adam)."""
    rule = f" (for Adam {ADAM_UPDATE})" if optimizer == "adam" else ""
    others = [s for s in slots if s not in ("update", EVAL_POINT)]
    state = (f"the other slots ({', '.join(f'`{s}`' for s in others)}) are {optimizer}'s state "
             "created with `add_slot`" if others else f"{optimizer} creates no slot")
    eval_point = (
        f" **{EVAL_POINT}** is no slot: the variables hold y, the point the gradients are taken "
        "at, and the point the run is evaluated on is recovered from y and z, "
        "x = (y - (1 - beta_1) z) / beta_1 (Defazio et al. 2024, Algorithm 1; with "
        "`keras3_tf_compat` Keras 3 evaluates y itself, so x = y)."
        if EVAL_POINT in slots else "")
    return (f"**update** is the effective per-parameter step {optimizer} actually applied, "
            f"`var_before - var_after`{rule}; {state}.{eval_point} Second moments and "
            "accumulators start on a log axis.")


def changes_table(changes: pd.DataFrame) -> pd.DataFrame:
    """The user / auto-tune changes, newest first, for an HTML table readable in the DOM."""
    rows = changes[changes["source"] != "init"].iloc[::-1].head(12)
    return pd.DataFrame({
        "step": rows["step"].astype(int).to_list(),
        "hyperparameter": rows["name"].to_list(),
        "old": [figures._fmt(v) for v in rows["old"]],
        "new": [figures._fmt(v) for v in rows["new"]],
        "source": rows["source"].to_list(),
    })


def curves_tab(store: RunStore, run: dict[str, Any], scalars: pd.DataFrame,
               log_names: tuple[str, ...] = (), live: bool = False) -> None:
    """Loss and accuracy curves, the hyperparameter trace (log axes for `log_names`) and the
    table of live changes; `live`: charts patched in place (the run is training)."""
    rid = run["id"]
    changes = store.hyper_changes(rid)
    state = st.session_state
    state.setdefault(f"smooth_{rid}", 0.0)
    marks = schedule_curves.schedule_marks(  # the run's schedule as started (config)
        schedule_specs.validate_schedule("lr_schedule", run["config"].get("lr_schedule")),
        int(run["total_steps"]))
    left, right = st.columns(2)
    with left:
        chart(figures.loss_spec(scalars, uirevision=rid, log_y=state.get(f"logy_{rid}", False),
                                changes=changes, smoothing=state.get(f"smooth_{rid}", 0.0),
                                schedule_marks=marks),
              f"loss_{rid}", live)
        box, slider = st.columns([1, 2])
        box.checkbox("log loss axis", key=f"logy_{rid}")
        slider.slider("smoothing (EMA per step)", 0.0, 0.99, step=0.01, key=f"smooth_{rid}",
                      help="display only: train loss shown as an exponential moving average "
                           "with this weight per step (the raw curve stays faint behind); "
                           "recording is unchanged. Dotted red lines: your / auto-tune "
                           "hyperparameter changes; dashed grey: recording decimates.")
    with right:
        chart(figures.accuracy_spec(scalars, uirevision=rid), f"accuracy_{rid}", live)
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Hyperparameter trace** (value in effect at each step; ◆ = change)")
        # live: the cached dict (twice a second, only its end moves); ended: a Figure
        trace = figures.hyper_trace_dict if live else figures.hyper_trace_figure
        chart(trace(changes, run["step"], uirevision=rid, log_names=log_names), f"hypers_{rid}", live)
    with right:
        st.markdown("**Hyperparameter changes**")
        table = changes_table(changes)
        if table.empty:
            st.caption("No live change yet: move a hyperparameter in the sidebar while the run is active.")
        else:
            st.table(table.set_index("step"))


def slots_tab(store: RunStore, run: dict[str, Any], live: bool = False) -> None:
    """Per (variable, slot) norm/mean/std over the steps and one slot's distribution heatmap;
    `live`: charts patched in place."""
    rid = run["id"]
    stats = store.slot_stats(rid, max_points=DISPLAY_POINTS)
    if stats.empty:
        st.info("No slot statistics yet (slots are created by the first `apply_gradients`).")
        return
    variables = list(dict.fromkeys(stats["variable"]))
    variable = st.selectbox("variable", variables, key=f"slot_var_{rid}")
    slots = list(dict.fromkeys(stats.loc[stats["variable"] == variable, "slot"]))
    log_key = f"slot_log_{rid}"
    if log_key not in st.session_state:  # first view: second moments / accumulators on log
        st.session_state[log_key] = slot_figures.default_log_slots(
            list(dict.fromkeys(stats["slot"])))
    log_slots = st.multiselect("log axis for", list(dict.fromkeys(stats["slot"])), key=log_key,
                               help="slots drawn on a logarithmic y axis")
    chart(slot_figures.slot_rows_figure(stats, variable, log_slots, uirevision=f"{rid}-{variable}"),
          f"slotstats_{rid}", live)
    slot = st.selectbox("slot (distribution over the steps)", slots, key=f"slot_slot_{rid}",
                        index=slots.index("update") if "update" in slots else 0)
    hist = store.histograms(rid, variable, slot, max_points=HEATMAP_STEPS)
    chart(slot_figures.distribution_heatmap(hist, f"Distribution of {slot} of {variable}",
                                            uirevision=f"{rid}-{variable}-{slot}"),
          f"heat_{rid}", live)
    st.caption(slot_caption(run["config"]["optimizer"], slots))
    routes = (run.get("optimizer_config") or {}).get(ROUTES_KEY)
    if isinstance(routes, dict) and routes:  # Muon: which step each variable takes
        st.caption("Routing (Keras 3's rule): " + ", ".join(
            f"`{name}` -> **{step}**" for name, step in routes.items())
            + ". A Muon variable keeps only `m` (its `v` is a scalar placeholder).")
    with st.expander(f"{run['config']['optimizer']}: the update rule these slots come from"):
        rule_view.show(run["config"]["optimizer"], key=f"slots_rule_{rid}", sources=False)


# Where a run keeps its `optimizers.hyper_kinds.hyper_kinds_table` rows: its own store column
# (preferred), or a key inside the recorded optimizer config.
HYPER_KINDS_COLUMN = "hyper_kinds"
HYPER_KINDS_CONFIG_KEY = "_hyper_kinds"
NOT_RECORDED = ("Not recorded for this run: the hyperparameter kinds table is recorded by runs "
                "started after this version (the run worker writes it with the optimizer "
                "config, after the first step).")


def recorded_hyper_kinds(run: dict[str, Any]) -> list[dict] | None:
    """The hyperparameter-kinds rows the worker recorded for `run`, or None (older runs).

    Read from `run["hyper_kinds"]`, else from `run["optimizer_config"]["_hyper_kinds"]`; a JSON
    string is decoded. An empty or malformed value counts as not recorded.
    """
    value = run.get(HYPER_KINDS_COLUMN)
    if not value:
        value = (run.get("optimizer_config") or {}).get(HYPER_KINDS_CONFIG_KEY)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
        return None
    return value


def optimizer_config_shown(run: dict[str, Any]) -> dict[str, Any]:
    """`get_config()` as recorded, without the kinds table (it is shown as a table) and
    Muon's routing (shown in the Slots view)."""
    config = dict(run.get("optimizer_config") or {})
    config.pop(HYPER_KINDS_CONFIG_KEY, None)
    config.pop(ROUTES_KEY, None)
    return config


def hyper_kinds_section(run: dict[str, Any]) -> None:
    """The recorded `_set_hyper` / `_get_hyper` / `_serialize_hyperparameter` table, or why not."""
    rows = recorded_hyper_kinds(run)
    st.markdown("**Hyperparameter kinds** (what `_set_hyper` stored, what "
                "`_get_hyper(name, dtype)` returned, what `_serialize_hyperparameter` wrote; "
                "live calls in the run worker)")
    if rows is None:
        st.caption(NOT_RECORDED)
        return
    st.table(inspect_figures.hyper_kinds_frame(rows).set_index("name"))  # wraps long cells
    created = [r for r in rows if r.get("aggregation")]
    if created:
        st.caption("`aggregation=`: how each hyperparameter variable is combined across replicas "
                   "under a distribution strategy; `_create_hypers` makes them "
                   "`ONLY_FIRST_REPLICA` (every replica holds the same value).")


def config_tab(store: RunStore, run: dict[str, Any]) -> None:
    """`get_config()` beside the live `_hyper` variables, the run config and its commands."""
    rid = run["id"]
    left, right = st.columns(2)
    with left:
        st.markdown("**Optimizer config** (`get_config()`, hyperparameters via "
                    "`_serialize_hyperparameter`)")
        st.json(optimizer_config_shown(run), expanded=True)
        st.download_button("Download config JSON", key=f"download_{rid}",
                           data=json.dumps({"run": run["config"],
                                            "optimizer": optimizer_config_shown(run)}, indent=2),
                           file_name=f"run-{rid}-config.json", mime="application/json")
    with right:
        st.markdown("**Hyperparameter variables** (`_hyper` after `_create_hypers`)")
        if run["hyper_variables"]:
            st.dataframe(pd.DataFrame(run["hyper_variables"]), hide_index=True, width="stretch")
        else:
            st.caption("Created by the first `apply_gradients`.")
        st.markdown("**Run config**")
        st.json(run["config"], expanded=False)
        if run["versions"]:
            st.caption(" · ".join(f"{k} {v}" for k, v in run["versions"].items()))
        commands = store.commands(rid)
        if not commands.empty:
            st.markdown("**Commands**")
            st.dataframe(commands[["id", "kind", "payload", "status", "message", "step"]],
                         hide_index=True, width="stretch")
    hyper_kinds_section(run)
