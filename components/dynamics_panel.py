"""Training dynamics on the pages: the Setup's diagnostics switches, the Train page's Dynamics
view (sharpness against its threshold, update ratios, noise scale, their cost meter) and the
Runs page's comparison. Streamlit calls only; figures from `components.dynamics_figures`,
names and thresholds from `engine.diagnostics.catalog` (TensorFlow-free).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from components import dynamics_figures as df
from components.charts import chart
from components.hyper_widgets import default_index, number_args
from engine.diagnostics import catalog
from runs.store.run_store import RunStore
from schedules import preview as schedule_curves, table as schedule_specs
from settings import fields

SWITCHES = ("update_ratio", "sharpness", "noise_scale")  # `RunConfig` on/off fields
# Measured by bench/bench_diagnostics.py (digits MLP, batch 128, Adam, 2 shared CPU cores).
COST_NOTE = ("Cost of one record on the digits MLP with Adam, batch 128 "
             "(bench/bench_diagnostics.py, 2 shared cores): update ratio ≈ 0.2 steps (every "
             "10 steps: ≈ 2 %); noise scale ≈ 20 steps (every 200: ≈ 10 %); sharpness ≈ 1,050 "
             "steps (20 Hessian-vector products on the training set, twice for Adam/RMSprop; "
             "every 10,000: ≈ 10 %). A lesson may ask for more often, at that cost.")


def setup_widgets() -> None:
    """The Setup's "Dynamics diagnostics" expander: each switch and its every-K number."""
    with st.expander("Dynamics diagnostics"):
        left, right = st.columns(2)
        for index, field in enumerate(SWITCHES):
            choices, key = list(fields.choices(field)), fields.session_key(field)
            (left, right)[index % 2].selectbox(fields.label(field), choices, key=key,
                                               index=default_index(key, choices),
                                               help=fields.help_text(field))
        left, right = st.columns(2)
        for index, field in enumerate(fields.int_fields("diagnostics")):
            (left, right)[index % 2].number_input(**number_args(field))
        st.caption(COST_NOTE)


def _every(config: dict[str, Any]) -> dict[str, int]:
    """Diagnostic -> its K for the diagnostics `config` switches on."""
    return {name: int(config.get(f"{name}_every", 1)) for name in SWITCHES
            if config.get(name, "on" if name == "update_ratio" else "off") == "on"}


def learning_rate_marks(store: RunStore, run: dict[str, Any]) -> list[int]:
    """Steps where the learning rate changed live, or the run's schedule changes regime."""
    changes = store.hyper_changes(run["id"])
    live = changes[(changes["source"] != "init")
                   & changes["name"].str.startswith(("learning_rate", "lr_schedule"))]
    schedule = schedule_specs.validate_schedule("lr_schedule", run["config"].get("lr_schedule"))
    marks = [step for step, _ in schedule_curves.schedule_marks(schedule,
                                                                int(run["total_steps"]))]
    return sorted(set(int(s) for s in live["step"]) | set(marks))


def dynamics_tab(store: RunStore, run: dict[str, Any], live: bool = False) -> None:
    """The Train page's Dynamics view of `run`; `live`: charts patched in place."""
    rid, config = run["id"], run["config"]
    diagnostics = store.diagnostics(rid)
    every = _every(config)
    if not every:
        st.info("No diagnostic is on for this run: switch them on in the Setup's "
                "**Dynamics diagnostics** before Start.")
        return
    columns = st.columns(len(every) + 1)
    for column, (label, value, help_text) in zip(columns, df.cost_metrics(diagnostics, every)):
        column.metric(label, value, help=help_text)
    if "sharpness" in every:
        st.markdown("**Sharpness and the edge of stability**")
        chart(df.sharpness_figure(diagnostics, config["optimizer"], config.get("options"),
                                  uirevision=rid), f"sharpness_{rid}", live)
        st.caption(sharpness_caption(diagnostics, config))
    if "update_ratio" in every:
        chart(df.update_ratio_spec(diagnostics, uirevision=rid,
                                   marks=learning_rate_marks(store, run)),
              f"update_ratio_{rid}", live)
        st.caption("‖Δw‖/‖w‖ per variable: the step the optimizer applied relative to the "
                   "weights. The green band is the usual rule of thumb (about 1e-3); dotted "
                   "lines mark learning-rate changes and schedule regimes.")
    if "noise_scale" in every:
        chart(df.noise_scale_figure(diagnostics, int(config.get("batch_size", 128)),
                                    uirevision=rid), f"noise_scale_{rid}", live)
        st.caption(catalog.noise_scale_sentence(df.latest(diagnostics, catalog.NOISE_SCALE),
                                                int(config.get("batch_size", 128))))


def sharpness_caption(diagnostics: pd.DataFrame, config: dict[str, Any]) -> str:
    """Where the sharpness is against its threshold, in one sentence."""
    value, limit = (df.latest(diagnostics, catalog.SHARPNESS),
                    df.latest(diagnostics, catalog.SHARPNESS_THRESHOLD))
    reached = df.threshold_crossing(diagnostics, catalog.SHARPNESS, catalog.SHARPNESS_THRESHOLD)
    text = ("λ₁(H): the top eigenvalue of the training loss's Hessian (Lanczos on "
            "Hessian-vector products, forward-over-reverse). Gradient descent on a quadratic "
            "diverges once it exceeds 2/lr (Cohen et al. 2021, arXiv:2103.00065). ")
    if value is not None and limit is not None:
        text += f"Now {value:.4g} against a threshold of {limit:.4g}"
        text += (f"; reached at step {reached:,}." if reached is not None else ".")
    pre = df.threshold_crossing(diagnostics, catalog.PRECONDITIONED,
                                catalog.PRECONDITIONED_THRESHOLD)
    if df.latest(diagnostics, catalog.PRECONDITIONED) is not None:
        text += (" λ₁(P⁻¹H) is the sharpness in the optimizer's own geometry (Cohen et al. 2022, "
                 "arXiv:2207.14484)" + (f"; reached its threshold at step {pre:,}." if pre
                                        else "."))
    return text


def compare_tab(store: RunStore, chosen: list[int], labels: dict[int, str], key: str) -> None:
    """The Runs page's Dynamics tab: one diagnostic of the compared runs overlaid."""
    frames = {i: store.diagnostics(i) for i in chosen}
    names = [n for n in (catalog.SHARPNESS, catalog.PRECONDITIONED, catalog.UPDATE_RATIO,
                         catalog.NOISE_SCALE)
             if any(not f.empty and (f["name"] == n).any() for f in frames.values())]
    if not names:
        st.info("No diagnostics recorded for these runs (switch them on in the Train page's "
                "Setup, **Dynamics diagnostics**).")
        return
    left, right = st.columns(2)
    name = left.selectbox("diagnostic", names, key="runs_dynamics_name")
    variable = ""
    if name == catalog.UPDATE_RATIO:
        variables = list(dict.fromkeys(v for f in frames.values() if not f.empty
                                       for v in f.loc[f["name"] == name, "variable"]))
        variable = right.selectbox("variable", variables, key="runs_dynamics_variable")
    chart(df.comparison_figure(frames, labels, name, variable, uirevision=key,
                               log_y=name in (catalog.UPDATE_RATIO, catalog.NOISE_SCALE)),
          "runs_dynamics")
    st.caption("Dashed: each run's threshold (2/lr for SGD, 38/lr for Adam's preconditioned "
               "sharpness at β₁ = 0.9); the green band: update ratios around 1e-3.")
