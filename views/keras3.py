"""The Keras 3 page: where each OptimizerV2 piece went, on one rule run by both front ends.

Thin: `teaching.migration` computes (mapping, sources, recorded call orders, numeric parity);
this page lays them out. Its last section is a plugin's migration report
(`teaching.plugin_migration`: bundled plugins/ files and registered plugins; the generated twin's
parity for a pure-rule plugin). TensorFlow is imported inside the functions only, so importing
this module (and `app`) stays TensorFlow-free. The lab's Keras 3 twins (`optimizers.keras3_twin.RuleTwin`) call the
same pure `coefficients` / `update` as the Keras 2 classes.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from components import lesson_panel

DTYPES = ("float32", "float64")
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}


@st.cache_data(show_spinner="Training 20 steps with the Keras 2 class and its Keras 3 twin...")
def parity(name: str, dtype: str) -> pd.DataFrame:
    import tensorflow as tf

    from teaching import migration

    return migration.parity(name, dtype=tf.as_dtype(dtype))


@st.cache_data(show_spinner="Training the lab's classes and Keras 3's built-ins 20 steps...")
def builtin_parity() -> pd.DataFrame:
    from teaching import keras3_parity

    return keras3_parity.table()


def builtin_section() -> None:
    """Keras 3's newer algorithms: the lab's Keras 2 class vs the `keras.optimizers` built-in."""
    st.subheader("Keras 3's newer algorithms: the lab's class vs the Keras 3 built-in")
    st.caption("Lion, Lamb, Adafactor, Muon and ScheduleFreeAdamW written as OptimizerV2 rules, "
               "trained beside `keras.optimizers.*` of Keras 3.15 on the same batches: 20 dense "
               "float32 steps, max |difference| over the weights and every slot (tolerance "
               "1e-6). ScheduleFreeAdamW's paper form differs on purpose: see Conventions.")
    if st.toggle("compute the parity rows (about 20 s)", key="k3_builtin_parity"):
        st.dataframe(builtin_parity(), hide_index=True, width="stretch")


@st.cache_data(show_spinner="Recording one apply_gradients in each...")
def call_orders(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    from teaching import migration

    return migration.call_orders(name)


def side_by_side_sources(name: str) -> None:
    from optimizers import registry
    from optimizers.keras3_twin import RuleTwin
    from teaching import migration

    left, right = st.columns(2)
    left.markdown(f"**Keras 2** · `{registry.get(name).__name__}` (OptimizerV2)")
    for qualified, text in migration.sources(registry.get(name), migration.KERAS2_METHODS).items():
        left.caption(qualified)
        left.code(text, language="python")
    right.markdown("**Keras 3** · `RuleTwin` (keras.optimizers.Optimizer)")
    for qualified, text in migration.sources(RuleTwin, migration.KERAS3_METHODS).items():
        right.caption(qualified)
        right.code(text, language="python")


@st.cache_data(show_spinner="Training the plugin and its Keras 3 twin (float32, float64)...")
def plugin_parity(label: str) -> pd.DataFrame | None:
    from teaching import plugin_migration

    return plugin_migration.twin_parity(plugin_classes()[label])


def plugin_classes() -> dict:
    """Picker label -> plugin class (bundled plugins/ files, then registered plugins)."""
    from teaching import plugin_migration

    return {choice.label: choice.cls for choice in plugin_migration.plugin_choices()}


def plugin_section() -> None:
    from teaching import plugin_migration

    st.subheader("Migrating a plugin (bring-your-own Keras 2 optimizer)")
    st.markdown(
        "Which OptimizerV2 pieces the plugin defines and where each goes in Keras 3. "
        "**automatic**: the plugin is a pure rule behind the lab's `RuleOptimizer`, so its "
        "Keras 3 twin (`RuleTwin`) is generated; **manual**: a hand-written hook someone must "
        "port; **not needed**: nothing to port.")
    classes = plugin_classes()
    if not classes:
        st.info("No plugin found in the bundled plugins folder or the registry.")
        return
    label = st.selectbox("plugin", list(classes), key="k3_plugin")
    st.dataframe(plugin_migration.report(classes[label]), hide_index=True, width="stretch",
                 key="k3_plugin_report",
                 column_config={"why": st.column_config.TextColumn(width="large")})
    table = plugin_parity(label)
    if table is None:
        st.info(f"{classes[label].__name__} is not a RuleOptimizer: no Keras 3 twin can be "
                "generated; port the rows marked manual by hand.")
        return
    summary = plugin_migration.parity_summary(table)
    verdict = st.success if bool(summary["agrees"].all()) else st.error
    verdict(f"generated Keras 3 twin vs the plugin after 20 steps: largest difference "
            f"{plugin_migration.worst(table):.3g} (float32 tolerance 1e-6, float64 1e-12)")
    st.dataframe(summary, hide_index=True, width="stretch", key="k3_plugin_parity")
    with st.expander("every weight and slot"):
        st.dataframe(table, hide_index=True, width="stretch")


def page() -> None:
    from teaching import migration

    st.title("Keras 2 -> Keras 3")
    lesson_panel.show("keras3")
    st.markdown(
        "Since TensorFlow 2.16 `tf.keras` is Keras 3, which has no `_set_hyper`, "
        "`_create_slots`, `_prepare_local` or `_resource_apply_*`: custom OptimizerV2 "
        "subclasses stopped working. Here one pure rule runs behind both front ends.")
    # a static table wraps its cells: the "what changed" sentences are read whole
    st.table(migration.mapping_table(), hide_index=True)
    left, right = st.columns(2)
    name = left.selectbox("optimizer", migration.rule_names(), key="k3_optimizer")
    dtype = right.radio("dtype", DTYPES, key="k3_dtype", horizontal=True)

    st.subheader("Numeric parity after 20 steps (same batches, dense and sparse gradients)")
    table = parity(name, dtype)
    worst = float(table["max_abs_difference"].max())
    verdict = st.success if worst <= TOLERANCE[dtype] else st.error
    verdict(f"largest difference over the weights and every slot: {worst:.3g} "
            f"(tolerance {TOLERANCE[dtype]:g} in {dtype})")
    st.dataframe(table, hide_index=True, width="stretch")

    st.subheader("One apply_gradients, recorded")
    keras2, keras3 = call_orders(name)
    left, right = st.columns(2)
    left.markdown("**Keras 2**")
    left.dataframe(keras2[["order", "method", "depth"]], hide_index=True, width="stretch")
    right.markdown("**Keras 3**")
    right.dataframe(keras3[["order", "method", "depth"]], hide_index=True, width="stretch")
    st.caption("Keras 2 computes the coefficients once per (device, dtype) in `_prepare_local`; "
               "Keras 3 recomputes them inside every `update_step`. The embedding table's "
               "`IndexedSlices` gradient goes to `_resource_apply_sparse` in Keras 2 and to the "
               "same `update_step` in Keras 3, which checks the gradient's type itself.")

    st.subheader("The two adapters, side by side")
    side_by_side_sources(name)

    builtin_section()

    plugin_section()
