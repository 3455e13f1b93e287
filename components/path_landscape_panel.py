"""The Landscape page's "along a run's path" view (Li et al. 2018, arXiv:1712.09913; Goodfellow
et al. 2015, arXiv:1412.6544): one run, or 2-4 runs that started from the same weights, on the
loss slice through theta_0 along two filter-normalised random directions fixed by the run's
`path_landscape` seed, with the start->end lines. Everything is read from the store: the run
processes compute and record it (`engine.path_landscape`, `runs.process.landscape_hook`); the
grid is the first complete one of a run with the same plane (`runs.store.landscape_cache`).

Shown here rather than in the Runs page's comparison: it needs its own choice (which runs share
a plane) and its own figures (a contour with paths, the lines), and the Landscape page is where
the lab teaches loss surfaces.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from components.charts import chart
from components.diagnostic_figures import landscape_figure, line_figure, path_zoom_figure
from engine import diagnostic_costs
from runs.protocol import LIVE_STATUSES
from runs.store import landscape_cache
from runs.store.run_store import RunStore

MAX_COMPARED = 4
HOW_TO = ("Start a run with **path landscape seed** > 0 in the Train page's Setup (or "
          "`optimizer-lab train --path-landscape 7`): its process projects the weights onto "
          "the plane as it trains and fills the grid in the background. Runs with the same "
          "model, data, seed and landscape seed share the plane: start a second optimizer with "
          "the same settings to compare.")


def _label(run: dict[str, Any]) -> str:
    return f"#{run['id']} {run['config']['optimizer']} ({run['status']}, step {run['step']})"


def cost_meter() -> None:
    """The measured costs (`bench/bench_lr_range.py`) beside the plain train step."""
    costs = diagnostic_costs.MEASURED
    cols = st.columns(3)
    cols[0].metric("path point, per step", f"{costs['path_per_step_ratio']:.3f}× a train step",
                   help="one projection + one loss every 20 steps of a 10,000-step run; "
                        + diagnostic_costs.SOURCE)
    cols[1].metric("grid row (21 losses)", f"{costs['grid_row_ratio']:.1f}× a train step",
                   help="one row per step over the run's first 21 steps; "
                        + diagnostic_costs.SOURCE)
    cols[2].metric("start->end line (25 losses)", f"{costs['line_ratio']:.1f}× a train step",
                   help="at each quarter of the run; " + diagnostic_costs.SOURCE)


def _candidates(store: RunStore) -> list[dict[str, Any]]:
    """The runs (newest first) whose config asks for the landscape along the path."""
    table = store.runs()
    wanted = table["config"].map(lambda text: bool(json.loads(text).get("path_landscape")))
    return [store.run(int(run_id)) for run_id in table.loc[wanted, "id"]]


def _view(store: RunStore, run_ids: list[int]) -> None:
    runs = [store.run(i) for i in run_ids]
    first = runs[0]
    source = landscape_cache.grid_source(store, first["config"])
    grid = store.landscape(source if source is not None else first["id"], "grid")
    if len(grid) < landscape_cache.GRID_CELLS:
        st.progress(len(grid) / landscape_cache.GRID_CELLS,
                    text=f"grid: {len(grid)} of {landscape_cache.GRID_CELLS} losses computed by "
                         f"run #{first['id']}'s process")
    else:
        st.caption(f"grid of {len(grid)} losses read from the store (computed by run "
                   f"#{source}'s process; every run with this plane shares it)")
    paths = {_label(r): store.landscape(r["id"], "path") for r in runs}
    chart(landscape_figure(grid, paths, title=f"loss on the plane through θ₀ (seed "
                           f"{first['config']['path_landscape']})"), key="pl_contour")
    left, right = st.columns(2)
    with left:
        chart(path_zoom_figure(paths), key="pl_zoom")
    lines, notes = {}, []
    for run in runs:
        line = store.landscape(run["id"], "line")
        distance = store.landscape(run["id"], "distance")
        if not line.empty:
            last = int(line["step"].max())
            lines[f"{_label(run)} → step {last}"] = line[line["step"] == last]
        if not distance.empty:
            row = distance.iloc[-1]
            notes.append(f"#{run['id']}: ‖θ − θ₀‖ = **{row['x']:.3g}** at step {int(row['step'])},"
                         f" of which the plane shows **{100 * row['y']:.1f}%**")
    with right:
        if lines:
            chart(line_figure(lines), key="pl_lines")
        else:
            st.info("The start->end line is computed at each quarter of the run.")
    if notes:
        st.markdown("  \n".join(notes))
    st.caption("Random directions in tens of thousands of dimensions are nearly orthogonal to "
               "the path: the projection shows only a small share of the distance travelled "
               "(Li et al. 2018, §7). The plane is the same for every optimizer compared, which "
               "is why it is not the path's own PCA plane; the line shows the rest of the story.")


def section(store: RunStore) -> None:
    """Choose one run with `path_landscape` and up to 3 runs sharing its plane; draw them."""
    st.caption("Li et al. (2018): a 2-D slice of the loss through the initial weights θ₀ along "
               "two filter-normalised random directions; Goodfellow et al. (2015): the loss on "
               "the straight line from θ₀ to where the run ended.")
    cost_meter()
    candidates = _candidates(store)
    if not candidates:
        st.info(HOW_TO)
        return
    by_id = {r["id"]: r for r in candidates}
    first = st.selectbox("run", list(by_id), format_func=lambda i: _label(by_id[i]),
                         key="pl_run")
    key = landscape_cache.landscape_key(by_id[first]["config"])
    same = [i for i in by_id if i != first
            and landscape_cache.landscape_key(by_id[i]["config"]) == key]
    others = st.multiselect("compare with runs from the same start (same plane)", same,
                            format_func=lambda i: _label(by_id[i]), key="pl_others",
                            max_selections=MAX_COMPARED - 1)
    ids = [first] + [i for i in others if i in same]
    if not same:
        st.caption(HOW_TO)
    live = any(by_id[i]["status"] in LIVE_STATUSES for i in ids)

    @st.fragment(run_every=2.0 if live else None)
    def refresh() -> None:
        _view(store, ids)

    refresh()
