"""Measured costs of the learning-rate range test and the landscape along the path, shown in
the pages' cost meters. Measured with `bench/bench_lr_range.py` (digits MLP 64-256-256-10,
Adam, batch 128, float32, 2 CPU cores shared with other work; medians of 30, interleaved):
ratios are to the plain train step measured in the same loop. TensorFlow-free.
"""

SOURCE = "measured by bench/bench_lr_range.py on the default model (2 CPU cores)"
MEASURED = {
    "plain_step_ms": 0.0,  # Engine.step(record=False)
    "range_step_ratio": 0.0,  # one step of the range test's copy / a plain step
    "range_sweep_s": 0.0,  # copy + 200 steps of the default sweep
    "path_per_step_ratio": 0.0,  # one path point every 20 steps (10,000-step run) / a step
    "grid_row_ratio": 0.0,  # 21 grid losses / a step (each of the run's first 21 steps)
    "line_ratio": 0.0,  # 25 losses of the start->end line / a step
}
