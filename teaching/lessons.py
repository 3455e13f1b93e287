"""The lessons: one declared table of the questions people keep asking about optimizers.

Each `Lesson` names the page that answers it, the setup that page opens with, what to look at
(in order) and a check question with its answer. The home page (`views/home.py`) shows the
lessons as cards; opening one loads its setup through the same channels a shared link uses
(`settings` for a run setup, page state for the teaching pages) and `components.lesson_panel`
walks through it in a panel at the top of the page. `tests/test_lessons.py` checks every
answer against what the lab computes (the numbers in an answer are measured, not remembered).

Pure data: no TensorFlow, no Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# Pages a lesson can open: name -> the page's URL path (`app.py` routes `/<path>`).
PAGE_URLS = {"train": "train", "hypergrad": "hypergrad", "inside_step": "inside_step",
             "landscape": "landscape", "plugins": "plugins", "runs": "runs",
             "keras3": "keras3", "conventions": "conventions",
             "precision": "precision_distribution"}
PAGES = tuple(PAGE_URLS)


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


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        key="set_hyper",
        title="`_set_hyper` vs a plain attribute",
        question="Why does `self.t_cur = 5` break my optimizer when `_set_hyper('t_cur', 5)` "
                 "works?",
        page="inside_step",
        page_state={"is_optimizer": "adam", "is_model": "dense"},
        steps=(
            "Open **Classic questions** below and press **Run the demo** under *A plain "
            "attribute vs `_set_hyper`*.",
            "Compare the columns `value_returned_after` and `traces_after` row by row.",
            "Then look at the `_hyper` table under *Hyperparameters*: what `_set_hyper` stored "
            "(a float before the first step, a `tf.Variable` after) and what "
            "`_serialize_hyperparameter` gives back.",
            "Press **Try each kind** under *A float, a variable, a tensor, a schedule, a "
            "callable*: only a Python number becomes a variable; a schedule stays a schedule "
            "and `_decayed_lr` evaluates it at the step.",
        ),
        check="After `self.t_cur = 5.0`, what does the compiled step read when `t_cur` is "
              "captured as a closure, and how many traces does `_set_hyper('t_hyper', 5.0)` cost?",
        answer="It still reads **0.0**: the old value was baked into the graph as a constant. "
               "`_set_hyper` assigns the hyperparameter's `tf.Variable`, so the step reads "
               "**5.0** with **1** trace in all (no retrace).",
    ),
    Lesson(
        key="slots_empty",
        title="Why `get_slot_names()` is empty before the first step",
        question="I created Adam and `get_slot_names()` returns `[]`: where are `m` and `v`?",
        page="inside_step",
        page_state={"is_optimizer": "adam", "is_model": "dense"},
        steps=(
            "Look at *Slots* before pressing anything: the list is empty.",
            "Press **Step** once and read the recorded call order: `apply_gradients` -> "
            "`_create_all_weights` -> `_create_slots` -> `add_slot`.",
            "The *Slots* list now holds the names `_create_slots` registered.",
        ),
        check="What does `get_slot_names()` return before the first step, and after one step?",
        answer="`[]` before; `['m', 'v']` after: `_create_slots` runs inside the first "
               "`apply_gradients`, when the variables are known.",
        minutes=3,
    ),
    Lesson(
        key="prepare_local",
        title="`_prepare_local` and `apply_state`",
        question="What goes in `apply_state`, and why is it computed once per (device, dtype)?",
        page="inside_step",
        page_state={"is_optimizer": "adam", "is_model": "dense"},
        steps=(
            "Press **Step** and find `_prepare_local` in the recorded call order.",
            "Open *apply_state*: one entry per (device, dtype) with `lr_t` and the rule's "
            "coefficients.",
            "Every `_resource_apply_dense` call below it reads that entry instead of "
            "recomputing the coefficients for each variable.",
        ),
        check="The dense model has 2 variables (kernel, bias) of one dtype on one device: how "
              "many times does `_prepare_local` run in one step?",
        answer="**Once**: `apply_state` is keyed by (device, dtype), and both variables share "
               "the key.",
        minutes=3,
    ),
    Lesson(
        key="dense_sparse",
        title="Dense vs sparse updates",
        question="What does `_resource_apply_sparse` do for an `Embedding`, and how does it "
                 "differ from a dense update?",
        page="inside_step",
        page_state={"is_optimizer": "adam", "is_model": "embedding"},
        steps=(
            "The model is an `Embedding(6, 3)` looked up with a batch of token ids.",
            "Press **Step**: the recorded calls show `_resource_apply_sparse` (the gradient is a "
            "`tf.IndexedSlices`).",
            "Under *Rows touched* compare the variable's rows and the `m` slot's rows before "
            "and after.",
        ),
        check="Which rows of the embedding (and of its `m` slot) change in a sparse step?",
        answer="Only the rows whose token ids are in the batch; the other rows keep their "
               "values and their slots (a lazy update: their momentum does not decay).",
    ),
    Lesson(
        key="bias_correction",
        title="Adam's bias correction",
        question="Why does Adam divide by `1 - beta_1**t`, and what does `lr_t` look like in "
                 "the first steps?",
        page="inside_step",
        page_state={"is_optimizer": "adam", "is_model": "dense"},
        steps=(
            "Press **Step** once and read `lr_t` in *apply_state*.",
            "Step again a few times: `lr_t` grows towards `learning_rate` as "
            "`sqrt(1 - beta_2**t) / (1 - beta_1**t)` tends to 1.",
            "`m` and `v` start at 0, so without the correction the first steps would be far "
            "too small.",
        ),
        check="With the defaults (learning_rate 0.001, beta_1 0.9, beta_2 0.999), what is "
              "`lr_t` at step 1?",
        answer="`lr_t = 0.001 * sqrt(1 - 0.999) / (1 - 0.9)` = **0.000316** (0.316 x the "
               "learning rate).",
        minutes=4,
    ),
    Lesson(
        key="momentum",
        title="Momentum on an ill-conditioned valley",
        question="What does momentum buy on a narrow valley, and is Nesterov any different?",
        page="train",
        run_setup={"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.01,
                                                            "momentum": 0.9},
                   "options": {"nesterov": False}, "dataset": "digits", "model": "mlp",
                   "steps": 2000},
        steps=(
            "Start the run (SGD, momentum 0.9) and watch the loss.",
            "Set momentum to 0 in the sidebar while it trains: the change is applied live "
            "through `_set_hyper`, and the loss slows down.",
            "On the **Landscape** page pick *ill_conditioned* and race `sgd` and `adam`: "
            "plain SGD zig-zags across the valley.",
        ),
        check="In Keras's form `v = momentum * v - lr * g; w = w + v`, how much longer is the "
              "step on a constant gradient once the buffer is full (momentum 0.9)?",
        answer="**10x**: the buffer tends to `-lr * g / (1 - momentum)`.",
    ),
    Lesson(
        key="diffgrad",
        title="DiffGrad's friction coefficient",
        question="What does DiffGrad change in Adam, and where can I see it?",
        page="train",
        run_setup={"optimizer": "diffgrad", "dataset": "digits", "model": "mlp",
                   "steps": 2000},
        steps=(
            "Start the run and open the **Slots** view: DiffGrad keeps Adam's `m` and `v` plus "
            "`prev_grad`, the last gradient.",
            "The step is Adam's times `xi = sigmoid(|prev_grad - grad|)`.",
            "Where the gradient stops changing, `xi` falls to 0.5 and the step is halved.",
        ),
        check="What range does the friction coefficient `xi` take?",
        answer="**[0.5, 1)**: `sigmoid(0) = 0.5` when the gradient does not change, towards 1 "
               "when it changes a lot. A DiffGrad step is at most Adam's.",
    ),
    Lesson(
        key="hypergradients",
        title="Hyper-gradients: forward, reverse, one-step",
        question="How can I get d(validation loss)/d(learning rate), and what does RTHO do "
                 "with it?",
        page="hypergrad",
        run_setup={"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.01,
                                                            "momentum": 0.9},
                   "dataset": "digits", "model": "mlp", "steps": 3000,
                   "hypergradients": ["learning_rate"], "reverse_horizon": 20},
        steps=(
            "On the **Train** page press Start (the setup follows `learning_rate`).",
            "Open **Hyper-gradients**: forward mode (exact), one-step (Baydin et al. 2018) "
            "and truncated reverse mode over the last T = 20 steps.",
            "Switch auto-tune on: RTHO moves the learning rate against its hyper-gradient every "
            "K steps.",
        ),
        check="At the first step, how does the one-step hyper-gradient compare with the exact "
              "forward-mode value?",
        answer="They are **equal**: the tangent starts at Z_0 = 0, so after one update only the "
               "last step contributes. Later they differ: one-step ignores the history.",
        minutes=8,
    ),
    Lesson(
        key="adamw",
        title="AdamW: decoupled decay vs L2",
        question="Why is AdamW's weight decay not the same as an L2 term in the loss?",
        page="train",
        run_setup={"optimizer": "adamw", "hyperparameters": {"weight_decay": 0.05},
                   "dataset": "digits", "model": "mlp", "steps": 2000},
        steps=(
            "Start the run and open the **Slots** view: `m` and `v` never see the decay.",
            "An L2 term would enter the gradient, be divided by `sqrt(v)` and decay weights "
            "with large gradients less.",
            "AdamW shrinks every weight by the same fraction `learning_rate * weight_decay` "
            "per step (the Keras 3 convention).",
        ),
        check="With a zero gradient and empty slots, by what factor does one AdamW step "
              "(learning_rate 0.001, weight_decay 0.05) scale a weight?",
        answer="**0.99995** = 1 - 0.001 x 0.05: only the decoupled decay acts.",
    ),
    Lesson(
        key="own_optimizer",
        title="Write your own optimizer",
        question="How do I write a custom OptimizerV2 (e.g. accumulated SGD), and how do I know "
                 "it is right?",
        page="plugins",
        steps=(
            "Copy `plugins/template_optimizer.py` (a commented pure-rule optimizer with every "
            "contract method) to a new file in the plugins folder.",
            "Restart the app: the **Plugins** page shows the contract check of every file.",
            "A plugin that passes appears in every optimizer list: train it on the Train page.",
        ),
        check="Which two methods hold the maths of a pure-rule optimizer?",
        answer="`coefficients(hypers, step)` (what `_prepare_local` puts in `apply_state`) and "
               "`update(grad, var, slots, coeffs)`; the adapter does the rest.",
        minutes=15,
    ),
    Lesson(
        key="keras3",
        title="What changed in Keras 3",
        question="My OptimizerV2 subclass broke on TensorFlow 2.16: where did `_set_hyper`, "
                 "`_create_slots` and `_resource_apply_dense` go?",
        page="keras3",
        page_state={"k3_optimizer": "adam", "k3_dtype": "float32"},
        steps=(
            "Read the mapping table: each Keras 2 method and where its job went in Keras 3.",
            "Compare the recorded calls of one `apply_gradients`: `_prepare_local` has no "
            "Keras 3 counterpart, `update_step` runs once per variable.",
            "The parity table trains the same rule behind both front ends on the same batches.",
        ),
        check="After 20 steps of Adam in float32, how far apart are the Keras 2 class and its "
              "Keras 3 twin?",
        answer="**0.0**: both call the same pure `coefficients` and `update`, so weights and "
               "every slot agree exactly (the page's tolerance is 1e-6).",
        minutes=6,
    ),
    Lesson(
        key="mixed_precision",
        title="Mixed precision: what a LossScaleOptimizer does to a step",
        question="I turned on mixed_float16 and some steps do nothing: what is the loss scale, "
                 "and where did my optimizer's hyperparameters go?",
        page="precision",
        page_state={"pd_policy": "mixed_float16"},
        steps=(
            "Press **Train with the LossScaleOptimizer**: the chart shows the loss scale over "
            "the steps and marks the skipped ones (a step whose gradients overflowed).",
            "Read the variables table: float32 weights and slots, float16 compute.",
            "Press **Try each expression**: which of the lab optimizer's attributes the wrapper "
            "forwards (`learning_rate`, `beta_1`) and which it does not (`_set_hyper`).",
        ),
        check="On a step whose scaled gradients overflow in float16, what happens to the "
              "weights, the slots and the loss scale (dynamic scaling, starting at 2**15)?",
        answer="Weights and slots stay **unchanged** (the step is skipped) and the loss scale "
               "halves, 32768 -> 16384; `iterations` still counts the step.",
    ),
)


def get(key: str) -> Lesson:
    """The lesson `key`.

    Raises:
        KeyError: no such lesson (the message lists the keys).
    """
    for lesson in LESSONS:
        if lesson.key == key:
            return lesson
    raise KeyError(f"lesson={key!r} is unknown; known: {', '.join(x.key for x in LESSONS)}")


__all__ = ["LESSONS", "Lesson", "PAGES", "PAGE_URLS", "get"]
