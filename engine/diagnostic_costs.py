"""Measured costs of the learning-rate range test and the landscape along the path, shown in
the pages' cost meters. Measured with `bench/bench_lr_range.py` (digits MLP 64-256-256-10,
Adam, batch 128, float32; medians of 30, interleaved) three times on 2 CPU cores shared with
~6 other sessions (load average 28-34): ratios are to the plain train step measured in the
same loop, which is what survives such load; each value is the median of the three runs
(spread in the comments). Absolute times are from the least loaded run. TensorFlow-free.
"""

SOURCE = ("measured by bench/bench_lr_range.py on the default model, 2 CPU cores under load; "
          "ratios to the plain train step measured in the same loop")
MEASURED = {
    "plain_step_ms": 2.0,  # Engine.step(record=False); 2.0-25.6 ms with the machine's load
    "range_step_ratio": 1.09,  # one step of the range test's copy / a plain step (0.89-1.80)
    "range_sweep_s": 3.6,  # copy (a new model, optimizer and trace) + 200 steps (3.2-9.2 s)
    "path_per_step_ratio": 0.14,  # one path point every 20 steps (10,000-step run) (0.13-0.15)
    "grid_row_ratio": 58.0,  # 21 grid losses / a step, on each of the first 21 steps (34-67)
    "line_ratio": 45.0,  # 25 losses of the start->end line / a step, each quarter (37-68)
}
