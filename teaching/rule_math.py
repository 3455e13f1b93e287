"""Each optimizer's update rule as LaTeX, with its source, for the pages that show an optimizer.

`RULES[name]` is the rule of registry optimizer `name` as the lab computes it (the same maths
as its `coefficients` + `update`, see the class docstrings), written per variable w with
gradient g at step t = iterations + 1. The source of the pure functions a class's
`coefficients` / `update` call is `optimizers.rule_source.pure_rule_sources`.

No TensorFlow is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleMath:
    """One optimizer's update rule.

    Attributes:
        latex: the rule, one `aligned` block (rendered with `st.latex`).
        source: paper, year, arXiv id and equation / algorithm.
        note: a convention worth knowing (Markdown), or "".
    """

    latex: str
    source: str
    note: str = ""


ADAM = RuleMath(
    r"""\begin{aligned}
m_t &= \beta_1 m_{t-1} + (1-\beta_1)\, g_t \\
v_t &= \beta_2 v_{t-1} + (1-\beta_2)\, g_t^2 \\
\mathrm{lr}_t &= \eta\,\sqrt{1-\beta_2^t}\,/\,(1-\beta_1^t) \\
w_t &= w_{t-1} - \mathrm{lr}_t\, m_t / (\sqrt{v_t} + \hat\epsilon)
\end{aligned}""",
    "Kingma & Ba 2015, arXiv:1412.6980, Algorithm 1 and the end of sec. 2",
    "Keras's epsilon-hat form: the bias corrections are folded into `lr_t` and epsilon is "
    "added to the uncorrected sqrt(v) (the paper adds it to sqrt(v-hat)). With `amsgrad` "
    "(Reddi et al. 2018, Algorithm 2) sqrt(v) is replaced by the running max.",
)

RULES: dict[str, RuleMath] = {
    "adam": ADAM,
    "adamw": RuleMath(
        r"""\begin{aligned}
w &\leftarrow w - \eta\,\lambda\, w \qquad\text{(decoupled decay, first)} \\
m_t,\ v_t,\ w_t &= \text{Adam step from } w
\end{aligned}""",
        "Loshchilov & Hutter 2019, arXiv:1711.05101, Algorithm 2",
        "The decay is scaled by the learning rate (Keras 3 and PyTorch); it never enters the "
        "gradient, so m and v do not see it.",
    ),
    "sgd": RuleMath(
        r"""\begin{aligned}
b_t &= \mu\, b_{t-1} - \eta\, g_t \\
w_t &= w_{t-1} + b_t \qquad\text{(Nesterov: } w_t = w_{t-1} + \mu\, b_t - \eta\, g_t)
\end{aligned}""",
        "Polyak 1964; Sutskever et al. 2013 (ICML), eq. 1-4",
        "Keras's form `v = m v - lr g`; PyTorch's `v = m v + g; w -= lr v` differs when the "
        "learning rate changes during the run.",
    ),
    "rmsprop": RuleMath(
        r"""\begin{aligned}
r_t &= \rho\, r_{t-1} + (1-\rho)\, g_t^2 \qquad \bar g_t = \rho\, \bar g_{t-1} + (1-\rho)\, g_t
\ \text{(centered)} \\
d_t &= r_t - \bar g_t^2\ \text{(centered) or } r_t \\
b_t &= \mu\, b_{t-1} + \eta\, g_t / \sqrt{d_t + \epsilon} \qquad w_t = w_{t-1} - b_t
\end{aligned}""",
        "Tieleman & Hinton 2012, Coursera lecture 6.5; Graves 2013, arXiv:1308.0850, eq. 38-45",
        "Keras puts epsilon inside the square root when momentum > 0 and outside, "
        "`g / (sqrt(d) + eps)`, when momentum = 0.",
    ),
    "adagrad": RuleMath(
        r"""\begin{aligned}
a_t &= a_{t-1} + g_t^2 \\
w_t &= w_{t-1} - \eta\, g_t / (\sqrt{a_t} + \epsilon)
\end{aligned}""",
        "Duchi, Hazan & Singer 2011, JMLR 12, eq. 1 (diagonal form)",
    ),
    "diffgrad": RuleMath(
        r"""\begin{aligned}
m_t,\ v_t &\text{ as Adam} \\
\xi_t &= \operatorname{sigmoid}(|g_{t-1} - g_t|) \in [0.5, 1) \\
w_t &= w_{t-1} - \mathrm{lr}_t\, \xi_t\, m_t / (\sqrt{v_t} + \epsilon)
\end{aligned}""",
        "Dubey et al. 2019, arXiv:1909.11015, sec. III",
    ),
    "accumulation": RuleMath(
        r"""\begin{aligned}
A &\leftarrow A + g_t \\
\text{if } t \bmod k = 0:&\quad w \leftarrow \text{inner step}(A / k),\ A \leftarrow 0
\end{aligned}""",
        "gradient accumulation: k micro-batches of size B/k give the step of one batch of B",
    ),
    "adadelta": RuleMath(
        r"""\begin{aligned}
a_t &= \rho\, a_{t-1} + (1-\rho)\, g_t^2 \\
\Delta_t &= \sqrt{d_{t-1} + \epsilon}\,/\,\sqrt{a_t + \epsilon}\ \, g_t \\
d_t &= \rho\, d_{t-1} + (1-\rho)\, \Delta_t^2 \qquad w_t = w_{t-1} - \eta\, \Delta_t
\end{aligned}""",
        "Zeiler 2012, arXiv:1212.5701, Algorithm 1",
        "Keras multiplies the paper's unit-free step by a learning rate (default 0.001; the "
        "paper's step is lr = 1).",
    ),
    "adamax": RuleMath(
        r"""\begin{aligned}
m_t &= \beta_1 m_{t-1} + (1-\beta_1)\, g_t \qquad u_t = \max(\beta_2 u_{t-1}, |g_t|) \\
w_t &= w_{t-1} - \frac{\eta}{1-\beta_1^t}\, \frac{m_t}{u_t + \epsilon}
\end{aligned}""",
        "Kingma & Ba 2015, arXiv:1412.6980, sec. 7.1, Algorithm 2",
        "The paper has no epsilon; Keras adds it to u, PyTorch inside the max (Conventions).",
    ),
    "ftrl": RuleMath(
        r"""\begin{aligned}
n_t &= n_{t-1} + g_t^2 \qquad \sigma_t = (n_t^{-p} - n_{t-1}^{-p})/\eta \\
z_t &= z_{t-1} + g_t - \sigma_t w_{t-1} \\
w_t &= \begin{cases} 0 & |z_t| \le \lambda_1 \\
-\dfrac{z_t - \operatorname{sign}(z_t)\lambda_1}{(\beta + n_t^{-p})/\eta + 2\lambda_2} & \text{else}
\end{cases}
\end{aligned}""",
        "McMahan et al. 2013, KDD, Algorithm 1 (FTRL-Proximal); p = -learning_rate_power",
    ),
    "nadam": RuleMath(
        r"""\begin{aligned}
\mu_t &= \beta_1\left(1 - \tfrac12\, 0.96^{0.004\,t}\right) \qquad \Pi_t = \textstyle\prod_{i\le t}\mu_i \\
\hat m_t &= \frac{\mu_{t+1} m_t}{1 - \Pi_t \mu_{t+1}} + \frac{(1-\mu_t)\, g_t}{1-\Pi_t} \qquad
\hat v_t = \frac{v_t}{1-\beta_2^t} \\
w_t &= w_{t-1} - \eta\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)
\end{aligned}""",
        "Dozat 2016, ICLR workshop, Algorithm 2",
        "Keras 3 uses 0.96^t (no 0.004): its momentum schedule is 250x faster (Conventions).",
    ),
    "lion": RuleMath(
        r"""\begin{aligned}
w &\leftarrow w - \eta\lambda w \\
w_t &= w - \eta\, \operatorname{sign}(\beta_1 m_{t-1} + (1-\beta_1)\, g_t) \\
m_t &= \beta_2 m_{t-1} + (1-\beta_2)\, g_t
\end{aligned}""",
        "Chen et al. 2023, arXiv:2302.06675, Program 1",
        "Every coordinate moves by exactly the learning rate: sign has derivative 0, so "
        "d(val loss)/d(beta) is 0 and d/d(lr) only sees the step length.",
    ),
    "lamb": RuleMath(
        r"""\begin{aligned}
w &\leftarrow w - \eta\lambda w \\
u_t &= \hat m_t / (\sqrt{\hat v_t} + \epsilon) \qquad\text{(Adam's direction)} \\
w_t &= w - \eta\, \frac{\lVert w\rVert}{\lVert u_t\rVert}\, u_t
\end{aligned}""",
        "You et al. 2020, arXiv:1904.00962, Algorithm 2",
        "The trust ratio is per variable (one layer's tensor); as in Keras 3 the decay is not "
        "inside it.",
    ),
    "adafactor": RuleMath(
        r"""\begin{aligned}
\rho_t &= \min(\eta, 1/\sqrt t) \qquad \alpha_t = \max(\epsilon_2, \mathrm{RMS}(w))\,\rho_t
\qquad \hat\beta_t = 1 - t^{c} \\
R_t &= \hat\beta_t R_{t-1} + (1-\hat\beta_t)\,\mathrm{rowmean}(g_t^2 + \epsilon_1) \quad
C_t = \hat\beta_t C_{t-1} + (1-\hat\beta_t)\,\mathrm{colmean}(g_t^2 + \epsilon_1) \\
V_t &= R_t C_t / \mathrm{mean}(R_t) \qquad U_t = g_t/\sqrt{V_t} \\
w_t &= w_{t-1} - \alpha_t\, U_t / \max(1, \mathrm{RMS}(U_t)/d)
\end{aligned}""",
        "Shazeer & Stern 2018, arXiv:1804.04235, Algorithms 4-5",
        "An n x m matrix keeps n + m statistics instead of n m (1-D variables keep v).",
    ),
    "muon": RuleMath(
        r"""\begin{aligned}
\text{2-D } W:\ \ W &\leftarrow W - \eta\lambda W \qquad M_t = \mu M_{t-1} + G_t \\
O_t &= \mathrm{NS}_5(G_t + \mu M_t) \approx U V^\top\ \text{ of } U S V^\top \\
W_t &= W - \eta\, O_t\, \sqrt{\max(n, m)}\ r \\
\text{else:}\ \ & \text{AdamW with } \eta \cdot \text{adam\_lr\_ratio}
\end{aligned}""",
        "Jordan et al. 2024 (kellerjordan.github.io/posts/muon); Liu et al. 2025, "
        "arXiv:2502.16982",
        "NS5: X = G/||G||_F, five times X = aX + (bA + cA^2)X with A = XX^T. Keras 3 sends every "
        "2-D variable to Muon (the output kernel too) and embeddings to AdamW.",
    ),
    "schedule_free_adamw": RuleMath(
        r"""\begin{aligned}
y_t &= (1-\beta_1)\, z_t + \beta_1 x_t \qquad\text{(the variables hold } y) \\
v_t &= \beta_2 v_{t-1} + (1-\beta_2)\, g(y_t)^2 \qquad \gamma_t = \eta\sqrt{1-\beta_2^t} \\
z_{t+1} &= z_t - \gamma_t\, g(y_t)/(\sqrt{v_t}+\epsilon) - \gamma_t \lambda y_t \\
x_{t+1} &= (1-c_{t+1})\, x_t + c_{t+1} z_{t+1} \qquad c_{t+1} = \gamma_t^2/\textstyle\sum_{i\le t}\gamma_i^2
\end{aligned}""",
        "Defazio et al. 2024, arXiv:2405.15682, Algorithm 1",
        "Evaluate on x = (y - (1 - beta_1) z) / beta_1. `keras3_tf_compat=True` reproduces "
        "Keras 3.15 on TensorFlow, whose x_old is rebuilt from the updated z (Conventions).",
    ),
    "lookahead": RuleMath(
        r"""\begin{aligned}
w &\leftarrow \text{inner step}(w, g_t) \qquad\text{(every step)} \\
\text{if } t \bmod k = 0:&\quad \phi \leftarrow \phi + \alpha (w - \phi),\ w \leftarrow \phi
\end{aligned}""",
        "Zhang, Lucas, Hinton & Ba 2019, arXiv:1907.08610, Algorithm 1",
    ),
}


def rule_for(name: str) -> RuleMath | None:
    """The rule of registry optimizer `name`, or None (e.g. a plugin without an entry)."""
    return RULES.get(name)


__all__ = ["RULES", "RuleMath", "rule_for"]
