"""Lessons on Keras 3's newer algorithms: Lion, Adafactor, Muon, Schedule-free AdamW.

Part of the lessons table (`teaching.lessons.LESSONS`); the numbers in their claims and answers
are measured by `teaching.zoo_demos` and checked in `tests/test_lessons.py`. Pure data: no
TensorFlow, no Streamlit.
"""

from __future__ import annotations

from teaching.lesson_model import Claim, Lesson

ZOO_LESSONS: tuple[Lesson, ...] = (
    Lesson(
        key="lion",
        title="Lion: only the sign",
        question="Lion keeps a momentum but steps by its sign only: what does that do to the "
                 "step and to the hyper-gradients?",
        page="inside_step",
        page_state={"is_optimizer": "lion", "is_model": "dense"},
        steps=(
            "Press **Step** and compare the variable before and after: every coordinate moved "
            "by exactly `learning_rate` (weight decay 0), whatever its gradient's size.",
            "The direction is `sign(beta_1 m + (1 - beta_1) g)`; `m` (decay `beta_2`) only "
            "decides the sign. sign has derivative 0 wherever it is defined: on the "
            "**Hyper-gradients** page d(val loss)/d(beta_1) and d/d(beta_2) are exactly 0.",
            "The learning rate only stretches the path: with the signs fixed, w_T = w_0 - lr "
            "sum_t sign(c_t), so d(val loss)/d(lr) = -grad(val loss) . sum_t sign(c_t); it "
            "says nothing about what a different lr would do to the signs themselves.",
        ),
        check="After one Lion step (learning_rate 0.01, no weight decay), how far has a "
              "coordinate with gradient 1e-6 moved, compared with one whose gradient is 10?",
        answer="**1**x: both moved by 0.01, the learning rate; only the sign of the gradient "
               "counts.",
        minutes=4,
        stage=0,
        claims=(
            Claim(1, "|step| / learning_rate of every coordinate over 5 steps (min, max)",
                  "**1.0**, **1.0**", "lion_steps"),
            Claim(2, "d(val loss)/d(beta_1) and d/d(beta_2) after 10 steps",
                  "exactly **0** and **0**", "lion_zero_betas"),
            Claim(3, "d(val loss)/d(lr) over -grad . sum of the signs, after 10 steps",
                  "**1.0**: the same number", "lion_lr_from_signs"),
        ),
    ),
    Lesson(
        key="adafactor",
        title="Adafactor: factored second moments and the memory they save",
        question="How does Adafactor store Adam's second moment of an n x m matrix in n + m "
                 "numbers, and does Keras keep the saving?",
        page="inside_step",
        page_state={"is_optimizer": "adafactor", "is_model": "dense"},
        steps=(
            "Press **Step** and read the slot shapes: a 2-D kernel gets `r` (one number per "
            "row), `c` (one per column) and `v`; a 1-D bias gets `v` and scalar placeholders.",
            "`v = r c / mean(r)` is rebuilt from the two factors at every step: the paper keeps "
            "only r and c (n + m numbers for n m weights).",
            "Keras 3 (and the lab, to compare every slot) also stores `v`: the saving is in "
            "what the rule reads, not in what is kept.",
        ),
        check="For a 256 x 256 kernel, how many numbers do r and c hold together, and how many "
              "does Adam's v?",
        answer="**512** against 65,536: the factored statistics are 128x smaller.",
        minutes=4,
        stage=0,
        claims=(
            Claim(2, "elements of r, c and v of a 256 x 256 kernel (the lab's slots)",
                  "**256**, **256**, **65536**", "adafactor_slots"),
        ),
    ),
    Lesson(
        key="muon",
        title="Muon: orthogonalised updates",
        question="What does Muon's Newton-Schulz iteration do to an update matrix, and which "
                 "variables does Keras give it?",
        page="inside_step",
        page_state={"is_optimizer": "muon", "is_model": "dense"},
        steps=(
            "Press **Step**: the 2-D kernel has only `m` (its `v` is a scalar placeholder: "
            "Muon variables take the Muon step); the bias has `m` and `v` (AdamW step).",
            "Five Newton-Schulz steps map the momentum's singular values near 1: the update "
            "is close to U V^T, every direction of the matrix moved alike.",
            "The step is scaled by sqrt(max(rows, columns)) * rms_rate, so its RMS is about "
            "rms_rate times the learning rate, like AdamW's (Liu et al. 2025).",
        ),
        check="Which variables of a model does Keras 3's Muon update with the Muon step by "
              "default?",
        answer="Every **2**-D variable (the output layer's kernel too) except those whose path "
               "contains 'embedding'; all others take AdamW.",
        minutes=5,
        stage=0,
        claims=(
            Claim(2, "smallest and largest singular value of NS5(G), G Gaussian 64 x 32",
                  "**0.68** and **1.11**", "muon_singular_values"),
            Claim(3, "RMS of one Muon step over the learning rate (64 x 32, rms_rate 0.2)",
                  "**0.17**", "muon_update_rms"),
        ),
    ),
    Lesson(
        key="schedule_free",
        title="Schedule-free: two iterates instead of a schedule",
        question="How can an optimizer do without a learning-rate schedule, and why does "
                 "Keras 3 on TensorFlow not follow the paper?",
        page="conventions",
        page_state={"cv_family": "Schedule-free AdamW (live reference vs snapshot)"},
        steps=(
            "Schedule-free AdamW keeps z (an Adam-like iterate) and x, a weighted average of "
            "every z; the gradient is taken at y = (1 - beta_1) z + beta_1 x, which the "
            "variables hold. The average does the annealing a schedule would do, without "
            "knowing the run's length; evaluate on x (the lab's runs do).",
            "The newest z's weight in the average is gamma_t**2 / sum gamma_i**2: 1 at step 1, "
            "then about 2 / (t + 1) while gamma_t grows with sqrt(1 - beta_2**t).",
            "Keras 3.15 keeps `momentum_old = momentum.value`: on TensorFlow a live reference "
            "to the variable, read after it was updated. x_old is then rebuilt from the new z "
            "and y becomes the plain mean of the z iterates; `read_value()` would have copied. "
            "The same lesson as `self.t_cur = 5` vs `_set_hyper`.",
        ),
        check="In Keras 3.15 on TensorFlow, what does beta_1 change in ScheduleFreeAdamW's "
              "weights?",
        answer="**0**: with x_old rebuilt from the updated z, y_new = (1 - 1/t) y + z_new / t; "
               "beta_1 cancels out.",
        minutes=6,
        stage=0,
        claims=(
            Claim(2, "weight of the newest z in x at steps 1, 2, 3, 10 (the lab's paper form)",
                  "**1.0**, **0.667**, **0.500**, **0.182**", "schedule_free_weights"),
            Claim(3, "max |y - mean of the z iterates| after 30 steps, Keras 3 on TensorFlow",
                  "**0.0**", "schedule_free_live_mean"),
        ),
    ),
)

__all__ = ["ZOO_LESSONS"]
