"""The teacher's "New challenge" form on the Class page: a challenge from this session's Train
setup (`components.setup_state` keeps it across pages), with the data, model, steps, the
allowed optimizers, the free hyperparameters, the goal and a title set here.

Every field is checked by `runs.service.challenges.check_spec` (the message names the field
and its range); the form only gathers the values.
"""

from __future__ import annotations

from typing import Any

import pydantic
import streamlit as st

from components import session_runs, setup_state
from components.page_store import store
from optimizers import registry
from optimizers.hyperparams import InvalidHyperparameter
from runs.service import challenges
from runs.service.challenges import GOALS, ChallengeError
from runs.service.ownership import NotOwner
from settings import fields
from settings.run_config import COMPATIBLE_MODELS, DATASETS, RunConfig

MESSAGES = "class_messages"  # (level, text) of the last create / close / pin / stop
CREATED = "class_created"  # the id of the challenge this session created last


def session_setup() -> RunConfig:
    """This session's Train setup (as the Train page last drew it), else the page's defaults."""
    state = st.session_state
    view = {key[len(setup_state.PREFIX):]: value for key, value in state.items()
            if isinstance(key, str) and key.startswith(setup_state.PREFIX)}
    try:
        return fields.config_from_session(view)
    except (pydantic.ValidationError, InvalidHyperparameter, KeyError, ValueError):
        return fields.page_defaults()


def challenge_data(setup: RunConfig, values: dict[str, Any]) -> dict[str, Any]:
    """The `ChallengeSpec` data of the form: the setup with the form's data, model, steps and
    eval_every; the first allowed optimizer is the base's (its hyperparameters and options
    from the setup when it is the setup's optimizer, else its defaults); hyper-gradients off.

    Args:
        values: `title, dataset, model, steps, eval_every, optimizers, free, goal, goal_step,
            goal_accuracy` (a fraction).
    """
    base = setup.to_json_dict()
    optimizers = list(values["optimizers"])
    optimizer = optimizers[0] if optimizers else setup.optimizer
    if optimizer != setup.optimizer:
        base.update(hyperparameters={}, options={})
    base.update(optimizer=optimizer, dataset=values["dataset"], model=values["model"],
                steps=int(values["steps"]), eval_every=int(values["eval_every"]),
                hypergradients=[], autotune={}, reverse_horizon=0)
    return {"title": values["title"], "base": base, "optimizers": optimizers,
            "free": list(values["free"]), "goal": values["goal"],
            "goal_step": int(values["goal_step"]) if values["goal"] == "val_loss_at_step"
            else None,
            "goal_accuracy": float(values["goal_accuracy"]) if values["goal"] ==
            "steps_to_accuracy" else None}


def _form_values() -> dict[str, Any]:
    """The form's values (the goal parameter not drawn takes its default)."""
    state = st.session_state
    return {"title": state.get("new_title", ""), "dataset": state["new_dataset"],
            "model": state["new_model"], "steps": state["new_steps"],
            "eval_every": state["new_eval_every"], "optimizers": state["new_optimizers"],
            "free": state["new_free"], "goal": state["new_goal"],
            "goal_step": state.get("new_goal_step", state["new_steps"]),
            "goal_accuracy": state.get("new_goal_accuracy", 95.0) / 100.0}


def on_create() -> None:
    state = st.session_state
    try:
        data = challenge_data(session_setup(), _form_values())
        challenge_id = challenges.create_challenge(store(), data, caller=session_runs.caller())
    except (ChallengeError, NotOwner) as error:
        state[MESSAGES] = [("error", str(error))]
        return
    state[CREATED] = challenge_id
    state["board_challenge"] = challenge_id
    state[MESSAGES] = [("success", f"challenge {challenge_id} created: share its link or QR "
                                   "code below")]


def form() -> None:
    """The form's widgets and its Create button."""
    state = st.session_state
    setup = session_setup()
    st.caption(f"From this session's Train setup: {setup.optimizer} "
               f"({', '.join(f'{k}={v:g}' for k, v in setup.hyperparameters.items())}), "
               f"label noise {setup.label_noise:g}, batch {setup.batch_size}, seed {setup.seed}"
               " (change them on the Train page). Hyper-gradients are off in a challenge.")
    st.text_input("title", key="new_title", max_chars=challenges.TITLE_CHARS[1],
                  placeholder="Beat Adam on the digits")
    left, middle, right = st.columns(3)
    state.setdefault("new_dataset", setup.dataset)
    dataset = left.selectbox("dataset", DATASETS, key="new_dataset")
    models = list(COMPATIBLE_MODELS[dataset])
    if state.get("new_model") not in models:
        state["new_model"] = setup.model if setup.model in models else models[0]
    middle.selectbox("model", models, key="new_model")
    state.setdefault("new_steps", min(setup.steps, 2000))
    low, high = fields.bounds("steps")
    right.number_input("steps", min_value=low, max_value=high, step=100, key="new_steps")
    names = registry.names()
    state.setdefault("new_optimizers", [setup.optimizer])
    st.multiselect("optimizers students may pick (the first is the base)", names,
                   key="new_optimizers")
    offered = list(dict.fromkeys(s.name for name in state["new_optimizers"]
                                 for s in registry.specs(name, registry.option_defaults(name))))
    state["new_free"] = [n for n in state.get("new_free", ["learning_rate"]) if n in offered]
    st.multiselect("hyperparameters students may set", offered, key="new_free",
                   help="the others stay at the setup's values (or the optimizer's defaults)")
    left, middle, right = st.columns(3)
    goal = left.radio("goal", list(GOALS), key="new_goal", format_func=GOALS.get)
    state.setdefault("new_eval_every", setup.eval_every)
    e_low, e_high = fields.bounds("eval_every")
    middle.number_input("eval every (steps)", min_value=e_low, max_value=e_high, step=5,
                        key="new_eval_every", help="validation runs every this many steps")
    state.setdefault("new_goal_step", int(state["new_steps"]))
    state.setdefault("new_goal_accuracy", 95.0)
    if goal == "val_loss_at_step":
        right.number_input("N: the step scored", min_value=1, max_value=high, step=100,
                           key="new_goal_step", help="a multiple of eval every, or the steps")
    else:
        right.number_input("X: validation accuracy (%)", min_value=0.0, max_value=100.0,
                           step=1.0, key="new_goal_accuracy")
    st.button("Create the challenge", key="new_create", type="primary", on_click=on_create)
