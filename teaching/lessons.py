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

from teaching.lesson_model import PAGE_URLS, PAGES, STAGES, Claim, Lesson
from teaching.lessons_zoo import ZOO_LESSONS

_CORE: tuple[Lesson, ...] = (
    Lesson(
        key="momentum",
        title="Momentum on an ill-conditioned valley",
        question="What does momentum buy on a narrow valley, and is Nesterov any different?",
        page="train",
        run_setup={"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.01,
                                                            "momentum": 0.0},
                   "options": {"nesterov": False}, "dataset": "digits", "model": "mlp",
                   "steps": 2000},
        page_state={"ls_function": "ill_conditioned", "ls_optimizers": ["sgd"],
                    "ls_x0": -4.0, "ls_y0": 1.0, "ls_steps": 100, "ls_step": 100,
                    "ls_hp_sgd_learning_rate": 0.018,
                    "ls_hp_sgd_momentum": 0.0},
        steps=(
            "Start the run (SGD, learning rate 0.01, momentum 0) and read the validation loss "
            "at step 200.",
            "Start a second run with momentum 0.9 in the sidebar, and compare both on the "
            "**Runs** page: the same learning rate, a much lower loss.",
            "On the **Landscape** page (*ill_conditioned*, SGD, learning rate 0.018, momentum "
            "0): plain SGD zig-zags across the steep direction and crawls along the shallow one.",
            "Set momentum to 0.9 under *sgd hyperparameters* in the sidebar: the path reaches the "
            "minimum in 100 steps.",
        ),
        check="In Keras's form `v = momentum * v - lr * g; w = w + v`, how much longer is the "
              "step on a constant gradient once the buffer is full (momentum 0.9)?",
        answer="**10x**: the buffer tends to `-lr * g / (1 - momentum)`.",
        stage=0,
        claims=(
            Claim(2, "validation loss at step 200, momentum 0 vs 0.9 (seed 0)",
                  "**0.72** vs **0.13**", "momentum_digits"),
            Claim(3, "sign changes of the steep coordinate's step (`y`) in the first 50 steps",
                  "**49** of 49: every step crosses the valley", "momentum_zigzag"),
            Claim(4, "distance to the minimum at step 100, momentum 0 vs 0.9",
                  "**0.65** vs **0.022**", "momentum_landscape"),
        ),
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
            "Step again, ten times or more: `lr_t = learning_rate * sqrt(1 - beta_2**t) / "
            "(1 - beta_1**t)` first falls (the `beta_1` correction fades in ~20 steps, the "
            "`beta_2` one in thousands), reaches its lowest near step 12, then climbs back "
            "towards `learning_rate` over thousands of steps.",
            "`m` and `v` start at 0, and `v` (`beta_2` = 0.999) starts much further below its "
            "mean than `m`: without the correction, the first step would be `0.1 g / "
            "sqrt(0.001 g**2)`, about 3x too large, not too small.",
        ),
        check="With the defaults (learning_rate 0.001, beta_1 0.9, beta_2 0.999), what is "
              "`lr_t` at step 1?",
        answer="`lr_t = 0.001 * sqrt(1 - 0.999) / (1 - 0.9)` = **0.000316** (0.316 x the "
               "learning rate).",
        minutes=4,
        stage=0,
        claims=(
            Claim(2, "`lr_t` in *apply_state* at steps 1, 2, 10, 12, 30",
                  "falls, then rises: **0.000316**, **0.000235**, **0.000153**, **0.000152**, "
                  "**0.000180**", "adam_lr_t"),
            Claim(3, "the first step without the correction, over the corrected one",
                  "about **3.16**x (`(1 - beta_1) / sqrt(1 - beta_2)`)", "adam_uncorrected"),
        ),
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
        stage=0,
        claims=(
            Claim(3, "a weight after one AdamW step with a zero gradient, over its value before",
                  "**0.99995**", "adamw_factor"),
        ),
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
        stage=0,
        claims=(
            Claim(3, "DiffGrad's step over Adam's when the gradient repeats",
                  "**0.5**", "diffgrad_ratio"),
        ),
    ),
    Lesson(
        key="edge_of_stability",
        title="Raise the learning rate and watch sharpness settle at 2/lr",
        question="Why does a learning rate above a threshold diverge, and why does training "
                 "below it \"self-stabilise\" at the edge?",
        page="train",
        run_setup={"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.2,
                                                            "momentum": 0.0},
                   "options": {"nesterov": False}, "dataset": "digits", "model": "mlp",
                   "label_noise": 0.3, "batch_size": 1347, "steps": 3000,
                   "sharpness": "on", "sharpness_every": 25},
        steps=(
            "Start the run: plain SGD at learning rate 0.2 on all 1,347 training examples per "
            "step (full-batch gradient descent), 30 % noisy labels. Open the **Dynamics** view: "
            "the sharpness λ₁(H), the top eigenvalue of the training loss's Hessian, starts "
            "far below the dashed line 2/lr = 10.",
            "Watch it rise (progressive sharpening) until it reaches 2/lr, where the chart marks "
            "the step; there it stops rising. On a quadratic, gradient descent diverges along "
            "any direction whose curvature exceeds 2/lr (each step multiplies the error by "
            "1 - lr·λ); the network instead hovers at that edge (Cohen et al. 2021).",
            "Raise the learning rate to 0.4 in the sidebar (a live `_set_hyper`): the "
            "threshold line drops to 5, the loss jumps for a few steps, and within about 100 "
            "steps the sharpness falls to the new line: training moved itself to a flatter "
            "region where 0.4 is stable.",
        ),
        check="With SGD and Polyak momentum 0.9 at learning rate 0.01, where is the threshold "
              "line drawn?",
        answer="At **380** = (2 + 2 x 0.9) / 0.01: momentum raises the threshold (Nesterov "
               "lowers it to (2 + 2β)/((1 + 2β) lr) = 136).",
        minutes=6,
        stage=0,
        claims=(
            Claim(2, "the first recorded step where the sharpness reached 2/lr = 10 (within "
                     "2 %; sharpness every 25 steps, seed 0), and its value there",
                  "step **425**, λ₁ = **10.0** (from 2.8 at step 1); it then hovers at "
                  "9.8-10.2", "eos_reached"),
            Claim(3, "the sharpness 200 steps after raising the learning rate to 0.4 at step "
                     "500, against the new 2/lr = 5",
                  "**4.18**: it fell from about 10 with the threshold, and drifts lower as "
                  "the loss approaches 0", "eos_settles"),
        ),
    ),
    Lesson(
        key="lr_range",
        title="Which learning rate? The range test",
        question="Which learning rate should I pick, and above which one does training diverge?",
        page="train",
        run_setup={"optimizer": "sgd", "hyperparameters": {"learning_rate": 0.01,
                                                            "momentum": 0.0},
                   "dataset": "digits", "model": "mlp", "label_noise": 0.3, "steps": 2000},
        steps=(
            "Start the run, open the **LR range test** view and run a test *from the start "
            "(θ₀)*: a copy of the run trains 200 steps while the learning rate grows "
            "geometrically from 1e-5 to 10 (Smith 2017). The run itself does not move.",
            "Read the marks on the smoothed loss: the steepest descent (a good rate to train "
            "at) and the divergence point, the stability limit 2/λ the loss's blow-up implies.",
            "Pick *steepest descent* and press **Use this learning rate**: a live `_set_hyper` "
            "of the run, no retrace.",
        ),
        check="On a quadratic whose largest curvature is L = 4, above which learning rate does "
              "plain SGD diverge?",
        answer="**0.5** = 2/L: each step multiplies the top mode by |1 - lr L|, which exceeds 1 "
               "above 2/L. The range test reads the curvature off the rate at which the loss "
               "blows up, and finds 2/L within 20% on a noisy quadratic "
               "(`tests/test_lr_range.py`).",
        minutes=6,
        stage=0,
        claims=(
            Claim(2, "the marks of the test from the start (SGD, digits MLP, seed 0): steepest "
                     "descent and divergence point",
                  "**0.135** and **2.82**", "lr_range_marks"),
        ),
    ),
    Lesson(
        key="path_landscape",
        title="The landscape along the path",
        question="Why do Adam and SGD end in different places, and what does the loss look like "
                 "between the start and the end?",
        page="train",
        run_setup={"optimizer": "adam", "dataset": "digits", "model": "mlp",
                   "label_noise": 0.3, "steps": 200, "path_landscape": 7},
        steps=(
            "Start the run (Adam, *path landscape seed* 7), then the same setup with SGD: both "
            "start from the same weights θ₀, so they share one plane through θ₀ along two "
            "filter-normalised random directions (Li et al. 2018).",
            "Open the **Landscape** page, *along a run's path*, and pick both runs: contours of "
            "the loss on the plane, each path projected onto it, and the loss on the straight "
            "line from θ₀ to each end point (Goodfellow et al. 2015).",
            "Read how far each run went and how much of that distance the plane shows.",
        ),
        check="Why does the projected path look so short next to the distance the run travelled?",
        answer="Two random directions in ~85,000 dimensions are nearly orthogonal to any "
               "fixed direction: the plane shows **0.47**% of the distance Adam travelled in "
               "200 steps. The line from θ₀ to the end point shows the rest: the loss falls "
               "along it without a barrier.",
        minutes=6,
        stage=0,
        claims=(
            Claim(3, "the distance from θ₀ after 200 steps, Adam vs SGD, and the share of it "
                     "the plane shows (%)",
                  "**7.60** vs **1.16**; **0.47** vs **0.18**", "path_distances"),
        ),
    ),
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
        stage=1,
        claims=(
            Claim(2, "`value_returned_after` of the closure row and of the `_set_hyper` row",
                  "**0.0** and **5.0**", "set_hyper_values"),
        ),
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
        stage=1,
        claims=(
            Claim(3, "the number of slot names before and after one step",
                  "**0** before, **2** after (`m`, `v`)", "slot_names"),
        ),
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
        stage=1,
        claims=(
            Claim(1, "`_prepare_local` calls in one step of the dense model (2 variables)",
                  "**1**", "prepare_local_calls"),
        ),
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
        stage=1,
        claims=(
            Claim(3, "rows of the embedding (of 6) that change in one sparse step",
                  "**3**: the distinct token ids of the batch", "sparse_rows"),
        ),
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
        stage=1,
        claims=(
            Claim(2, "contract checks the template plugin fails", "**0**", "template_contract"),
        ),
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
        stage=2,
        claims=(
            Claim(2, "|one-step - exact| / |exact| after the first update",
                  "**0** (equal)", "one_step_first_update"),
        ),
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
        stage=2,
        claims=(
            Claim(3, "the largest |difference| in the parity table (Adam, float32, 20 steps)",
                  "**0.0**", "keras3_parity"),
        ),
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
        stage=2,
        claims=(
            Claim(1, "the loss scale before and after the first skipped step",
                  "**32768** -> **16384**", "loss_scale_halves"),
        ),
    ),
)

# Keras 3's newer algorithms join the first part of the path, after the core lessons of that
# part (a stable sort keeps the table's order within a stage).
LESSONS: tuple[Lesson, ...] = tuple(sorted(_CORE + ZOO_LESSONS, key=lambda lesson: lesson.stage))


def get(key: str) -> Lesson:
    """The lesson `key`.

    Raises:
        KeyError: no such lesson (the message lists the keys).
    """
    for lesson in LESSONS:
        if lesson.key == key:
            return lesson
    raise KeyError(f"lesson={key!r} is unknown; known: {', '.join(x.key for x in LESSONS)}")


__all__ = ["LESSONS", "STAGES", "Claim", "Lesson", "PAGES", "PAGE_URLS", "get"]
