"""The "Mixed precision & distribution" page: a lab optimizer inside a Keras 2
LossScaleOptimizer, and under MirroredStrategy over two logical CPUs.

Thin: `teaching.mixed_precision` trains in this process (the dtype policy is set and restored
under a lock); `teaching.distribution.run_subprocess` runs the distribution experiment in a
child process (logical devices must be configured before TensorFlow initialises). Results are
kept in session state until the next press. The live section keeps a
`teaching.mixed_precision.LiveMixedRun` in session state (in this process: a TF page) and
advances it in chunks of `LIVE_CHUNK` steps per button press; changes between chunks go
through the LossScaleOptimizer.
"""

from __future__ import annotations

import inspect
import subprocess

import pandas as pd
import streamlit as st

from components import lesson_panel
from components.precision_figures import (live_hyper_figure, loss_scale_figure,
                                          replica_gradients_figure)

MP_KEY, CMP_KEY, FWD_KEY, DIST_KEY = "pd_mixed", "pd_compare", "pd_forwarding", "pd_distribution"
LIVE_KEY, LIVE_ERROR_KEY = "pd_live_run", "pd_live_error"
LIVE_OPTIMIZERS = {"adam": ("learning_rate", "beta_1"), "sgd": ("learning_rate", "momentum")}
LIVE_CHUNK = 5
SKIP_STEP, LR_CHANGE = 15, (25, 0.0005)


def mixed_section() -> None:
    from teaching import mixed_precision as mp

    st.header("Mixed precision")
    st.markdown(
        "The `mixed_float16` policy keeps each layer's variables in float32 and computes in "
        "float16; a `LossScaleOptimizer` multiplies the loss by a scale (dynamic: starts at "
        "2**15, halves and **skips the step** on a non-finite gradient, doubles after "
        "`dynamic_growth_steps` finite steps, default 2000). Here the lab's optimizer is "
        "wrapped; at step %d the loss is multiplied by %.0e so that the scaled float16 gradient "
        "overflows; at step %d the learning rate is changed through the wrapper "
        "(`lso.learning_rate = %g`)." % (SKIP_STEP, mp.OVERFLOW_MULTIPLIER, *LR_CHANGE))
    left, middle, right = st.columns(3)
    policy = left.radio("policy", mp.POLICIES[1:], key="pd_policy", horizontal=True)
    growth = middle.number_input("dynamic_growth_steps", 1, 2000, 5, key="pd_growth",
                                 help="small here so the doubling shows within 40 steps")
    steps = right.number_input("steps", 20, 200, 40, key="pd_steps")
    if st.button("Train with the LossScaleOptimizer", key="pd_run_mixed"):
        with st.spinner("Training..."):
            run = mp.train(policy, steps=int(steps), overflow_at=(SKIP_STEP,),
                           growth_steps=int(growth), lr_change=LR_CHANGE)
            st.session_state[MP_KEY] = (policy, run.steps, run.variables)
    if MP_KEY in st.session_state:
        policy_run, table, variables = st.session_state[MP_KEY]
        skipped = table[table["skipped"]]
        st.metric("steps skipped (non-finite gradients)", len(skipped))
        st.caption("skipped at steps " + (", ".join(map(str, skipped["step"])) or "none")
                   + f"; final loss scale {table['loss_scale_after'].iloc[-1]:g}; "
                   "a skipped step changes no weight but still counts in `iterations`. "
                   "bfloat16 has float32's exponent range: the forced step does not overflow, "
                   "so nothing is skipped (loss scaling is unnecessary there).")
        st.plotly_chart(loss_scale_figure(table, f"{policy_run}: loss scale and loss"),
                        key="pd_scale_chart", width="stretch")
        st.dataframe(table, hide_index=True, width="stretch")
        st.markdown("**Variables, slots and compute dtypes**")
        st.dataframe(variables, hide_index=True, width="stretch")

    st.subheader("What the wrapper forwards")
    if st.button("Try each expression on a wrapped optimizer", key="pd_run_forwarding"):
        st.session_state[FWD_KEY] = mp.forwarding()
    if FWD_KEY in st.session_state:
        st.dataframe(st.session_state[FWD_KEY], hide_index=True, width="stretch")

    st.subheader("Mixed vs float32 on the same seed")
    if st.button("Train float32, mixed_float16 and mixed_bfloat16", key="pd_run_compare"):
        with st.spinner("Training three runs..."):
            st.session_state[CMP_KEY] = mp.compare(steps=40)
    if CMP_KEY in st.session_state:
        st.dataframe(st.session_state[CMP_KEY], hide_index=True, width="stretch")
        st.caption("tolerance: |final loss - float32 final loss| / float32 final loss, the "
                   "bound the tests assert.")


def _apply_live_change(run, name: str, value: float, way: str) -> None:
    try:
        run.set_hyper(name, value, way)
        st.session_state.pop(LIVE_ERROR_KEY, None)
    except Exception as error:  # noqa: BLE001 - refusals (validation) are shown, not raised
        st.session_state[LIVE_ERROR_KEY] = f"{type(error).__name__}: {error}"


def live_section() -> None:
    """Train in chunks; between chunks change a hyperparameter through the wrapper."""
    from teaching import live_mixed_precision as live
    from teaching import mixed_precision as mp

    st.subheader("Change hyperparameters live through the wrapper")
    st.markdown(
        "The inner optimizer's hyperparameters are `tf.Variable`s: a change through the "
        "`LossScaleOptimizer` is an assignment, the next step uses it, and the traced step "
        "function is **not retraced** (the tracing count stays 1). The table shows the value "
        "the inner optimizer read inside each traced step.")
    left, middle, right = st.columns(3)
    policy = left.radio("policy", mp.POLICIES[1:], key="pd_live_policy", horizontal=True)
    optimizer = middle.radio("optimizer", list(LIVE_OPTIMIZERS), key="pd_live_optimizer",
                             horizontal=True)
    if right.button("Start a new run", key="pd_live_start") or LIVE_KEY not in st.session_state:
        hypers = {"momentum": 0.9} if optimizer == "sgd" else {}
        st.session_state[LIVE_KEY] = live.LiveMixedRun(policy, optimizer, hypers, max_steps=200)
        st.session_state.pop(LIVE_ERROR_KEY, None)
    run = st.session_state[LIVE_KEY]
    st.caption(f"this run: {run.policy_name}, {type(run.inner).__name__} inside "
               f"{type(run.opt).__name__}")
    if st.button(f"Train {LIVE_CHUNK} steps", key="pd_live_train"):
        run.advance(LIVE_CHUNK)

    names = LIVE_OPTIMIZERS.get(run.optimizer_name, ("learning_rate",))
    left, middle, right = st.columns(3)
    name = left.selectbox("hyperparameter", names, key="pd_live_name")
    value = middle.number_input("new value", min_value=0.0, max_value=1.0,
                                value=float(run.inner.hyper_values()[name]), format="%.5f",
                                key=f"pd_live_value_{name}")
    way = right.radio("through", list(live.WAYS), key="pd_live_way",
                      help="both reach the inner optimizer's _set_hyper")
    if st.button("Apply the change (takes effect at the next step)", key="pd_live_apply"):
        _apply_live_change(run, name, float(value), way)
    if LIVE_ERROR_KEY in st.session_state:
        st.error(f"refused, old value kept: {st.session_state[LIVE_ERROR_KEY]}")
    st.caption(live.WAYS[way])

    first, second, third = st.columns(3)
    first.metric("steps taken", run.step)
    second.metric("step function traced", f"{run.tracing_count} time(s)")
    third.metric("changes made", len(run.changes))
    if run.rows:
        trace = run.trace()
        changes = pd.DataFrame(run.changes) if run.changes else None
        st.plotly_chart(live_hyper_figure(trace, changes, f"{run.policy_name}: live changes"),
                        key="pd_live_chart", width="stretch")
        st.dataframe(trace, hide_index=True, width="stretch", key="pd_live_trace")
    if run.changes:
        st.dataframe(pd.DataFrame(run.changes), hide_index=True, width="stretch",
                     key="pd_live_changes")


def distribution_section() -> None:
    from teaching import distribution

    st.header("Distribution: MirroredStrategy over two logical CPUs")
    st.markdown(
        f"A global batch of {distribution.GLOBAL_BATCH} is split over two replicas; each "
        "replica computes its gradient on its half (loss divided by the GLOBAL batch size), "
        "`apply_gradients` all-reduces them (SUM) and every replica applies the same update "
        "to its copy of each variable. The experiment runs in a child process because logical "
        "devices must be configured before TensorFlow starts.")
    if st.button("Run the distribution experiment", key="pd_run_distribution"):
        with st.spinner("Starting a TensorFlow process with two logical CPUs..."):
            try:
                st.session_state[DIST_KEY] = distribution.run_subprocess()
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                st.error(str(error))
    result = st.session_state.get(DIST_KEY)
    if not result:
        return
    left, right = st.columns(2)
    left.metric("max |2 replicas - 1 device| (weights, slots)",
                f"{result['max_state_difference']:.3g}")
    right.metric("max |all-reduced - full-batch gradient|",
                 f"{result['max_gradient_difference']:.3g}")
    replicas = pd.DataFrame(result["replicas"])
    st.plotly_chart(replica_gradients_figure(replicas), key="pd_replica_chart", width="stretch")
    st.dataframe(replicas, hide_index=True, width="stretch")
    st.markdown("**Variables under the strategy** (hyperparameters come from `_set_hyper` -> "
                "`_create_hypers` -> `add_weight(..., aggregation=ONLY_FIRST_REPLICA)`)")
    st.dataframe(pd.DataFrame(result["variables"]), hide_index=True, width="stretch")
    st.dataframe(pd.DataFrame(result["equivalence"]), hide_index=True, width="stretch")

    st.subheader("A hyperparameter variable without an aggregation")
    st.markdown(
        "A toy optimizer decays its learning rate in `_prepare_local` (an assign in replica "
        "context). Created with a bare `tf.Variable`, its aggregation is `NONE`; created with "
        "`add_weight(..., aggregation=ONLY_FIRST_REPLICA)`, as `_create_hypers` does for every "
        "`_set_hyper` name, the first replica's value is written to every copy.")
    with st.expander("the toy optimizer's source"):
        st.code(inspect.getsource(distribution.decaying_sgd_class), language="python")
    toy = pd.DataFrame([{k: ", ".join(map(str, v)) if isinstance(v, list) else v
                         for k, v in row.items() if k != "error"} for row in result["toy"]])
    st.dataframe(toy.fillna(""), hide_index=True, width="stretch")
    for row in result["toy"]:
        if row["error"]:
            st.error(f"{row['strategy']} + {row['variable created with']}: {row['error']}")
    st.caption("Under MirroredStrategy TensorFlow 2.21 no longer raises for a NONE mirrored "
               "variable: each replica assigns its own copy (in sync here only because every "
               "replica computes the same value). The learning rate is decayed twice per step "
               "there (0.081, not 0.09): `_prepare` calls `_prepare_local` once per device of "
               "the mirrored variables, so side effects in `_prepare_local` depend on the "
               "strategy.")


def page() -> None:
    st.title("Mixed precision & distribution")
    lesson_panel.show("precision")
    mixed_section()
    live_section()
    distribution_section()
