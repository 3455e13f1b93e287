"""The Conventions page: one algorithm under the forms Keras, PyTorch and the papers use, run on
the same problem, their differences plotted over steps (`teaching.conventions`, NumPy only)."""

from __future__ import annotations

import streamlit as st

from components import lesson_panel
from components.convention_figures import conventions_figure
from teaching import conventions


@st.cache_data(show_spinner=False)
def compare(family: str, steps: int, lr: float, epsilon: float | None):
    return conventions.compare(family, steps=steps, lr=lr, epsilon=epsilon)


def twin_note(table, label: str) -> str:
    """" (same weights as X ...)" when another form's distance curve equals this one's (their
    runs agree to round-off, so one line hides the other), else ""."""
    mine = table[table["convention"] == label]["max_abs_difference"].to_numpy()
    for other in dict.fromkeys(table["convention"]):
        theirs = table[table["convention"] == other]["max_abs_difference"].to_numpy()
        if other != label and abs(mine - theirs).max() <= 1e-12 * max(mine.max(), 1e-300):
            return f" (the same weights as {other} to round-off: one line hides the other)"
    return ""


def page() -> None:
    st.title("Conventions compared")
    lesson_panel.show("conventions")
    st.markdown(
        "The same optimizer is written differently in Keras, PyTorch and the papers. Each form "
        "below is a NumPy reference (tested against the lab's TensorFlow optimizers), run on "
        "the same noisy ill-conditioned quadratic (8 weights, curvatures 0.01 to 10).")
    left, middle, right, last = st.columns([2, 1, 1, 1])
    family = left.selectbox("algorithm", list(conventions.FAMILIES), key="cv_family")
    steps = middle.number_input("steps", min_value=10, max_value=5000, value=400, step=50,
                                key="cv_steps")
    lr = right.number_input("learning rate", min_value=1e-5, max_value=1.0, value=0.01,
                            format="%.4g", key="cv_lr")
    epsilon = last.number_input(
        "epsilon", min_value=0.0, max_value=1.0, value=1e-7, format="%.1e", key="cv_epsilon",
        disabled=not conventions.takes_epsilon(family),
        help="where the forms put epsilon matters more when it is large (try 0.1)")
    table = compare(family, int(steps), float(lr),
                    float(epsilon) if conventions.takes_epsilon(family) else None)
    change = int(steps) // 2 if family.startswith("SGD") else None
    st.plotly_chart(conventions_figure(table, family, change), key="cv_chart", width="stretch",
                    config={"displaylogo": False})
    final = table[table["step"] == table["step"].max()].set_index("convention")
    for convention in conventions.FAMILIES[family]:
        with st.container(border=True):
            st.markdown(f"**{convention.label}** · {convention.source}")
            st.latex(convention.latex)
            row = final.loc[convention.label]
            same = twin_note(table, convention.label)
            st.caption(f"after {int(steps)} steps: loss {row['loss']:.4g}, max |w - w_first| "
                       f"{row['max_abs_difference']:.3g}{same}")
    if family.startswith("Schedule-free"):
        st.info("Why Keras 3.15 on TensorFlow differs: `momentum_old = momentum.value` is the "
                "variable itself, not a copy (`read_value()` would copy), so after "
                "`assign_sub(momentum, ...)` it reads the new z, x_old is rebuilt from it and "
                "y_new = (1 - 1/t) y + z_new / t: beta_1 cancels out. The same lesson as Keras "
                "2's `self.t_cur = 5` vs `_set_hyper`: whether a step holds a value or reads a "
                "variable decides what it sees. The lab's `ScheduleFreeAdamW` follows the "
                "paper; `keras3_tf_compat=True` reproduces Keras (tested to 1e-6).")
    with st.expander("epsilon: a live `_set_hyper` in the lab, a plain float in Keras 2"):
        st.markdown(
            "Keras 2's Adam keeps `epsilon` as a Python float (\"it's never needed as a tensor "
            "variable\"): the traced step bakes it in. The lab registers it with `_set_hyper`, "
            "so it can be moved during a run without a retrace and differentiated "
            "(d(val loss)/d(epsilon) on the Hyper-gradients page). The price is one more "
            "variable read per step; measured with `bench/bench_optimizers.py` (\"adam\" vs "
            "\"adam eps const\", the lab's Adam with epsilon baked in), step time over "
            "Keras's fused step:")
        cost = conventions.EPSILON_COST
        st.table({"mode": ["graph", "XLA", "XLA, any extra variable"],
                  "measured": [cost["graph"], cost["xla"], cost["per_variable"]]})
        st.caption(f"Commands: `{cost['command']}`; `{cost['per_variable_command']}`")
    if change is not None:
        st.info(f"The learning rate is halved at step {change}: until then the two forms are "
                "identical; afterwards Keras's buffer still carries the old learning rate, "
                "PyTorch's is rescaled at once.")
