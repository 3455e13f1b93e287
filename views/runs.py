"""The Runs page: every run of the store in one table; compare, rename, delete, export, import.

Thin on purpose: the table and the figures come from the pure builders of
`components.run_figures`, exports from `runs.io.export`, imports from `settings.config_file`,
new runs from `runs.service.control.start_run`. No TensorFlow maths here.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import streamlit as st

from components.page_store import store
from components.store_guard import guard_page
from components import lesson_panel
from components import links
from components import run_figures as rf
from components import run_continue
from components.charts import chart
from components import session_runs
from components import dynamics_panel
from components.figures import DISPLAY_POINTS
from settings.config_file import MAX_BYTES, ConfigImportError
from runs.service import ownership
from runs.io.export import BUNDLE_MAX_BYTES, parse_import
from runs.protocol import FINAL_STATUSES, LIVE_STATUSES

STATUSES = LIVE_STATUSES + FINAL_STATUSES
ORDER = ("id", "name", "optimizer", "learning_rate", "dataset", "model", "seed", "status", "step",
         "total_steps", "val_loss", "val_accuracy", "created", "hyperparameters", "device")
COLUMNS = {
    "id": st.column_config.NumberColumn("run", format="#%d", width="small"),
    "name": st.column_config.TextColumn("name"),
    "hyperparameters": st.column_config.TextColumn("key hyperparameters", width="medium"),
    "learning_rate": st.column_config.NumberColumn("lr", format="%.4g"),
    "step": st.column_config.NumberColumn("step"),
    "total_steps": st.column_config.NumberColumn("of"),
    "val_loss": st.column_config.NumberColumn("final val loss", format="%.4f"),
    "val_accuracy": st.column_config.NumberColumn("final val acc", format="%.3f"),
    "created": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
}


def init_state() -> None:
    """Every session-state entry of this page, with its default, in one place."""
    defaults: dict[str, Any] = {
        "compare_ids": [],  # runs overlaid in the charts
        "table_ids": [],  # ids of the table's rows as drawn (maps a row selection to runs)
        "runs_messages": [],  # (level, text) of the last rename / delete / import / export
        "export_result": None,  # (run id, zip path, logdir) of the last export
        "import_config": None,  # the RunConfig JSON of a validated upload
    }
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


# ----- callbacks -----------------------------------------------------------------------------
def on_table_select() -> None:
    """Rows picked in the table become the compared runs."""
    rows = st.session_state["runs_table"]["selection"]["rows"]
    ids = st.session_state["table_ids"]
    st.session_state["compare_ids"] = [ids[r] for r in rows if r < len(ids)]


def on_rename(run_id: int) -> None:
    from runs.service import control

    name = st.session_state.get(f"rename_{run_id}", "")
    try:
        control.rename(store(), run_id, name, caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        st.session_state["runs_messages"] = [("error", str(error))]
        return
    st.session_state["runs_messages"] = [("success", f"run #{run_id} renamed to {name!r}")]


def on_delete(run_id: int) -> None:
    from runs.service import control

    state = st.session_state
    try:
        control.delete(store(), run_id, caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        state["runs_messages"] = [("error", str(error))]
        return
    state["compare_ids"] = [i for i in state["compare_ids"] if i != run_id]
    state["runs_messages"] = [("success", f"run #{run_id} deleted")]


def on_stop(run_id: int) -> None:
    from runs.service import control

    try:
        control.stop(store(), run_id, caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        st.session_state["runs_messages"] = [("error", str(error))]
        return
    st.session_state["runs_messages"] = [("success", f"run #{run_id}: stop sent")]


def on_take_control(run_id: int) -> None:
    try:
        why = session_runs.adopt(run_id, store())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        st.session_state["runs_messages"] = [("error", str(error))]
        return
    st.session_state["runs_messages"] = [("success", f"run #{run_id} is now yours ({why}); the "
                                                     "takeover is recorded with the run")]


def on_export(run_id: int) -> None:
    from runs.io.export import export_run

    paths = export_run(store(), run_id, store().data_dir / "exports")
    st.session_state["export_result"] = (run_id, str(paths.zip), str(paths.logdir))


def on_import_start() -> None:
    from runs.service import control, pool
    from settings.run_config import RunConfig

    state = st.session_state
    config = RunConfig(**state["import_config"])
    name = state.get("import_name", "") or "imported"
    try:
        run_id = control.start_run(config, store(), name=name, caller=session_runs.caller(),
                                   on_tab_close=pool.tab_close_policy())
    except ValueError as error:
        state["runs_messages"] = [("error", f"the run could not start: {error}")]
        return
    state["compare_ids"] = [*state["compare_ids"], run_id]
    state["runs_messages"] = [("success", f"run #{run_id} started from the imported config; "
                                          "follow it live on the Train page")]


def on_import_run() -> None:
    """Store the uploaded exported run WITH its records (`runs.io.bundle_import`): a final run
    (`imported`) whose curves the Runs and Train pages draw like any run's."""
    from runs.io.bundle_import import read_run_bundle

    state = st.session_state
    upload = state.get("import_file")
    if upload is None:
        return
    try:
        bundle = read_run_bundle(upload.getvalue())
    except ConfigImportError as error:
        state["runs_messages"] = [("error", f"{upload.name}: {error}")]
        return
    document = bundle.document
    caller = session_runs.caller()
    run_id = store().import_run(
        bundle.config.to_json_dict(), bundle.tables,
        name=state.get("import_name", "") or str(document.get("name") or "imported"),
        owner=None if caller.local else caller.owner,
        message=(f"imported from {upload.name[:120]}: exported run #{document.get('run_id')} "
                 f"({document.get('status', '?')}), {bundle.rows:,} records"),
        details={"device": document.get("device", ""),
                 "versions": document.get("versions") or {},
                 "optimizer_config": (document.get("optimizer") or {}).get("config") or {}})
    state["compare_ids"] = [*state["compare_ids"], run_id]
    state["runs_messages"] = [("success", f"run #{run_id} imported with its {bundle.rows:,} "
                                          "records: its curves are in Compare (and on the "
                                          "Train page, view only)")]


def on_teacher_secret() -> None:
    ok = session_runs.set_teacher_secret(st.session_state.get("teacher_secret_input", ""))
    st.session_state["runs_messages"] = [
        ("success", "teacher role on: you may stop, rename and delete any run (each action is "
                    "recorded with the run)") if ok else
        ("error", "teacher secret refused: it does not match OPTIMIZER_LAB_TEACHER_SECRET")]


# ----- sections -------------------------------------------------------------------------------
def runs_table(table: pd.DataFrame) -> None:
    left, middle, right = st.columns([2, 1, 1])
    text = left.text_input("filter", key="runs_filter_text",
                           placeholder="name, optimizer, dataset, model or hyperparameter")
    statuses = middle.multiselect("status", STATUSES, key="runs_filter_status")
    optimizers = right.multiselect("optimizer", sorted(set(table["optimizer"])),
                                   key="runs_filter_optimizer")
    shown = rf.filter_table(table, text, statuses, optimizers)
    st.session_state["table_ids"] = [int(i) for i in shown["id"]]
    st.dataframe(shown, key="runs_table", on_select=on_table_select, selection_mode="multi-row",
                 hide_index=True, width="stretch", column_config=COLUMNS, column_order=ORDER)
    st.caption(f"{len(shown)} of {len(table)} runs · click a column header to sort · tick rows "
               "to compare them below")


def comparison(table: pd.DataFrame) -> None:
    ids = [int(i) for i in table["id"]]
    state = st.session_state
    state["compare_ids"] = [i for i in state["compare_ids"] if i in ids]
    st.multiselect("compare runs", ids, key="compare_ids",
                   format_func=lambda i: f"#{i} {table.loc[table['id'] == i, 'optimizer'].iloc[0]}")
    chosen = state["compare_ids"]
    if not chosen:
        st.info("Select runs in the table (or above) to overlay their curves.")
        return
    runs = {i: store().run(i) for i in chosen}
    labels = rf.run_labels(chosen, [runs[i]["config"] for i in chosen],
                           [runs[i]["name"] for i in chosen])
    differ = rf.legend_fields([runs[i]["config"] for i in chosen])
    changes = {i: store().hyper_changes(i) for i in chosen}
    steered = rf.trajectory_differences(changes)
    st.caption("Legend names what differs in the start configs: "
               + (", ".join(differ) if differ else "nothing (same config)")
               + " · changed differently while training: "
               + (", ".join(steered) if steered else "nothing")
               + (" (see the Hyperparameters tab)" if steered else ""))
    key = "-".join(map(str, chosen))
    scalars = {i: store().scalars(i, max_points=DISPLAY_POINTS) for i in chosen}
    tabs = st.tabs(["Loss", "Validation", "Hyperparameters", "Slots", "Hyper-gradients",
                    "Dynamics"])
    with tabs[0]:
        log_y = st.checkbox("log loss axis", key="runs_log_y")
        chart(rf.overlay_loss_figure(scalars, labels, uirevision=key, log_y=log_y), "runs_loss")
    with tabs[1]:
        chart(rf.overlay_validation_figure(scalars, labels, uirevision=key), "runs_val")
    with tabs[2]:
        steps = {i: runs[i]["step"] for i in chosen}
        chart(rf.overlay_hyper_figure(changes, steps, labels, uirevision=key), "runs_hypers")
        live = rf.live_changes_table(changes, labels)
        st.markdown("**Live changes** (made while the runs trained)")
        if live.empty:
            st.caption("none: every run kept its starting values")
        else:
            st.dataframe(live, hide_index=True, width="stretch", key="runs_live_changes")
    with tabs[3]:
        slots_section(chosen, labels, key)
    with tabs[4]:
        grads = {i: store().hypergradients(i) for i in chosen}
        if all(frame.empty for frame in grads.values()):
            st.info("No hyper-gradients recorded for these runs (the store has no "
                    "`hypergradients` rows for them).")
        else:
            chart(rf.overlay_hypergradient_figure(grads, labels, uirevision=key), "runs_hypergrads")
    with tabs[5]:
        dynamics_panel.compare_tab(store(), chosen, labels, key)


def slots_section(chosen: list[int], labels: dict[int, str], key: str) -> None:
    stats = {i: store().slot_stats(i, max_points=DISPLAY_POINTS) for i in chosen}
    pairs = list(dict.fromkeys(
        (v, s) for f in stats.values() if not f.empty for v, s in zip(f["variable"], f["slot"])))
    if not pairs:
        st.info("No slot statistics recorded for these runs yet.")
        return
    left, middle, right = st.columns(3)
    variable = left.selectbox("variable", list(dict.fromkeys(v for v, _ in pairs)),
                              key="runs_slot_variable")
    slots = [s for v, s in pairs if v == variable]
    slot = middle.selectbox("slot", slots, key="runs_slot_slot")
    statistic = right.selectbox("statistic", ("norm", "mean", "std"), key="runs_slot_stat")
    chart(rf.overlay_slot_figure(stats, variable, slot, labels, statistic, uirevision=key),
          "runs_slots")
    st.caption("Runs with other optimizers have other slots (Adam `m`, `v`; SGD `momentum`); "
               "`update` is the effective step every optimizer has.")


def manage(table: pd.DataFrame) -> None:
    state = st.session_state
    ids = [int(i) for i in table["id"]]
    default = state["compare_ids"][-1] if state["compare_ids"] else ids[0]
    if state.get("manage_run") not in ids:
        state["manage_run"] = default
    def label(i: int) -> str:
        row = table.loc[table["id"] == i].iloc[0]
        return f"#{i} {row['optimizer']} on {row['dataset']}/{row['model']} {row['name']}".strip()

    run_id = st.selectbox("run", ids, key="manage_run", format_func=label)
    run = store().run(run_id)
    caller = session_runs.caller()
    mine = session_runs.owns(run)
    allowed = mine or caller.is_teacher
    if mine:
        st.caption(f"Run #{run_id} is yours: you may rename and delete it.")
    elif caller.is_teacher:
        st.caption(f"Run #{run_id} belongs to another session; as a teacher you may rename and "
                   "delete it (recorded with the run).")
    else:
        st.caption(f"Run #{run_id} is view only: only the browser session that started it may "
                   "rename or delete it.")
        if ownership.may_take_control(run, caller):
            st.button("Take control", key=f"runs_adopt_{run_id}", on_click=on_take_control,
                      args=(run_id,), help="nobody answers for this run (no owner, or its owner's "
                      "browser has been gone for long); the takeover is recorded with the run")
    run_continue.show(run, mine)  # Continue an ended run from its last checkpoint
    left, middle, right = st.columns(3)
    with left:
        st.markdown("**Rename**")
        state.setdefault(f"rename_{run_id}", run["name"])
        st.text_input("name", key=f"rename_{run_id}", max_chars=120, disabled=not allowed)
        st.button("Rename", key=f"rename_button_{run_id}", on_click=on_rename, args=(run_id,),
                  disabled=not allowed)
    with middle:
        st.markdown("**Delete**")
        active = run["status"] in LIVE_STATUSES
        sure = st.checkbox("yes, delete this run and all its records", key=f"confirm_{run_id}",
                           disabled=active or not allowed)
        st.button("Delete", key=f"delete_{run_id}", on_click=on_delete, args=(run_id,),
                  disabled=active or not sure or not allowed,
                  help="stop an active run first" if active else None)
        if active and allowed:
            st.button("Stop", key=f"runs_stop_{run_id}", on_click=on_stop, args=(run_id,))
    with right:
        st.markdown("**Export**")
        result = state["export_result"]
        st.button("Export (config, CSV/Parquet, TensorBoard)", key=f"export_{run_id}",
                  on_click=on_export, args=(run_id,))
        result = state["export_result"]
        if result and result[0] == run_id:
            with open(result[1], "rb") as handle:
                st.download_button("Download zip", handle.read(), file_name=f"run-{run_id}.zip",
                                   mime="application/zip", key=f"download_zip_{run_id}")
    if result and result[0] == run_id:
        exports = str(store().data_dir / "exports")
        st.caption(f"Exported run #{run_id}: config JSON, metrics as CSV and Parquet, TensorBoard "
                   f"events in `{result[2]}`. Open every exported run in TensorBoard with:")
        st.code(f"tensorboard --logdir {exports}", language="bash")


def upload_limit(name: str) -> int:
    """Bytes an upload named `name` may hold: an exported run zip, else a config JSON."""
    return BUNDLE_MAX_BYTES if name.lower().endswith(".zip") else MAX_BYTES


def import_section() -> None:
    state = st.session_state
    # the widget's limit is the browser's (and `server.maxUploadSize` the server's, in
    # .streamlit/config.toml); `upload_limit` below is ours, checked before anything is parsed
    upload = st.file_uploader("config JSON (an export, a RunConfig or a Keras "
                              "`{class_name, config}`) or an exported run zip",
                              type=["json", "zip"], key="import_file",
                              max_upload_size=BUNDLE_MAX_BYTES // 2**20,
                              help=f"a config JSON of at most {MAX_BYTES // 1024} KiB or a run zip "
                                   f"of at most {BUNDLE_MAX_BYTES // 2**20} MiB; only registered "
                                   "optimizer names are accepted, nothing in the file is executed")
    st.caption(f"Config files are limited to {MAX_BYTES // 1024} KiB, exported run zips to "
               f"{BUNDLE_MAX_BYTES // 2**20} MiB.")
    if upload is None:
        state["import_config"] = None
        return
    try:
        limit = upload_limit(upload.name)
        if upload.size > limit:
            raise ConfigImportError("", f"file refused: {upload.size:,} bytes, this kind of file "
                                        f"may hold at most {limit:,} bytes")
        config = parse_import(upload.getvalue())
    except ConfigImportError as error:
        state["import_config"] = None
        st.error(f"{upload.name}: {error}")
        return
    state["import_config"] = config.to_json_dict()
    st.json(state["import_config"], expanded=False)
    st.text_input("run name", key="import_name", max_chars=120,
                  value=upload.name.removesuffix(".json").removesuffix(".zip")[:120])
    if upload.name.lower().endswith(".zip"):  # an exported run: its records can come too
        left, right = st.columns(2)
        left.button("Import this run with its curves", key="import_run", type="primary",
                    on_click=on_import_run,
                    help="the run as it was exported: every recorded table (losses, "
                         "slots, histograms, hyperparameter changes, hyper-gradients); "
                         "nothing trains it")
        right.button("Re-run this config", key="import_start", on_click=on_import_start,
                     help="a new run trained from the same config")
    else:
        st.button("Start a run with this config", key="import_start", type="primary",
                  on_click=on_import_start)


@guard_page  # a read-only or full data directory: one line, not a traceback
def page() -> None:
    init_state()
    st.title("Optimizer Lab · Runs")
    lesson_panel.show("runs")
    for level, text in st.session_state["runs_messages"]:
        getattr(st, level)(text)
    table = rf.overview_table(store().runs(), store().last_scalars())
    if table.empty:
        st.info("No run in the store yet: train one on the Train page, from the command line "
                "(`optimizer-lab train ...`) or import a config below.")
        links.page_link("train", label="Train a first run (Adam on the digits)",
                        icon=":material/play_arrow:")
    else:
        runs_table(table)
        st.subheader("Compare")
        comparison(table)
        st.subheader("Manage and export")
        manage(table)
    st.subheader("Import a config or an exported run")
    import_section()
    teacher_section()


def teacher_section() -> None:
    """The teacher secret input, shown only when `OPTIMIZER_LAB_TEACHER_SECRET` is set."""
    if not os.environ.get(ownership.TEACHER_SECRET_ENV):
        return
    with st.expander("Teacher"):
        st.text_input("teacher secret", type="password", key="teacher_secret_input",
                      on_change=on_teacher_secret,
                      help="the OPTIMIZER_LAB_TEACHER_SECRET of this server: lets this session "
                           "stop, rename and delete any run; every such action is recorded")
