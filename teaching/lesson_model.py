"""The lessons' data model: `Claim`, `Lesson`, the pages a lesson can open and the stages of
the path (`teaching.lessons` holds the table). Pure data: no TensorFlow, no Streamlit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping

# Pages a lesson can open: name -> the page's URL path (`app.py` routes `/<path>`).
PAGE_URLS = {"train": "train", "hypergrad": "hypergrad", "inside_step": "inside_step",
             "landscape": "landscape", "plugins": "plugins", "runs": "runs",
             "keras3": "keras3", "conventions": "conventions",
             "precision": "precision_distribution"}
PAGES = tuple(PAGE_URLS)


@dataclass(frozen=True)
class Claim:
    """What one step says the page shows, stated so that a test can measure it.

    Attributes:
        step: the 1-based number of the lesson step that makes the claim.
        quantity: what to read on the page (Markdown), e.g. "`lr_t` in *apply_state* at steps
            1, 2, 10".
        expected: the direction or values the page shows (Markdown). Every bold number in it
            is a measured value, in the order the claim's measurement returns them
            (`tests/test_lessons.py`, keyed by `measure`), printed with the digits a reader
            needs to check it.
        measure: the key of the claim's measurement.
    """

    step: int
    quantity: str
    expected: str
    measure: str


# The path through the lessons, in order: what optimizers do first, then how an OptimizerV2 is
# built, then what lies beyond one optimizer. Home shows the lessons in this order.
STAGES = ("What optimizers do", "Inside an OptimizerV2", "Beyond one optimizer")


@dataclass(frozen=True)
class Lesson:
    """One lesson.

    Attributes:
        key: short id used in the URL (`?lesson=<key>`), lower-case letters, digits and `_`.
        title: card title.
        question: the question it answers, as people ask it.
        page: which page answers it (one of `PAGES`).
        run_setup: `RunConfig` fields the Train page's Setup is set to (train/hypergrad
            lessons); empty for the teaching pages.
        page_state: session-state values the page opens with (e.g. `is_optimizer`), for the
            pages whose settings are not a run.
        steps: what to do and look at, in order (Markdown).
        check: a check question.
        answer: its answer (Markdown), matching what the lab shows.
        minutes: how long it takes a newcomer, roughly (minutes).
        stage: which part of the path it belongs to (an index into `STAGES`).
        claims: what its steps say the page shows, each checked by a test.
    """

    key: str
    title: str
    question: str
    page: str
    steps: tuple[str, ...]
    check: str
    answer: str
    minutes: int = 5
    run_setup: Mapping[str, Any] = field(default_factory=dict)
    page_state: Mapping[str, Any] = field(default_factory=dict)
    stage: int = 0
    claims: tuple[Claim, ...] = ()


__all__ = ["Claim", "Lesson", "PAGES", "PAGE_URLS", "STAGES"]
