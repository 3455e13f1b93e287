"""schedules: the learning-rate schedules a run may use, in four views of one allow-list.

    table          `SCHEDULE_SPECS`: each allow-listed Keras class's parameters, kinds, defaults
                   and UI ranges; validation and the link text form. TensorFlow-free: the
                   server, settings/ and the CLI read it.
    preview        the curves in NumPy (`schedule_curve`, `preview_points`, `schedule_marks`) for
                   the Train page's preview and the charts' regime marks. TensorFlow-free;
                   tested against Keras's own classes (tests/test_schedule_figures.py).
    differentiable the same formulas in TensorFlow with every float parameter a tensor that may
                   carry a tangent (`learning_rate`): the hyper-gradient engine's d lr / d param.
                   Tested against Keras's own classes (tests/test_schedule_math.py).
    live           `LiveSchedule`: a run's Keras schedule object with its numbers in variables.

The Keras objects themselves (the allow-list `ALLOWED_SCHEDULES`, `schedule_from_config`,
`schedule_to_config`) are `optimizers.keras_schedules`: an optimizer's `from_config` reads a
schedule dict with them, so they sit below this package.

Layering: settings -> schedules -> optimizers (engine, hypergrad, runs, components and views may
import it too). `table` and `preview` import nothing of the lab.

Formulas (tf_keras 2.21, `tf_keras.optimizers.schedules.<Class>.__call__`; s = the optimizer's
`iterations`, 0 at the first step; the tf_keras classes are the reference both views are tested
against):

* ExponentialDecay: lr0 * decay_rate ** p, p = s / decay_steps (floor(p) if staircase).
* InverseTimeDecay: lr0 / (1 + decay_rate * p), p as above.
* PiecewiseConstantDecay: values[0] for s <= boundaries[0], values[i] for
  boundaries[i-1] < s <= boundaries[i], values[-1] for s > boundaries[-1].
* PolynomialDecay: (lr0 - end) * (1 - p) ** power + end, p = min(s, decay_steps) / decay_steps;
  with cycle, p = s / (decay_steps * max(1, ceil(s / decay_steps))).
* CosineDecay (Loshchilov & Hutter 2017, SGDR, arXiv:1608.03983, eq. 5 without restarts):
  s' = min(s, decay_steps), lr0 * ((1 - alpha) * 0.5 * (1 + cos(pi s' / decay_steps)) + alpha).
  With warm-up (`warmup_target` not None; Goyal et al. 2017, arXiv:1706.02677, sec. 2.2):
  s' = min(s, warmup_steps + decay_steps); for s' < warmup_steps the linear ramp
  lr0 + (warmup_target - lr0) * s' / warmup_steps, then the cosine decay from warmup_target
  at s' - warmup_steps.
* CosineDecayRestarts (SGDR, eq. 5 with restarts): f = s / first_decay_steps; restart
  i = floor(f) and f -= i if t_mul == 1, else i = floor(log(1 - f (1 - t_mul)) / log t_mul),
  f = (f - (1 - t_mul**i) / (1 - t_mul)) / t_mul**i; then
  lr0 * ((1 - alpha) * 0.5 * m_mul**i * (1 + cos(pi f)) + alpha).
* Legacy `decay` of OptimizerV2 `_decayed_lr`: lr / (1 + decay * iterations).
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads: `live` and `differentiable` import it)
