"""Bring your own optimizer: the plugins found at start and their contract reports.

Thin: `optimizers.plugins.discover_bounded` (cached by `components.plugin_loader`) checks each
file in a time-limited child process and registers what passed from the child's data; this page
only shows the reports. No code is ever accepted from the browser, and none is imported here.
"""

from __future__ import annotations

import streamlit as st

from components import lesson_panel
from components.plugin_loader import load_plugins
from optimizer_plugins import contract, plugin_discovery as plugins
from optimizers import registry

HOW_TO = """
**Start from the template**: copy `plugins/template_optimizer.py` (SGD with gradient
accumulation, every contract method commented) to a new file in the plugins folder, rename its
class and `REGISTRY_NAME`, change `coefficients` and `update`, restart the app, and read its
report below. The command line finds it too: `optimizer-lab train --optimizer NAME`.

Write an `OptimizerV2` subclass (best: a `RuleOptimizer` with a pure `coefficients` / `update`)
in a `.py` file and put it in the plugins folder: `./plugins` by default,
`OPTIMIZER_LAB_PLUGINS=/path` in the environment, or `streamlit run app.py -- --plugins /path`.
The app checks each file on its own when the server starts, in a separate process with
a time limit (`OPTIMIZER_LAB_PLUGIN_TIMEOUT_S`, 10 s by default), so a file that hangs is
reported here and never loaded; a file that fails to import is reported here and the others
still load. A `RuleOptimizer` that passes every item below joins
every page's optimizer list under its `REGISTRY_NAME` (default: the class name in lower case).
"""


def badge(passed: bool) -> None:
    st.badge("pass" if passed else "fail", icon=":material/check:" if passed else ":material/close:",
             color="green" if passed else "red")


def class_report(entry, key: str) -> None:
    st.markdown(f"#### `{entry.name}` · registry name `{entry.registry_name}`")
    (st.success if entry.registered else st.warning)(entry.note)
    header = st.columns([3, 1, 7])
    header[0].markdown("**item**")
    header[1].markdown("**result**")
    header[2].markdown("**detail**")
    for check in entry.checks:
        row = st.columns([3, 1, 7])
        row[0].markdown(f"{check.title}  \n`{check.item}`")
        with row[1]:
            badge(check.passed)
        row[2].caption(check.detail)
    passed = sum(c.passed for c in entry.checks)
    st.caption(f"{passed}/{len(entry.checks)} items pass")


def page() -> None:
    directory, reports = load_plugins()
    st.title("Bring your own optimizer")
    lesson_panel.show("plugins")
    st.markdown(HOW_TO)
    st.caption(f"plugins folder: `{directory}` · {len(reports)} file(s) · optimizer lists now: "
               f"{', '.join(registry.names())}")
    with st.expander("What the contract check tests"):
        st.code(contract.__doc__.split("Items:", 1)[-1].strip("\n"), language="text")
    problem = plugins.folder_problem(directory)
    if problem:  # a mistyped --plugins / OPTIMIZER_LAB_PLUGINS: say so, the app runs on
        st.warning(problem)
    elif not reports:
        st.info("No plugin file found in the folder.")
    for i, report in enumerate(reports):
        st.subheader(report.path.rsplit("/", 1)[-1])
        if report.error is not None:  # the other plugins and the app go on without this one
            st.error(f"import of {report.path.rsplit('/', 1)[-1]} failed: {report.summary}")
            with st.expander("traceback"):
                st.code(report.error, language="text")
            continue
        if not report.classes:
            st.info("imported, but it defines no OptimizerV2 subclass")
        for j, entry in enumerate(report.classes):
            class_report(entry, f"pl_{i}_{j}")
