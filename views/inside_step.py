"""Inside one step: step through `apply_gradients` of a real optimizer and see what each method did.

Thin: `teaching.inspect_step.StepInspector` runs and records the step (eagerly, instrumented),
`teaching.demos` runs the live demonstrations, `components.inspect_figures` draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from components import lesson_panel
from components import rule_view
from components import inspect_figures
from components.charts import chart
from components.plugin_loader import load_plugins
from optimizers import registry

EXPLAIN_SET_HYPER = """
`_set_hyper(name, value)` stores a Python float in `self._hyper` until the first `apply_gradients`;
`_create_hypers` then turns every entry into a `tf.Variable`, and later `_set_hyper` calls
**assign** to that variable. A compiled step reads the variable, so it sees the new value with
no retrace. A plain attribute (`self.t_cur = 5`) is a Python float: a `tf.function` reads it once,
at trace time, and bakes it into the graph as a constant, so a later `self.t_cur = 5` is silently
ignored (or, if you pass it as an argument, forces a retrace per value). If `t_cur` *was* a
variable attribute, `self.t_cur = 5` replaces the variable object with an int: the traced graph
keeps reading the old variable. One exception: `OptimizerV2.__setattr__` routes `self.name = v` to
`_set_hyper` when `name` is already in `_hyper`, so `self.learning_rate = 0.1` is safe.
"""
EXPLAIN_KINDS = """
A hyperparameter can be handed to an `OptimizerV2` as a **float**, a **`tf.Variable`**, a
**callable** (`lambda: 0.01`), a **`LearningRateSchedule`** (learning rate only) or a **tensor**.
Pick one per hyperparameter: the optimizer is built with your choices and stepped once, and the
two tables below are what the base class's own methods returned, live.

* `_set_hyper` **stores the object as given**. At the first `apply_gradients` (or the first
  `_get_hyper`), `_create_hypers` turns only the *numbers* into float32 `tf.Variable`s, created
  with `aggregation=ONLY_FIRST_REPLICA` (every replica of a distributed run computes the same
  value, so the first replica's is kept). Everything else stays as it was.
* `_get_hyper(name, dtype)` calls a callable and casts to `dtype`; in float64 you see the float32
  number widened (0.001 -> 0.0010000000474974513); in float32 a variable comes back as the
  variable itself (`tf.cast` to its own dtype is a no-op). A schedule comes back **as itself**: only
  `_decayed_lr` evaluates it, at `iterations`.
* `_serialize_hyperparameter` (what `get_config` writes) turns a schedule into its Keras dict, a
  callable into its value now, a tensor or variable into a NumPy number.
* `_set_hyper(name, x)` later **assigns** when a variable is stored (even one you passed in: your
  variable changes) and **replaces** the stored object otherwise.
"""
EXPLAIN_T_CUR = """
**The `self.t_cur = 5` lesson.** The last row is a plain attribute set on the same optimizer:
it is not in `_hyper`, so `_get_hyper` and `_serialize_hyperparameter` raise `KeyError` and
`get_config` does not save it. Worse, inside a compiled step a Python number is read once, at
trace time, and baked into the graph as a **constant**: changing it later is silently ignored,
or (passed as an argument) forces a **retrace** per value. A `_set_hyper` number becomes a
**variable**: the graph reads it at every step, so a new value is seen with no retrace. Count
the traces:
"""
EXPLAIN_EPSILON = """
`_set_hyper` a value when it is numeric and someone may want to change it during training or
differentiate with respect to it (learning rate, betas, momentum). A plain attribute is fine for
settings fixed for the optimizer's life that change the *structure* of the computation (which
slots exist: `amsgrad`, `centered`; which formula is traced: `nesterov`). Keras' own Adam keeps
`epsilon` a plain attribute (read in `_prepare_local` with `tf.convert_to_tensor(self.epsilon)`):
harmless while nobody changes it, but a change after tracing is ignored, as measured below.
The lab's Adam registers it.
"""
EXPLAIN_ARGS = """
`_resource_apply_dense(grad, var, apply_state)` receives, once per variable: `grad`, a dense
`tf.Tensor` of the variable's shape and dtype (already aggregated across replicas and clipped);
`var`, the `tf.Variable` itself (a resource handle: the method must *assign* to it and return the
op); `apply_state`, the dict `{(device, dtype): coefficients}` that `_prepare` filled by calling
`_prepare_local` once per (device, dtype). The base class only passes `apply_state` when the
method's signature names it; otherwise `_fallback_apply_state` recomputes the coefficients per
variable. Sparse gradients go to `_resource_apply_sparse(grad_rows, var, indices, apply_state)`
after `_resource_apply_sparse_duplicate_indices` summed repeated rows. The table below is what
the last step's calls actually received.
"""
EXPLAIN_NAMES = """
The old `OptimizerV2` docstring says subclasses implement `resource_apply_dense`,
`resource_apply_sparse` and `create_slots`. The code calls `_resource_apply_dense`,
`_resource_apply_sparse`, `_create_slots` and `_prepare_local`: the docstring names the concept,
the underscore marks them as hooks for subclasses, not methods for users. A subclass that defines
the public names is never called (see the bad plugin's contract report), as this check of the
base class shows:
"""
WHY_APPLY_GRADIENTS = """
Every optimizer above only says how **one variable** changes (`_resource_apply_dense`), and the
base class's `apply_gradients` does the rest. `Lookahead` must run a **whole other optimizer's**
`apply_gradients` (its own `_prepare`, slots, `iterations`) and only then move the slow weights
every k steps: a step *around* the base-class loop, not inside it, so it overrides
`apply_gradients` itself. Pick `lookahead:adam` and step: the recorded calls show the outer
`apply_gradients` creating the `slow` slots, then the inner optimizer's full call tree.
"""


def init_state() -> None:
    defaults: dict[str, Any] = {"is_optimizer": "adam", "is_model": "dense", "is_demos": {}}
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def optimizer_choices() -> list[str]:
    names = registry.names()
    return names + [f"lookahead:{n}" for n in ("adam", "sgd")]


def inspector():
    """The session's `StepInspector` for the selected optimizer and model (rebuilt on change)."""
    from teaching.inspect_step import StepInspector

    state = st.session_state
    wanted = (state["is_optimizer"], state["is_model"])
    current = state.get("is_inspector")
    if current is None or (current.name, current.model) != wanted:
        state["is_inspector"] = StepInspector(*wanted)
    return state["is_inspector"]


def on_step() -> None:
    inspector().step()


def on_reset() -> None:
    st.session_state.pop("is_inspector", None)


def run_demo(name: str) -> None:
    from teaching import demos

    st.session_state["is_demos"][name] = getattr(demos, name)()


def coordinates_table(record, var_name: str, count: int = 6) -> pd.DataFrame:
    """The first `count` coordinates of the gradient, the variable and each slot, before/after."""
    def flat(a):
        return np.asarray(a).ravel()[:count]

    shape = record.var_before[var_name].shape
    index = [str(tuple(int(j) for j in np.unravel_index(i, shape)))
             for i in range(min(count, int(np.prod(shape))))]
    columns = {"grad": flat(record.grads[var_name]),
               "var before": flat(record.var_before[var_name]),
               "var after": flat(record.var_after[var_name])}
    for slot, after in record.slots_after[var_name].items():
        before = record.slots_before[var_name].get(slot)
        columns[f"{slot} before"] = flat(before) if before is not None else np.full(len(index), np.nan)
        columns[f"{slot} after"] = flat(after)
    return pd.DataFrame(columns, index=pd.Index(index, name="coordinate"))


def hyper_comparison(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """One row per hyperparameter: `_hyper` before and after the call, `_get_hyper`, serialized."""
    def describe(row) -> str:
        if row["stored_type"] == "float":
            return f"float {row['stored_value']:.6g}"
        aggregation = f", aggregation={row['aggregation']}" if row.get("aggregation") else ""
        return (f"{row['stored_type']} {row['variable_name']} ({row['variable_dtype']}"
                f"{aggregation}) = {row['stored_value']:.6g}")

    b, a = before.set_index("name"), after.set_index("name")
    return pd.DataFrame({
        "name": list(a.index),
        "_hyper before the call": [describe(b.loc[n]) if n in b.index else "" for n in a.index],
        "_hyper after the call": [describe(a.loc[n]) for n in a.index],
        "_get_hyper(name, float32)": [f"Tensor {a.loc[n, 'get_hyper_dtype']} {a.loc[n, 'get_hyper']:.6g}"
                                      for n in a.index],
        "_serialize_hyperparameter(name)": [f"{a.loc[n, 'serialized_type']} {np.float32(a.loc[n, 'serialized'])}"
                                            for n in a.index],
    })


def call_table(calls: pd.DataFrame) -> pd.DataFrame:
    out = calls.copy()
    out["call"] = ["    " * d + ("inner." if o == "inner" else "") + m
                   for d, o, m in zip(out["depth"], out["owner"], out["method"])]
    return out[["order", "call", "detail"]]


def record_view(ins, record) -> None:
    st.subheader(f"Step {record.step}: loss {record.loss_before:.6f} -> {record.loss_after:.6f}")
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Call order** (recorded from the real, eager call; indented = called by the line above)")
        table = call_table(record.calls)
        st.dataframe(table, hide_index=True, width="stretch", key="is_calls",
                     height=36 * (len(table) + 1) + 4)
    with right:
        st.markdown("**`get_slot_names()`**")
        st.markdown(f"before this call: `{record.slot_names_before}` · after: `{record.slot_names_after}`")
        if not record.slot_names_before:
            st.caption("Empty before the first call: slots are made by `_create_slots`, which runs "
                       "inside the first `apply_gradients` (`_create_all_weights`). Later calls run "
                       "`_create_slots` again but `add_slot` returns the existing variable.")
        st.markdown("**`apply_state` from `_prepare_local`** (one entry per (device, dtype))")
        for key, coeffs in record.apply_state.items():
            st.caption(key)
            # six significant digits: lr_t at step 1 is 0.000316, which a default rounding
            # shows as 0.0003
            st.dataframe(pd.DataFrame({"coefficient": list(coeffs), "value": list(coeffs.values())}),
                         hide_index=True, width="stretch",
                         column_config={"value": st.column_config.NumberColumn(format="%.6g")})
    st.markdown("**Hyperparameters: `_hyper` vs `_get_hyper(name, tf.float32)` vs "
                "`_serialize_hyperparameter(name)`**")
    st.dataframe(hyper_comparison(record.hypers_before, record.hypers_after), hide_index=True,
                 width="stretch", key="is_hypers")

    variables = list(record.var_before)
    var_name = st.selectbox("variable", variables, key="is_variable")
    if var_name not in variables:
        return
    st.markdown(f"**What `_resource_apply_*` received for `{var_name}`**")
    st.json(record.apply_args.get(var_name, {}), expanded=True)
    st.dataframe(coordinates_table(record, var_name), width="stretch")
    arrays = {"grad": record.grads[var_name], "var before": record.var_before[var_name],
              "var after": record.var_after[var_name],
              "var change": record.var_after[var_name] - record.var_before[var_name]}
    chart(inspect_figures.heatmap_row(arrays, f"{var_name}: gradient and variable"), "is_heat_var")
    slot_arrays = {}
    for slot, after in record.slots_after[var_name].items():
        slot_arrays[f"{slot} before"] = record.slots_before[var_name].get(slot, np.zeros_like(after))
        slot_arrays[f"{slot} after"] = after
    if slot_arrays:
        chart(inspect_figures.heatmap_row(slot_arrays, f"{var_name}: slots"), "is_heat_slots")
    if record.grad_rows[var_name] is not None:
        st.markdown(f"**Sparse path**: the gradient is a `tf.IndexedSlices` on rows "
                    f"`{record.grad_rows[var_name]}` (ids `[[0, 2], [2, 4]]`: row 2 twice, summed by "
                    "`_resource_apply_sparse_duplicate_indices`). Only those rows of the variable and "
                    "of every slot change; a dense update would decay every row's slots.")
        st.dataframe(record.touched_rows(var_name), hide_index=True, width="stretch", key="is_rows")


def kind_choices(name: str) -> dict[str, list[str]]:
    """Hyperparameter -> the kinds optimizer `name` accepts (tried live once per session)."""
    from optimizers import hyper_kinds
    from teaching.inspect_step import build_optimizer

    cache = st.session_state.setdefault("is_kind_allowed", {})
    if name not in cache:
        cache[name] = hyper_kinds.allowed_kinds(lambda: build_optimizer(name))
    return cache[name]


def kinds_rows(name: str, kinds: dict[str, str], dtype: str) -> list[dict]:
    """`optimizers.hyper_kinds.walkthrough` of a fresh optimizer `name` with `kinds` (JSON rows,
    kept for the last choice only)."""
    from optimizers import hyper_kinds
    from teaching.inspect_step import build_optimizer

    wanted = (name, tuple(sorted(kinds.items())), dtype)
    cached = st.session_state.get("is_kinds_rows")
    if cached is None or cached[0] != wanted:
        optimizer = build_optimizer(name)
        hyper_kinds.set_kinds(optimizer, {k: v for k, v in kinds.items() if v != "float"})
        cached = (wanted, hyper_kinds.walkthrough(optimizer, dtype))
        st.session_state["is_kinds_rows"] = cached
    return cached[1]


def hyper_kinds_view() -> None:
    st.subheader("Float, variable, callable, schedule, tensor: what `_set_hyper` stores")
    st.markdown(EXPLAIN_KINDS)
    name = st.session_state["is_optimizer"]
    allowed = kind_choices(name)
    cols = st.columns(min(len(allowed), 4) + 1)
    kinds = {}
    for i, (hyper, choices) in enumerate(allowed.items()):
        kinds[hyper] = cols[i % (len(cols) - 1)].selectbox(
            hyper, choices, key=f"is_kind_{hyper}",
            help="the kinds this optimizer's `_set_hyper` accepts (the lab refuses a schedule "
                 "except for learning_rate)" if len(choices) > 1 else
                 "this optimizer accepts numbers only here")
    dtype = cols[-1].radio("dtype asked of `_get_hyper`", ["float32", "float64"],
                           key="is_kinds_dtype", horizontal=True)
    rows = kinds_rows(name, kinds, dtype)
    hypers = [r for r in rows if r["kind"] != "plain attribute"]
    for phase, caption in (("1 after __init__", "**1. After `__init__`**: what `_set_hyper` "
                            "stored; nothing created yet"),
                           ("2 after apply_gradients #1", "**2. After the first "
                            "`apply_gradients`**: `_create_hypers` has run; `iterations` = 1")):
        st.markdown(caption)
        # st.table wraps long cells: every word stays readable on a projector
        st.table(inspect_figures.hyper_kinds_frame(
            [r for r in hypers if r["phase"] == phase]).set_index("name"))
    st.markdown(EXPLAIN_T_CUR)
    st.table(inspect_figures.hyper_kinds_frame(
        [r for r in rows if r["kind"] == "plain attribute"]).set_index("name"))
    st.button("Run the demonstration (traces counted)", key="is_demo_setattr",
              on_click=run_demo, args=("attribute_vs_set_hyper",))
    results = st.session_state["is_demos"]
    if "attribute_vs_set_hyper" in results:
        st.dataframe(results["attribute_vs_set_hyper"], hide_index=True, width="stretch")
    with st.expander("more: variable attributes, and why `self.learning_rate = 0.1` is safe"):
        st.markdown(EXPLAIN_SET_HYPER)
    with st.expander("the same for `tf_keras.optimizers.legacy.Adam`, one learning-rate kind per row"):
        st.button("Try each kind on stock Keras Adam", key="is_demo_kinds", on_click=run_demo,
                  args=("hyper_kinds",))
        if "hyper_kinds" in results:
            st.dataframe(results["hyper_kinds"], hide_index=True, width="stretch")


def sources_view(ins) -> None:
    st.subheader("Source of each method (where it is defined)")
    for row in ins.sources().itertuples():
        label = (f"`{row.method}` — defined in `{row.defined_in}`" if row.overridden
                 else f"`{row.method}` — inherited from `{row.defined_in}` (not overridden)")
        if row.method == "SLOTS":  # the slot record `_create_slots` derives the add_slot calls from
            label = f"slot record `SLOTS` — declared in `{row.defined_in}` (names, shapes, dtypes)"
        with st.expander(label, expanded=False):
            st.caption(row.module)
            st.code(row.source, language="python")


def questions_view() -> None:
    from teaching import demos

    results = st.session_state["is_demos"]
    st.subheader("Classic questions, with live demonstrations")
    with st.expander("When `_set_hyper`, when a plain attribute (epsilon)"):
        st.markdown(EXPLAIN_EPSILON)
        st.button("Change epsilon after tracing, in both Adams", key="is_demo_epsilon",
                  on_click=run_demo, args=("epsilon_plain_vs_set_hyper",))
        if "epsilon_plain_vs_set_hyper" in results:
            st.dataframe(results["epsilon_plain_vs_set_hyper"], hide_index=True, width="stretch")
    with st.expander("What `_resource_apply_dense` receives"):
        st.markdown(EXPLAIN_ARGS)
    with st.expander("`resource_apply_dense` / `create_slots` in the docstring, underscores in the code"):
        st.markdown(EXPLAIN_NAMES)
        st.dataframe(demos.public_vs_underscore_names(), hide_index=True, width="stretch")
    with st.expander("Why `Lookahead` overrides `apply_gradients` and the others don't"):
        st.markdown(WHY_APPLY_GRADIENTS)


def page() -> None:
    load_plugins()
    init_state()
    st.title("Inside one step")
    lesson_panel.show("inside_step")  # may set is_optimizer / is_model: before the widgets
    st.caption("A tiny model with fixed weights and batch; each **Step** runs one eager, "
               "instrumented `optimizer.apply_gradients` and shows what every method produced.")
    choices = optimizer_choices()
    if st.session_state["is_optimizer"] not in choices:
        st.session_state["is_optimizer"] = choices[0]
    cols = st.columns([2, 2, 1, 1])
    cols[0].selectbox("optimizer", choices, key="is_optimizer")
    cols[1].radio("model", ["dense", "embedding"], key="is_model", horizontal=True,
                  help="dense: Dense 4->3 (dense gradients); embedding: 6x3 table (sparse gradients)")
    cols[2].button("Step", key="is_step", type="primary", on_click=on_step, width="stretch")
    cols[3].button("Reset", key="is_reset", on_click=on_reset, width="stretch")
    with st.expander("the update rule, as maths and as the pure rule's source"):
        rule_view.show(st.session_state["is_optimizer"].split(":")[0], key="is_rule")
    ins = inspector()
    if not ins.records:
        st.info("No step yet. `get_slot_names()` is `[]` and `_hyper` holds Python floats until the "
                "first `apply_gradients`; press **Step**.")
        st.dataframe(_hyper_now(ins), hide_index=True, width="stretch")
    else:
        record = ins.records[-1]
        record_view(ins, record)
    hyper_kinds_view()
    sources_view(ins)
    questions_view()


def _hyper_now(ins) -> pd.DataFrame:
    from teaching.inspect_step import hyper_table

    return hyper_table(ins.optimizer)
