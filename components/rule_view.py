"""The maths in view: an optimizer's update rule (`st.latex`) and the source of its pure rule.

Used wherever an optimizer is shown (Train sidebar, Slots view, Inside one step): the rendered
rule with its source and conventions (`teaching.rule_math`), and, folded, the source of the
pure functions its `coefficients` / `update` run (not only the adapter methods).
"""

from __future__ import annotations

import streamlit as st

from optimizers import registry, rule_source
from teaching import rule_math


@st.cache_data(show_spinner=False)
def _sources(name: str) -> dict[str, str]:
    # read from the source file: importing the class would import TensorFlow into the server
    return rule_source.pure_rule_sources(registry.entry(name).class_path)


def show(name: str, key: str, sources: bool = True) -> None:
    """Render optimizer `name`'s rule; `key` keeps widget ids unique per place on a page."""
    rule = rule_math.rule_for(name)
    if rule is None:
        st.caption(f"No rendered rule for `{name}` (a plugin): see its source below.")
    else:
        st.latex(rule.latex)
        st.caption(f"Source: {rule.source}." + (f" {rule.note}" if rule.note else ""))
    if not sources:
        return
    try:
        found = _sources(name)
    except KeyError:
        return
    if found:
        with st.expander("the pure rule's source (what `_resource_apply_*` and the "
                         "hyper-gradient engine run)", expanded=False):
            for qualified, text in found.items():
                st.caption(qualified)
                st.code(text, language="python")


__all__ = ["show"]
