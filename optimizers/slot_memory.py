"""Slot memory: the bytes an optimizer's slots take per trainable parameter.

`BYTES_PER_PARAMETER` holds what `measure` returns for every built-in on the lab's default model
(MLP 64-256-256-10, float32: 85,002 parameters), measured from the slots each class creates
(`tests/test_keras3_algorithms.py` measures them again and compares). The table is plain data so that the Train page's optimizer picker (TensorFlow-free)
can show it in its help. Scalar slots (Nadam's momentum cache, Muon's and Adafactor's
placeholders, schedule-free's weight sum) count too; a wrapper counts its own and its inner
optimizer's slots.
"""

from __future__ import annotations

# registry name -> slot bytes / parameter on the default MLP (float32: 4 bytes per number)
BYTES_PER_PARAMETER: dict[str, float] = {
    "adam": 8.0, "sgd": 4.0, "adamw": 8.0, "rmsprop": 8.0, "adagrad": 4.0, "diffgrad": 12.0,
    "adadelta": 8.0, "adamax": 8.0, "ftrl": 8.0, "nadam": 8.0, "accumulation": 12.0,
    "lookahead": 12.0, "moving_average": 12.0, "lion": 4.0, "lamb": 8.0, "adafactor": 4.05,
    "muon": 4.02, "schedule_free_adamw": 8.0,
}


def default_variables() -> list:
    """The default MLP's trainable variables (64-256-256-10, float32; TensorFlow)."""
    import tf_keras

    model = tf_keras.Sequential([tf_keras.layers.Dense(256, activation="relu"),
                                 tf_keras.layers.Dense(256, activation="relu"),
                                 tf_keras.layers.Dense(10)])
    model.build((None, 64))
    return list(model.trainable_variables)


def measure(name: str, variables: list | None = None, digits: int = 2) -> float:
    """Slot bytes per parameter of registry optimizer `name` (default options) on `variables`
    (default: `default_variables()`; one step with zero gradients is applied to them: weight
    decay moves them a little), rounded to `digits` decimals. Imports TensorFlow.

    Raises:
        KeyError: unknown name.
    """
    import numpy as np
    import tensorflow as tf

    from optimizers import registry

    variables = default_variables() if variables is None else variables
    opt = registry.create(name)
    # one real step with zero gradients: exactly the slots training creates (a wrapper's inner
    # optimizer's too, where it keeps its own)
    opt.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    owners = [opt] + ([opt.inner] if getattr(opt, "inner", None) is not None else [])
    slots = [s for owner in owners for s in owner.variables()
             if s is not owner.iterations
             and not any(s is h for h in getattr(owner, "_hyper", {}).values())]
    slots = list({id(s): s for s in slots}.values())
    slot_bytes = sum(int(np.prod(s.shape)) * s.dtype.size for s in slots
                     if s.dtype.is_floating and s.shape.rank is not None)
    parameters = sum(int(np.prod(v.shape)) for v in variables)
    return round(slot_bytes / parameters, digits)


def help_table() -> str:
    """The picker's help: one Markdown line per optimizer, "name: N bytes of slots per
    parameter"."""
    lines = [f"- `{name}`: {value:g} bytes/parameter" for name, value in
             BYTES_PER_PARAMETER.items()]
    return ("Slot memory on the default MLP (float32), from the real slots:\n\n"
            + "\n".join(lines))


__all__ = ["BYTES_PER_PARAMETER", "default_variables", "help_table", "measure"]
