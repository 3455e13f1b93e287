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
