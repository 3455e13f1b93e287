"""The Runs page's Continue: resume an ended run from its last checkpoint, and say what it cost.

`show(run, mine)` draws, for the managed run, the "Continue from step k" button (owner only;
an interrupted run, a stopped run, or a run that failed because the store could not be written,
with a checkpoint; see `runs.service.continuing`) and, for a run that was continued, its notes
("continued from step k; n steps since the last checkpoint were lost") and the last checkpoint
that could not be written (a full disk), if any. The button's refusal
reason is its help text when it is disabled; a refusal at click time (the status changed
meanwhile) is shown as the page's message.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from components import session_runs
from components.page_store import store
from runs.service import continuing


def on_continue(run_id: int) -> None:
    """Requeue the run (`continuing.continue_run` with this session's caller)."""
    try:
        done = continuing.continue_run(store(), run_id, caller=session_runs.caller())
    except (KeyError, ValueError) as error:  # NotOwner is a ValueError
        st.session_state["runs_messages"] = [("error", str(error))]
        return
    st.session_state["runs_messages"] = [
        ("success", f"run #{run_id} {done.note}; it is queued and trains on (follow it on the "
                    "Train page)")]


def show(run: dict[str, Any], mine: bool) -> None:
    """The Continue button and the continue notes of `run` (a `RunStore.run` dict)."""
    run_id = run["id"]
    for text in continuing.notes(store(), run_id):
        st.caption(f"Run #{run_id} {text}.")
    failed = continuing.checkpoint_failures(store(), run_id)
    if failed:  # e.g. a full disk: Continue would resume from the older checkpoint
        st.warning(f"Run #{run_id}: {failed[-1]}", icon=":material/save:")
    if run["status"] not in continuing.CONTINUABLE:
        return
    step = continuing.checkpoint_step(store(), run)
    why = continuing.refusal(store(), run)
    if not why and not mine:
        why = (f"continue of run #{run_id} refused: only the session that started the run may "
               "continue it")
    label = "Continue" if step is None else f"Continue from step {step:,}"
    st.button(label, key=f"runs_continue_{run_id}", on_click=on_continue, args=(run_id,),
              disabled=bool(why), help=why or (
                  f"resume run #{run_id} from its last checkpoint (step {step:,} of "
                  f"{run['total_steps']:,}); the {max(0, run['step'] - (step or 0)):,} steps "
                  "after it are trained again"))
