"""The 2-D landscape: registry optimizers racing on classic test functions.

Thin: `teaching.landscape.LandscapeRunner` runs every optimizer in one XLA-compiled loop (cached
per function and optimizer set; start point, step count and hyperparameters are fed without a
retrace), `components.landscape_figures` draws.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import streamlit as st

from components import lesson_panel
from components import landscape_figures, path_landscape_panel
from components.page_store import store
from components.charts import chart
from components.hyper_widgets import hyper_widgets, invalid_hypers, slider_bounds
from components.plugin_loader import load_plugins
from optimizers import registry

DEFAULT_RACERS = ["sgd", "adam", "rmsprop", "diffgrad"]
MAX_RACERS = 6
# The hyperparameters drawn as sliders beside the plot (the rest stay in the sidebar), and
# the learning rates a slider offers: 1e-4 .. 1, four per decade (plus the current value).
BESIDE_THE_PLOT = ("learning_rate", "momentum")
LR_CHOICES = tuple(float(f"{10 ** (k / 4):.3g}") for k in range(-16, 1))
TUNE_TEXT = ("**Tune learning rates** tries, for every optimizer at once, 13 learning rates "
             "log-spaced from 1e-4 to 1 (those its spec allows), runs the chosen number of steps "
             "from the current start point with the other hyperparameters as set, scores each by "
             "the mean of f over the last 10% of the steps (diverged = worst) and keeps the best. "
             "A small grid search, not the hyper-gradient engine: 13 compiled runs of all the "
             "optimizers together, and no derivative through hundreds of steps, which on Rosenbrock "
             "or Rastrigin is dominated by chaotic, exploding terms.")


def init_state() -> None:
    from teaching import landscape

    defaults: dict[str, Any] = {"ls_function": "rosenbrock", "ls_optimizers": DEFAULT_RACERS,
                                "ls_steps": 500, "ls_tuning": None, "ls_step": 500}
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    func = landscape.get_function(st.session_state["ls_function"])
    st.session_state.setdefault("ls_x0", func.start[0])
    st.session_state.setdefault("ls_y0", func.start[1])


def on_function_change() -> None:
    from teaching import landscape

    func = landscape.get_function(st.session_state["ls_function"])
    st.session_state["ls_x0"], st.session_state["ls_y0"] = func.start
    st.session_state["ls_tuning"] = None


@st.cache_resource(show_spinner="Compiling the optimizers' loop (once per function and set)...")
def runner_for(function: str, racers: tuple[str, ...]):
    from teaching import landscape

    runner = landscape.LandscapeRunner(function, [landscape.Racer(n, n) for n in racers])
    return runner, threading.Lock()  # one runner per server: sessions take turns


@st.cache_data(show_spinner=False)
def contour_grid(function: str):
    from teaching import landscape

    return landscape.grid(function)


def prefix(name: str) -> str:
    return f"ls_hp_{name}_"


def hypers_of(name: str) -> dict[str, float]:
    return {s.name: float(st.session_state[f"{prefix(name)}{s.name}"])
            for s in registry.specs(name)}


def on_tune() -> None:
    state = st.session_state
    racers = tuple(state["ls_optimizers"])
    runner, lock = runner_for(state["ls_function"], racers)
    with lock:
        for name in racers:
            runner.set_hypers(name, hypers_of(name))
        table = runner.tune_learning_rates((state["ls_x0"], state["ls_y0"]), int(state["ls_steps"]))
    for row in table[table["best"]].itertuples():
        state[f"{prefix(row.optimizer)}learning_rate"] = float(row.learning_rate)
    state["ls_tuning"] = table


def nudge(delta: int) -> None:
    """Move the replay step by `delta`; a step forward from the last step starts again at 0
    (the figure's own Play button replays the whole path in the browser)."""
    state = st.session_state
    steps = int(state["ls_steps"])
    if delta > 0 and int(state["ls_step"]) >= steps:
        state["ls_step"] = 0
        return
    state["ls_step"] = int(min(max(state["ls_step"] + delta, 0), steps))


def sidebar(names: list[str]) -> dict[str, dict[str, float]]:
    from teaching import landscape

    state = st.session_state
    with st.sidebar:
        st.header("Landscape")
        st.selectbox("function", list(landscape.FUNCTIONS), key="ls_function",
                     on_change=on_function_change)
        state["ls_optimizers"] = [n for n in state["ls_optimizers"] if n in names]
        st.multiselect("optimizers", names, key="ls_optimizers", max_selections=MAX_RACERS)
        left, right = st.columns(2)
        left.number_input("start x", step=0.1, format="%.3f", key="ls_x0")
        right.number_input("start y", step=0.1, format="%.3f", key="ls_y0")
        st.number_input("steps", min_value=1, max_value=5000, step=50, key="ls_steps")
        st.button("Tune learning rates", key="ls_tune", on_click=on_tune, width="stretch",
                  disabled=not state["ls_optimizers"])
        hypers = {}
        for name in state["ls_optimizers"]:
            specs = [s for s in registry.specs(name) if s.name not in BESIDE_THE_PLOT]
            state.setdefault(f"{prefix(name)}learning_rate", landscape.landscape_lr(name))
            with st.expander(f"{name}: other hyperparameters", expanded=False):
                values = hyper_widgets(specs, prefix(name))
            if not invalid_hypers(specs, values):
                hypers[name] = {k: float(v) for k, v in values.items()}
    return hypers


def allowed(spec, value: float) -> bool:
    try:
        spec.validate(value)
    except ValueError:
        return False
    return True


def knobs(racers: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The learning rate and momentum of every racer as sliders beside the plot: moving one
    reruns the compiled loop at once (tens of ms to ~2 s, said under the plot), as in Distill's
    "Why Momentum Really Works" (Goh, 2017)."""
    state = st.session_state
    out: dict[str, dict[str, float]] = {}
    for name in racers:
        specs = {s.name: s for s in registry.specs(name) if s.name in BESIDE_THE_PLOT}
        out[name] = {}
        for hyper, spec in specs.items():
            key = f"{prefix(name)}{hyper}"
            state.setdefault(key, float(spec.default))
            if hyper == "learning_rate":  # log scale: a fixed ladder plus the current value
                current = float(state[key])
                choices = sorted({c for c in LR_CHOICES if allowed(spec, c)} | {current})
                st.select_slider(f"{name} learning_rate", choices, key=key,
                                 format_func=lambda v: f"{v:.3g}")
            else:
                bounds = slider_bounds(spec)
                low, high = (bounds[0], bounds[1]) if bounds else (0.0, 0.99)
                st.slider(f"{name} {hyper}", low, min(high, 0.999), step=0.01, key=key)
            out[name][hyper] = float(state[key])
    return out


def page() -> None:
    from teaching import landscape

    load_plugins()
    lesson_panel.load("landscape")  # a lesson's setup goes in before the widgets exist
    init_state()
    state = st.session_state
    names = [n for n in registry.names() if n != "accumulation"]
    hypers = sidebar(names)
    st.title("The 2-D landscape")
    lesson_panel.show("landscape")
    if st.segmented_control("landscape", ["test functions", "along a run's path"],
                            key="ls_view", default="test functions") == "along a run's path":
        return path_landscape_panel.section(store())
    func = landscape.get_function(state["ls_function"])
    st.caption(f"{func.name}: minimum f* = {func.f_min:g} at "
               f"{', '.join(f'({x:g}, {y:.4g})' for x, y in func.minima)} · {func.reference}. "
               "The optimizers are the registry classes of the Train page; all of them run in one "
               "XLA-compiled `tf.while_loop` calling each one's `apply_gradients`.")
    racers = tuple(n for n in state["ls_optimizers"] if n in hypers)
    if not racers:
        st.info("Choose at least one optimizer (with valid hyperparameters) in the sidebar.")
        return
    steps = int(state["ls_steps"])
    state["ls_step"] = min(int(state["ls_step"]), steps)
    cols = st.columns([1, 1, 10])
    cols[0].button("◀", key="ls_prev", on_click=nudge, args=(-max(steps // 20, 1),))
    cols[1].button("▶", key="ls_next", on_click=nudge, args=(max(steps // 20, 1),))
    cols[2].slider("replay: step", 0, steps, key="ls_step")
    plot_column, knob_column = st.columns([5, 2])
    with knob_column:
        st.markdown("**Move these: the paths redraw at once**")
        for name, values in knobs(racers).items():
            hypers[name] = {**hypers[name], **values}
    t0 = time.perf_counter()
    runner, lock = runner_for(func.name, racers)
    with lock:
        for name in racers:
            runner.set_hypers(name, hypers[name])
        frame = runner.run((float(state["ls_x0"]), float(state["ls_y0"])), steps)
    compute_ms = (time.perf_counter() - t0) * 1e3
    step = int(state["ls_step"])
    t1 = time.perf_counter()
    contour = landscape_figures.contour_figure(
        contour_grid(func.name), frame, step, func.minima, title=f"{func.name} (step {step})",
        log_levels=func.log_contour, uirevision=func.name)
    loss = landscape_figures.loss_figure(frame, step, func.f_min, uirevision=func.name)
    draw_ms = (time.perf_counter() - t1) * 1e3
    with plot_column:
        chart(contour, "ls_contour")
    with knob_column:
        chart(loss, "ls_loss")
    final = frame[frame["step"] == step][["optimizer", "x", "y", "loss"]]
    st.dataframe(final.rename(columns={"loss": f"f at step {step}"}), hide_index=True,
                 width="stretch", key="ls_final")
    st.caption(f"{len(racers)} optimizers x {steps} steps recomputed in {compute_ms:.0f} ms, "
               f"figures built in {draw_ms:.0f} ms (first run of a new set includes the compile).")
    st.markdown(TUNE_TEXT)
    if state["ls_tuning"] is not None and not state["ls_tuning"].empty:
        chart(landscape_figures.tuning_figure(state["ls_tuning"]), "ls_tune_fig")
