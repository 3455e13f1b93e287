"""The home page: what the lab is, and the lessons as cards (`teaching.lessons.LESSONS`).

A card links to the page that answers its question with `?lesson=<key>`; that page's lesson
panel (`components.lesson_panel`) loads the lesson's setup and walks through it.
"""

from __future__ import annotations

import streamlit as st

from components import links
from teaching.lessons import LESSONS, PAGE_URLS, STAGES, Lesson
from views import TITLES

COLUMNS = 3


def intro() -> None:
    st.title("Optimizer Lab")
    st.markdown(
        "A lab for how Keras optimizers work inside. Pick an optimizer, set the hyperparameters "
        "it registers with `_set_hyper`, train a real model and watch, live, the loss, the "
        "optimizer's **slots** (Adam's `m` and `v`, momentum buffers, accumulators), its "
        "serialized config and the **hyper-gradients** d(validation loss)/d(hyperparameter).")
    left, right = st.columns(2)
    with left:
        links.page_link("train", label="Train a model now (Adam on the digits)",
                        icon=":material/model_training:")
    with right:
        links.page_link("inside_step", label="Watch one optimizer step from the inside",
                        icon=":material/step_into:")


def lesson_cards() -> None:
    st.header("Lessons")
    st.caption("Each lesson answers one question people keep asking: it sets up the page, "
               "walks you through it in a panel at the top and ends with a check question.")
    number = 0
    for stage, stage_title in enumerate(STAGES):
        st.subheader(f"{stage + 1} · {stage_title}")
        columns = st.columns(COLUMNS)
        for index, lesson in enumerate(x for x in LESSONS if x.stage == stage):
            number += 1
            with columns[index % COLUMNS].container(border=True,
                                                    key=f"lesson_card_{lesson.key}"):
                lesson_card(number, lesson)


def lesson_card(number: int, lesson: Lesson) -> None:
    """One card: the lesson's place on the path, its question, page and length, a link."""
    st.markdown(f"**{number}. {lesson.title}**")
    st.caption(f"{lesson.question}")
    st.caption(f"{TITLES[PAGE_URLS[lesson.page]]} · about {lesson.minutes} min")
    page = "train" if lesson.run_setup else lesson.page
    links.page_link(PAGE_URLS[page], label="Open the lesson",
                    icon=":material/school:", query_params={"lesson": lesson.key})


def page() -> None:
    intro()
    lesson_cards()
