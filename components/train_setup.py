"""The Train page's Setup (its sidebar): optimizer, hyperparameters, schedule, data and run,
device, hyper-gradients and Start; kept in session state and in the URL.

A hyperparameter moved while this session's run trains is sent to it at once
(`components.train_actions`); the hyperparameter block is its own fragment for that reason.
"""

from __future__ import annotations

from typing import Any

import pydantic
import streamlit as st

from components import device_list, figures, plugin_loader, rule_view
from components import run_controls, setup_state
from components import dynamics_panel
from components.hyper_widgets import (default_index, default_value, hyper_widgets,
                                      invalid_hypers, number_args, option_widgets,
                                      schedule_widgets, slider_bounds)
from components.train_actions import (FROM_NOW, FROM_ZERO, SCHEDULE_START, SETUP_OF_RUN,
                                      live_config, live_run_followed, on_hyper_change,
                                      on_schedule_change, on_start, setup_config,
                                      start_token)
from optimizers import registry, slot_memory
from schedules import preview as schedule_curves
from schedules import table as schedule_specs
from optimizers.hyperparams import InvalidHyperparameter
from settings import fields, share_link
from settings.run_config import COMPATIBLE_MODELS, RunConfig


# ----- state -----------------------------------------------------------------------------------
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
    """Fill the Setup widgets from the URL's setup (`settings.share_link`), if it has one.

    A field the link leaves out takes the page's default (`fields.page_defaults`), as the
    Setup shows it without a link: a hand-written `?optimizer=sgd` keeps the default setup's
    label noise, not `RunConfig()`'s 0 (the links this page writes carry every field)."""
    params = st.query_params.to_dict()
    if "optimizer" in params:
        page = share_link.to_query_params(fields.page_defaults())
        params.update({f: page[f] for f in fields.page_default_fields()
                       if f not in params and f in page})
    try:
        config = share_link.from_query_params(params)
    except share_link.QueryParamsError as error:
        st.session_state["start_errors"] = [f"shared link ignored: {error}"]
        return
    if config is not None:
        apply_config(config)


def apply_config(config: RunConfig) -> None:
    """Set the Setup widgets to `config` (a shared link, a lesson): before they are drawn."""
    values = fields.session_values(config)
    prefix = fields.hyper_prefix(config.optimizer, config.options)
    for spec in registry.specs(config.optimizer, config.options):
        bounds = slider_bounds(spec)  # a slider refuses a value outside its own bounds
        if bounds is not None:
            values[prefix + spec.name] = min(max(values[prefix + spec.name], bounds[0]), bounds[1])
    values["continuous"] = config.steps >= run_controls.continuous_steps()
    st.session_state.update(values)


def follow_live_run(live_run: dict[str, Any] | None) -> None:
    """Set the Setup to the live run this session steers (its optimizer, its current
    hyperparameters, schedule and decay, read from the store), before the widgets are drawn:
    a value moved then starts from what the run uses, not from the page's defaults. Once per
    run and session (a reopened page, a new tab, a reload are new sessions or new runs), so the
    user's own moves are never put back."""
    state = st.session_state
    if live_run is None or state.get(SETUP_OF_RUN) == live_run["id"]:
        return
    state[SETUP_OF_RUN] = live_run["id"]
    config = live_config(live_run)
    if config is not None:
        apply_config(config)


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


def device_names() -> tuple[list[str], bool]:
    """(logical device names, final): listed by a child process (`components.device_list`),
    so the server never imports TensorFlow; the CPU alone (final False) until it answers."""
    found = device_list.device_names()
    return list(found.names), found.final



# ----- sidebar ---------------------------------------------------------------------------------
# The Start button's state as the last full run drew it (None while a full run draws the Setup).
SETUP_OK_DRAWN = "_setup_ok_drawn"


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
    run = live_run_followed()
    if run is not None and schedule is not None:
        schedule = started_schedule(run, schedule)
    preview = schedule_curves.preview_points(schedule, total, values.get("learning_rate", 0.01),
                                            decay)
    marks = schedule_curves.schedule_marks(schedule, total)
    # no toolbar: in the narrow sidebar it covered the chart's title
    st.plotly_chart(figures.learning_rate_figure(
        preview, marks=marks, uirevision="preview", height=200,
        now_step=int(run["step"]) if run is not None else None),
        key="lr_preview", width="stretch", config={"displayModeBar": False})
    return None


def started_schedule(run: dict[str, Any], schedule: dict[str, Any]) -> dict[str, Any]:
    """The Setup's schedule as the live `run` would use it: the run's own start when it runs
    this schedule class, else (a switch) from now or from step 0 as the radio drawn here says."""
    current, _ = run_controls.run_schedule(run)
    if current and current.get("class_name") == schedule["class_name"]:
        start = schedule_specs.start_step(current)
    else:
        choice = st.radio("start the schedule", [FROM_NOW, FROM_ZERO], key=SCHEDULE_START,
                          horizontal=True,
                          help="a schedule is a function of the optimizer's `iterations`: "
                               "switched on at step k 'from step 0', it starts at its value "
                               "for step k (an ExponentialDecay may be near its end); 'from "
                               "now' wraps it so its clock starts at the run's next step")
        start = int(run["step"]) if choice == FROM_NOW else 0
    return {**schedule, **({"start_step": start} if start else {})}


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
    values = hyper_widgets(specs, fields.hyper_prefix(optimizer, options),
                           on_change=on_hyper_change)
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


def sidebar(live_run: dict[str, Any] | None) -> None:
    """The Setup; `live_run`: the selected run when it is active and this session's (its
    values fill the Setup, `follow_live_run`, and a moved value is sent to it)."""
    state = st.session_state
    follow_live_run(live_run)
    with st.sidebar:
        st.header("Setup")
        names = registry.names()
        if state["optimizer"] not in names:
            state["optimizer"] = names[0]
        optimizer = st.selectbox("optimizer", names, key="optimizer",
                                 index=default_index("optimizer", names),
                                 help=fields.help_text("optimizer") + "\n\n"
                                 + slot_memory.help_table())
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
        datasets = list(fields.choices("dataset"))
        st.selectbox("dataset", datasets, key="dataset", index=default_index("dataset", datasets),
                     help=fields.help_text("dataset"))
        models = COMPATIBLE_MODELS[state["dataset"]]
        if state["model"] not in models:
            state["model"] = "mlp" if "mlp" in models else models[0]
        st.selectbox("model", models, key="model", index=default_index("model", list(models)),
                     help=fields.help_text("model"))
        st.number_input(**number_args("label_noise"))
        st.checkbox("continuous (no step limit)", key="continuous",
                    value=default_value("continuous", False),
                    on_change=setup_state.on_continuous,
                    help=f"steps = {run_controls.continuous_steps():,} (the most allowed); set "
                         "the pace with the speed control beside Pause/Stop")
        left, right = st.columns(2)
        for index, field in enumerate(fields.int_fields("run")):  # batch size, steps, ...
            args = number_args(field)
            (left, right)[index % 2].number_input(
                **args, disabled=field == "steps" and state["continuous"])
        st.select_slider("pace of a new run", run_controls.SPEEDS, key="start_speed",
                         value=default_value("start_speed", None),
                         format_func=run_controls.speed_label,
                         help="the pace a run starts at; change it while it trains with the "
                              "speed control beside Pause/Stop (full speed: as fast as the "
                              "machine trains)")
        for field, label in (("dtype", "dtype"), ("compiler", fields.label("compiler"))):
            choices, key = list(fields.choices(field)), fields.session_key(field)
            st.selectbox(label, choices, key=key, index=default_index(key, choices),
                         help=fields.help_text(field))
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
        st.selectbox("device", devices, key="device", index=default_index("device", devices),
                     help=fields.help_text("device"))
        hypergradient_widgets(optimizer, specs)
        dynamics_panel.setup_widgets()
        st.button("Start", key="start", type="primary", on_click=on_start,
                  args=(start_token(),), width="stretch", disabled=not setup_ok)
        for message in state["start_errors"]:
            st.error(message)


def setup_summary(config: RunConfig) -> str:
    """The Setup in one line (Markdown): optimizer, its hyperparameters, schedule, data and run,
    e.g. "**adam** (learning_rate 0.001, beta_1 0.9, ...) · digits / mlp · 2,000 steps · batch
    32 · float32"."""
    hypers = ", ".join(f"{name} {value:.4g}" for name, value in config.hyperparameters.items())
    schedule = f" · {config.lr_schedule['class_name']}" if config.lr_schedule else ""
    steps = "continuous" if st.session_state.get("continuous") else f"{config.steps:,} steps"
    follows = f" · hyper-gradients of {len(config.hypergradients)}" \
        if config.hypergradients else ""
    return (f"**{config.optimizer}** ({hypers}){schedule} · {config.dataset} / {config.model} · "
            f"{steps} · batch {config.batch_size} · {config.dtype}{follows}")


def start_here() -> None:
    """Start and the Setup's one-line summary at the top of the main area, where the eye lands
    first (the sidebar's Start is 2-3 screens down once the Setup is open)."""
    state = st.session_state
    try:
        summary = setup_summary(setup_config())
    except (pydantic.ValidationError, KeyError, ValueError):
        summary = "the Setup has a value that is not allowed: see the sidebar"
    left, right = st.columns([1, 5], vertical_alignment="center")
    left.button("Start training", key="start_main", type="primary", on_click=on_start,
                args=(start_token(),),
                width="stretch", disabled=not state.get(SETUP_OK_DRAWN, True))
    right.markdown(f"{summary}  \nChange any of it in the sidebar (**Setup**).")
    for message in state["start_errors"]:
        st.error(message)


def hypergradient_widgets(optimizer: str, specs) -> None:
    """The Setup's "Hyper-gradients" expander (watched on the Hyper-gradients page)."""
    with st.expander("Hyper-gradients"):
        st.checkbox("follow hyper-gradients", key="hg_follow",
                    value=default_value("hg_follow", False),
                    help="train through forward mode and record dE_val/dλ (exact and one-step)")
        names = [s.name for s in specs]
        key = fields.names_key(optimizer)
        if key not in st.session_state or not set(st.session_state[key]) <= set(names):
            st.session_state[key] = names  # through state, not `default=`: a link may set it
        st.multiselect("hyperparameters", names, key=key, default=default_value(key, None),
                       disabled=not st.session_state["hg_follow"])
        left, right = st.columns(2)
        for index, field in enumerate(fields.int_fields("hypergradients")):
            (left, right)[index % 2].number_input(**number_args(field))
        tuned = {name: eta for name, eta in st.session_state.get(
            fields.session_key("autotune"), {}).items() if name in st.session_state[key]}
        if tuned and st.session_state["hg_follow"]:  # set by a shared link, not by a widget
            st.caption("auto-tuned from the start (shared link): " + ", ".join(
                f"{name} (η = {eta:g})" for name, eta in tuned.items()))



# ----- plugins and devices, in the background -------------------------------------------------
def plugins_for_this_page() -> None:
    """Register the plugin optimizers if their check has answered; wait for it (a spinner)
    only when a link or this session names an optimizer that is not registered yet. Otherwise
    the page paints with the built-in optimizers and `background_note` reruns it when the
    check is over (the check imports TensorFlow in a child, 5-60 s)."""
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

