"""The Train page: set up a run, start it, watch it live and change its hyperparameters live.

Thin on purpose: no TensorFlow maths here. The sidebar builds a `RunConfig`; `runs.control`
starts the run process; the live area re-reads the run store every 0.5 s (`st.fragment`) and
draws it with the pure builders of `components.figures`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pydantic
import streamlit as st

from settings import fields, share_link
from components.store_guard import guard_page
from components import lesson_panel
from components import run_controls, run_panels, setup_state
from components import rule_view
from components import device_list, plugin_loader, session_runs
from components import figures
from components.hyper_widgets import (hyper_widgets, invalid_hypers, option_widgets,
                                      schedule_widgets, slider_bounds)
from optimizers import registry, schedule_curves, schedule_specs
from optimizers.hyperparams import InvalidHyperparameter
from settings.run_config import COMPATIBLE_MODELS, RunConfig
from runs.store import ACTIVE_STATUSES, LIVE_STATUSES, QUEUED, RunStore, default_store_path

REFRESH_S = 0.5


# ----- state and cached resources --------------------------------------------------------------
def init_state() -> None:
    """Every session-state entry of this page, with its default, in one place."""
    defaults: dict[str, Any] = {
        "run_id": None,  # the run this session started last
        "start_errors": [],  # messages of a refused Start
        "live_messages": [],  # (level, text) of the last live hyperparameter change
        "control_messages": [],  # (level, text) of the last Pause/Resume/Step/Stop/speed
        "start_speed": run_controls.START_SPEED,  # the pace a run starts at (steps/s)
        # the Setup: one key per RunConfig field, generated from the settings table
        **fields.session_defaults(),
    }
    setup_state.restore()  # the Setup as it was when this session last drew it
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    st.session_state.setdefault(
        "continuous", st.session_state["steps"] >= run_controls.continuous_steps())
    if not st.session_state.get("shared_link_read"):  # once per session: a shared link's setup
        st.session_state["shared_link_read"] = True
        load_shared_link()


def load_shared_link() -> None:
    """Fill the Setup widgets from the URL's setup (`settings.share_link`), if it has one."""
    try:
        config = share_link.from_query_params(st.query_params.to_dict())
    except share_link.QueryParamsError as error:
        st.session_state["start_errors"] = [f"shared link ignored: {error}"]
        return
    if config is not None:
        apply_config(config)


def apply_config(config: RunConfig) -> None:
    """Set the Setup widgets to `config` (a shared link, a lesson): before they are drawn."""
    values = fields.session_values(config)
    prefix = hyper_prefix(config.optimizer, config.options)
    for spec in registry.specs(config.optimizer, config.options):
        bounds = slider_bounds(spec)  # a slider refuses a value outside its own bounds
        if bounds is not None:
            values[prefix + spec.name] = min(max(values[prefix + spec.name], bounds[0]), bounds[1])
    values["continuous"] = config.steps >= run_controls.continuous_steps()
    st.session_state.update(values)


def share_setup() -> None:
    """Keep the Setup in the URL (`st.query_params`) so that a link reproduces it."""
    try:
        params = share_link.to_query_params(setup_config())
    except (pydantic.ValidationError, InvalidHyperparameter, KeyError, ValueError):
        return  # an invalid setup keeps the last valid link
    if "lesson" in st.query_params:  # an open lesson stays in the link (not a setup key)
        params["lesson"] = st.query_params["lesson"]
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    st.session_state["share_url"] = setup_state.page_url(params)


@st.cache_resource(show_spinner=False)
def _store(path: str) -> RunStore:
    return RunStore(path)


def store() -> RunStore:
    """The run store of `$OPTIMIZER_LAB_HOME` (read per call, so tests can point it elsewhere)."""
    return _store(str(default_store_path()))


def device_names() -> tuple[list[str], bool]:
    """(logical device names, final): listed by a child process (`components.device_list`),
    so the server never imports TensorFlow; the CPU alone (final False) until it answers."""
    found = device_list.device_names()
    return list(found.names), found.final


@st.cache_data(show_spinner=False)
def specs_of(optimizer: str, options_json: str):
    return registry.specs(optimizer, json.loads(options_json))


def run_specs(run: dict[str, Any]):
    config = run["config"]
    try:
        return specs_of(config["optimizer"], json.dumps(config.get("options", {}), sort_keys=True))
    except (KeyError, ValueError):
        return ()


def selected_run() -> dict[str, Any] | None:
    run_id = st.session_state.get("run_select")
    if run_id is None:
        return None
    try:
        return store().run(int(run_id))
    except KeyError:
        return None


# ----- callbacks -----------------------------------------------------------------------------
def setup_config() -> RunConfig:
    """A `RunConfig` from the Setup widgets, every field read through the settings table
    (`settings.fields.config_from_session`).

    Raises:
        pydantic.ValidationError: a value `RunConfig` refuses. KeyError, ValueError: unknown
            optimizer or options.
    """
    return fields.config_from_session(st.session_state)


def on_start() -> None:
    from runs import control

    state = st.session_state
    state["start_errors"] = []
    try:
        config = setup_config()
    except pydantic.ValidationError as error:
        state["start_errors"] = [
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in error.errors()
        ]
        return
    except (InvalidHyperparameter, KeyError, ValueError) as error:
        state["start_errors"] = [str(error)]
        return
    try:
        run_id = control.start_run(config, store(), on_tab_close=control.tab_close_policy(),
                                   caller=session_runs.caller(),
                                   steps_per_second=state["start_speed"])
    except Exception as error:  # the engine refused: show why, keep the page alive
        state["start_errors"] = [f"the run could not start: {error}"]
        return
    state["run_id"] = state["run_select"] = run_id
    state["live_messages"] = state["control_messages"] = []


def live_run_to_steer(name: str) -> dict[str, Any] | None:
    """The selected run when it is live and this session's (a change of `name` is sent to it);
    None otherwise, saying so when the run is another session's."""
    run = selected_run()
    if run is None or run["status"] not in ACTIVE_STATUSES:
        return None
    if not session_runs.owns(run):
        st.session_state["live_messages"] = [
            ("info", f"{name} not sent: run #{run['id']} belongs to another browser session "
                     "(view only)")]
        return None
    return run


def on_hyper_change(name: str) -> None:
    """A Setup hyperparameter widget moved: send it to the selected run when that run is live."""
    state = st.session_state
    run = live_run_to_steer(name)
    if run is None:
        return
    optimizer = state["optimizer"]
    options = {k: state[f"opt_{optimizer}_{k}"] for k in registry.option_defaults(optimizer)}
    value = float(state[f"{hyper_prefix(optimizer, options)}{name}"])
    if run["config"]["optimizer"] != optimizer or name not in {s.name for s in run_specs(run)}:
        state["live_messages"] = [("info", f"{name} not sent: run #{run['id']} uses "
                                           f"{run['config']['optimizer']}, the setup {optimizer}")]
        return
    from runs import control

    try:
        command = control.set_hyper(store(), run["id"], name, value, source="user",
                                    caller=session_runs.caller())
    except control.NotOwner as error:
        state["live_messages"] = [("info", f"{name} not sent: {error}")]
        return
    except InvalidHyperparameter as error:
        current = (run["optimizer_config"] or {}).get(name)
        keeps = f"; it goes on with {name} = {current:.6g}" if isinstance(current, float) else ""
        state["live_messages"] = [("error", f"not sent to run #{run['id']}{keeps}: {error}")]
        return
    state["live_messages"] = [
        ("success", f"{name} = {value:.6g} sent to run #{run['id']} (command {command})")
    ]


def on_schedule_change(name: str) -> None:
    """The schedule picker, a schedule parameter or `decay` moved: send it to the selected run
    when that run is live and this session's, saying which kind of change it is."""
    state = st.session_state
    run = live_run_to_steer(name)
    if run is None:
        return
    current, current_decay = run_controls.run_schedule(run)
    now = None
    try:
        if name == "decay":
            value: Any = float(state[fields.session_key("decay")])
            kind = "retrace" if value != current_decay else "none"
        else:
            value = schedule_specs.validate_schedule(
                "lr_schedule", fields.schedule_from_session(state))
            now = schedule_specs.validate_schedule("lr_schedule", current)
            same = schedule_specs.structure(value) == schedule_specs.structure(now)
            kind = ("none" if value == now else "assign" if same else "retrace")
    except (schedule_specs.ScheduleError, ValueError) as error:
        state["live_messages"] = [("error", f"not sent to run #{run['id']}: {error}")]
        return
    if kind == "none":
        return
    from runs import control

    try:
        command = control.set_hyper(store(), run["id"], name, value, source="user",
                                    caller=session_runs.caller())
    except (control.NotOwner, ValueError) as error:
        state["live_messages"] = [("error", f"{name} not sent: {error}")]
        return
    if isinstance(value, dict) and kind == "assign":
        before = now["config"] if now else {}
        shown = value["class_name"] + " (" + ", ".join(
            f"{k}: {before.get(k)} -> {v}" for k, v in value["config"].items()
            if before.get(k) != v) + ")"
    else:
        shown = value["class_name"] if isinstance(value, dict) else (
            "constant" if value is None else f"{value:g}")
    state["live_messages"] = [("success" if kind == "assign" else "warning", (
        f"{name} = {shown} sent to run #{run['id']} (command {command}): "
        + ("new numbers of the same schedule: tf.Variable assigns, in effect at the next step, "
           "no retrace" if kind == "assign" else
           "a different kind of change (a new schedule object, or decay, a plain attribute "
           "the trace baked in): the step function is rebuilt between two steps, costing one "
           "retrace (see `step traces` in the changes table)")))]


def schedule_section(specs, values: dict[str, float]) -> str | None:
    """The Setup's learning-rate schedule: picker, parameters, decay and a NumPy preview of the
    rate over the run's steps with the regime changes marked; returns the refusal, if any."""
    st.subheader("Learning-rate schedule")
    schedule, error = schedule_widgets(on_change=on_schedule_change)
    if error or not any(s.name == "learning_rate" for s in specs):
        return error
    total = int(st.session_state[fields.session_key("steps")])
    decay = float(st.session_state[fields.session_key("decay")])
    if schedule is None and decay == 0:
        return None
    total = min(total, 100_000) if st.session_state.get("continuous") else total
    preview = schedule_curves.preview_points(schedule, total, values.get("learning_rate", 0.01),
                                            decay)
    marks = schedule_curves.schedule_marks(schedule, total)
    st.plotly_chart(figures.learning_rate_figure(preview, marks=marks, uirevision="preview",
                                                 height=200),
                    key="lr_preview", width="stretch", config={"displaylogo": False})
    return None


# ----- sidebar ---------------------------------------------------------------------------------
# The Start button's state as the last full run drew it (None while a full run draws the Setup).
SETUP_OK_DRAWN = "_setup_ok_drawn"


@st.fragment
def hyperparameter_section(optimizer: str, options: dict[str, Any], specs) -> bool:
    """The hyperparameter widgets, the schedule section and the live-change messages, as a
    fragment: moving a value reruns only this block, so its callback sends the change to a live
    run at once (a full-page rerun waited for the running live area first) and the message
    shows at once. The link and the remembered Setup follow here; the rest of the page is
    redrawn only when the Setup's validity flips (the Start button's state).

    Returns:
        True when every value is allowed (Start may be pressed).
    """
    state = st.session_state
    values = hyper_widgets(specs, hyper_prefix(optimizer, options), on_change=on_hyper_change)
    schedule_error = schedule_section(specs, values)
    for level, text in state["live_messages"]:
        getattr(st, level)(text)
    ok = bool(specs) and not invalid_hypers(specs, values) and not schedule_error
    drawn = state.get(SETUP_OK_DRAWN)
    if drawn is not None:  # a rerun of this fragment alone
        share_setup()
        setup_state.remember()
        if drawn != ok:
            st.rerun(scope="app")  # Start's state changes with it
    return ok


def hyper_prefix(optimizer: str, options: dict[str, Any]) -> str:
    """Key prefix of the hyperparameter widgets (`settings.fields.hyper_prefix`)."""
    return fields.hyper_prefix(optimizer, options)


def sidebar(live_run: dict[str, Any] | None) -> None:
    state = st.session_state
    with st.sidebar:
        st.header("Setup")
        names = registry.names()
        if state["optimizer"] not in names:
            state["optimizer"] = names[0]
        optimizer = st.selectbox("optimizer", names, key="optimizer",
                                 help=fields.help_text("optimizer"))
        if plugin_loader.check_running() or not device_list.device_names().final:
            background_note()
        options = option_widgets(registry.option_defaults(optimizer),
                                 fields.option_prefix(optimizer),
                                 optimizer_names=names, exclude=optimizer)
        try:
            specs = registry.specs(optimizer, options)
        except (KeyError, ValueError) as error:
            st.error(str(error))
            specs = ()
        st.subheader("Hyperparameters")
        if live_run is not None and live_run["config"]["optimizer"] == optimizer:
            st.caption(f"Run #{live_run['id']} is active: moving a value changes it live "
                       "(`_set_hyper` assigns the tf.Variable, no retrace).")
        state[SETUP_OK_DRAWN] = None  # a full run: the fragment below does not rerun the app
        setup_ok = hyperparameter_section(optimizer, options, specs)
        state[SETUP_OK_DRAWN] = setup_ok
        with st.expander(f"{optimizer}: the update rule"):
            rule_view.show(optimizer, key="train_rule")
        st.subheader("Data and run")
        st.selectbox("dataset", fields.choices("dataset"), key="dataset",
                     help=fields.help_text("dataset"))
        models = COMPATIBLE_MODELS[state["dataset"]]
        if state["model"] not in models:
            state["model"] = "mlp" if "mlp" in models else models[0]
        st.selectbox("model", models, key="model", help=fields.help_text("model"))
        st.number_input(**fields.number_input_args("label_noise"))
        st.checkbox("continuous (no step limit)", key="continuous",
                    on_change=setup_state.on_continuous,
                    help=f"steps = {run_controls.continuous_steps():,} (the most allowed); set "
                         "the pace with the speed control beside Pause/Stop")
        left, right = st.columns(2)
        for index, field in enumerate(fields.int_fields("run")):  # batch size, steps, ...
            args = fields.number_input_args(field)
            (left, right)[index % 2].number_input(
                **args, disabled=field == "steps" and state["continuous"])
        st.select_slider("pace of a new run", run_controls.SPEEDS, key="start_speed",
                         format_func=run_controls.speed_label,
                         help="the pace a run starts at; change it while it trains with the "
                              "speed control beside Pause/Stop (full speed: as fast as the "
                              "machine trains)")
        st.selectbox("dtype", fields.choices("dtype"), key=fields.session_key("dtype"),
                     help=fields.help_text("dtype"))
        st.selectbox(fields.label("compiler"), fields.choices("compiler"),
                     key=fields.session_key("compiler"), help=fields.help_text("compiler"))
        names, final = device_names()
        devices = ["auto"] + names
        if state["device"] not in devices and not final:  # judged once the list is known
            devices.append(state["device"])
        if state["device"] not in devices:  # e.g. a shared link from a machine with a GPU
            canonical = "/device:" + state["device"].removeprefix("/device:").lstrip("/")
            if canonical not in devices:
                state["start_errors"] = [f"device={state['device']!r} is not on this machine "
                                         f"(devices: {', '.join(devices)}); using auto"]
            state["device"] = canonical if canonical in devices else "auto"
        st.selectbox("device", devices, key="device", help=fields.help_text("device"))
        hypergradient_widgets(optimizer, specs)
        st.button("Start", key="start", type="primary", on_click=on_start,
                  width="stretch", disabled=not setup_ok)
        for message in state["start_errors"]:
            st.error(message)


def hypergradient_widgets(optimizer: str, specs) -> None:
    """The Setup's "Hyper-gradients" expander (watched on the Hyper-gradients page)."""
    with st.expander("Hyper-gradients"):
        st.checkbox("follow hyper-gradients", key="hg_follow",
                    help="train through forward mode and record dE_val/dλ (exact and one-step)")
        names = [s.name for s in specs]
        key = fields.names_key(optimizer)
        if key not in st.session_state or not set(st.session_state[key]) <= set(names):
            st.session_state[key] = names  # through state, not `default=`: a link may set it
        st.multiselect("hyperparameters", names, key=key,
                       disabled=not st.session_state["hg_follow"])
        left, right = st.columns(2)
        for index, field in enumerate(fields.int_fields("hypergradients")):
            (left, right)[index % 2].number_input(**fields.number_input_args(field))
        tuned = {name: eta for name, eta in st.session_state.get(
            fields.session_key("autotune"), {}).items() if name in st.session_state[key]}
        if tuned and st.session_state["hg_follow"]:  # set by a shared link, not by a widget
            st.caption("auto-tuned from the start (shared link): " + ", ".join(
                f"{name} (η = {eta:g})" for name, eta in tuned.items()))


# ----- live area ------------------------------------------------------------------------------
def run_label(runs_table: pd.DataFrame, run_id: int) -> str:
    row = runs_table.loc[runs_table["id"] == run_id]
    if row.empty:
        return f"#{run_id}"
    r = row.iloc[0]
    # No live status here: the selector is outside the refreshing fragment, so a status in
    # the label would go stale while the run trains (the status line below is live).
    return f"#{run_id} {r['optimizer']} on {r['dataset']}/{r['model']}, {r['total_steps']} steps"


@guard_page
def live_body(run_id: int, was_active: bool) -> None:
    try:
        run = store().run(run_id)
    except KeyError:
        st.warning(f"run #{run_id} is no longer in the store")
        return
    active = run["status"] in LIVE_STATUSES
    if was_active and not active:
        st.rerun(scope="app")  # once: redraw the whole page (selector labels, static mode)
    scalars = store().scalars(run_id, max_points=run_panels.DISPLAY_POINTS)
    # One container for everything above the charts: the number of messages varies from one
    # refresh to the next, and a chart whose position among its siblings shifts is remounted
    # by the browser (drawn from scratch: blank for a moment). Inside a container the shift
    # stays inside it, and the charts below keep their element identity.
    with st.container():
        st.markdown(run_controls.status_line(store(), run, scalars))
        if run["total_steps"] < run_controls.continuous_steps():
            st.progress(min(run["step"] / max(run["total_steps"], 1), 1.0))
        # a fixed slot, filled or not: the buttons below keep their position when a message
        # comes or goes (Pause, Resume), so no stale copy of them stays beside the new ones
        # while the fragment reruns
        message = st.empty()
        if run["message"]:
            (message.error if run["status"] in ("failed", "diverged") else message.caption)(
                run["message"])
        commands = store().commands(run_id)
        run_controls.controls(store(), run, commands)
        for level, text in st.session_state["control_messages"]:  # told at once, by the buttons
            getattr(st, level)(text)
        for _, row in commands[commands["status"] == "refused"].tail(3).iterrows():
            st.warning(f"command {row['id']} {row['kind']} {row['payload']} refused: "
                       f"{row['message']}")
    views = {  # live: charts patched in place while the run trains (`components.live_chart`)
        "Curves": lambda: (run_panels.curves_tab(
            store(), run, scalars, tuple(s.name for s in run_specs(run) if s.log_scale),
            live=active),
            run_controls.learning_rate_panel(run, scalars, live=active)),
        "Slots": lambda: run_panels.slots_tab(store(), run, live=active),
        "Config": lambda: run_panels.config_tab(store(), run),
    }
    if run["status"] == QUEUED:
        return
    if active:
        # While training, only the chosen view is rebuilt every REFRESH_S: redrawing every
        # hidden tab's charts twice a second left the browser (on 2 busy cores) mid-redraw,
        # with blank charts in most frames.
        choice = st.segmented_control(
            "view", list(views), key="live_view", default="Curves",
            help="only the chosen view refreshes live while the run trains",
        )
        views[choice or "Curves"]()
        return
    for tab, show in zip(st.tabs(list(views)), views.values()):
        with tab:
            show()


def plugins_for_this_page() -> None:
    """Register the plugin optimizers if their check has answered; wait for it (a spinner)
    only when a link or this session names an optimizer that is not registered yet. Otherwise
    the page paints with the built-in optimizers and `background_note` reruns it when the
    check is over (issue 13: the check imports TensorFlow in a child, 5-60 s)."""
    if plugin_loader.plugins_when_ready():
        return
    names = set(registry.names())
    wanted = [st.query_params.get("optimizer"), st.session_state.get("optimizer"),
              st.session_state.get(setup_state.PREFIX + "optimizer")]
    if any(name and name not in names for name in wanted):
        plugin_loader.load_plugins()


@st.fragment(run_every=1.0)
def background_note() -> None:
    """While the plugin check or the device probe runs: a note saying so; the page is drawn
    again when both are over (the optimizer and device lists grow then)."""
    pending = [what for what, running in (
        ("checking optimizer plugins", plugin_loader.check_running()),
        ("listing devices (auto works now)", not device_list.device_names().final))
        if running]
    if pending:
        st.caption("In the background: " + "; ".join(pending) + "...")
    else:
        st.rerun(scope="app")


@guard_page  # a read-only or full data directory: one line, not a traceback
def main() -> None:
    plugins_for_this_page()
    init_state()
    lesson_panel.load("train", apply_run_setup=apply_config)  # before the Setup widgets exist
    runs_table = store().runs()
    ids = [int(i) for i in runs_table["id"]]
    state = st.session_state
    if state.get("run_select") not in ids:
        # A session opens on its own newest run, never on another user's (see session_runs).
        mine = [i for i in session_runs.my_runs(store()) if i in ids]
        state["run_select"] = mine[-1] if mine else None
    run = selected_run()
    live_run = (run if run is not None and run["status"] in ACTIVE_STATUSES
                and session_runs.owns(run) else None)
    sidebar(live_run)
    share_setup()
    with st.sidebar:
        setup_state.copy_link(state.get("share_url"))
    setup_state.remember()  # after the widgets: kept under non-widget keys (page switches)

    st.title("Optimizer Lab · Train")
    lesson_panel.show("train")
    if run is None:
        st.info("No run in this session yet: choose an optimizer and press **Start** in the "
                "sidebar" + (", or open a run of the store below." if ids else "."))
    if not ids:
        return
    st.selectbox("run", ids, key="run_select", format_func=lambda i: run_label(runs_table, i),
                 placeholder="open a run of the store (view only unless it is yours)",
                 help="this session's newest run by default; runs of other sessions open view "
                      "only")
    if run is None:
        return
    active = run["status"] in LIVE_STATUSES
    st.fragment(run_every=REFRESH_S if active else None)(live_body)(run["id"], active)


main()
