"""Training-dynamics diagnostics recorded beside a run: sharpness and the edge of stability,
update/weight ratios, the gradient noise scale.

Modules (each one job): `catalog` (TF-free: row names, settings, thresholds' text, the
figures' vocabulary), `hessian` (Hessian-vector products, forward-over-reverse), `sharpness`
(Lanczos, preconditioners, stability thresholds), `update_ratio`, `noise_scale`, `recorder`
(the one object the run loop calls after each step). Nothing is imported here: the pages
import `engine.diagnostics.catalog` without TensorFlow.
"""
