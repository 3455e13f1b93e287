"""A prepared engine: built, traced and rehearsed ahead of a run, then put back as new.

A run host (`runs.process.run_host`) has TensorFlow imported before any run needs it; what a run
still pays after Start is building its `Engine` (data on the device, model, optimizer slots,
tracing the train and eval steps, without AutoGraph (`engine.compiled`): ~0.5 s here) and the
first call of each traced function (graph optimisation: ~0.2 s; in graph mode each recording
level is its own function, traced on first use: another 0.15-0.3 s at steps 2 and 1,001).
`prepare(config, device)` pays all of them ahead for the configuration a run is most likely to
ask for (the Train page's default Setup): it builds the engine, runs one evaluation and one
train step at every recording level, then restores every model variable, every optimizer
variable (slots, wrappers' inner slots, hyperparameters, `iterations`) and the batch order from
copies taken before, bit for bit. A run whose config `can_serve` then adopts it and trains
exactly as a freshly built engine would (tests/test_prepared_engine.py).

What may differ between the prepared config and a run's for it to serve: only `steps`,
`eval_every` and the diagnostics' settings, which the run loop reads and the traced step does
not; anything else (seed,
optimizer, hyperparameters, data, dtype, compiler, device...) builds a fresh engine.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from engine.train_step import Engine
from settings.run_config import RunConfig

# RunConfig fields a prepared engine may differ in: read by the run loop, not by the trace.
ADOPTABLE = frozenset({"steps", "eval_every",
                       # the diagnostics (`engine.diagnostics.recorder`) read them per run
                       "update_ratio", "update_ratio_every", "sharpness", "sharpness_every",
                       "noise_scale", "noise_scale_every"})


def _state(engine: Engine) -> list[Any]:  # tf.Variable objects
    """Every variable a step can change: the model's, and the optimizer's with its inner
    optimizer's (a wrapper's slots and `iterations`), each once."""
    found, seen = [], set()
    optimizer = engine.optimizer
    groups = [engine.model.variables]
    while optimizer is not None:
        groups.append(optimizer.variables())
        optimizer = getattr(optimizer, "inner", None)
    for group in groups:
        for variable in group:
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found


class PreparedEngine:
    """An `Engine` built and rehearsed for `config`, restored to its freshly built state.

    Args:
        config: the run config to prepare (typically `settings.fields.page_defaults()`).
        device: logical device name, as `Engine`.

    Attributes:
        engine: the engine, or None once a run adopted it (it serves once).
    """

    def __init__(self, config: RunConfig, device: str):
        self.config, self.device = config, device
        engine = Engine(config, device)
        variables = _state(engine)
        saved = [np.array(v.numpy(), copy=True) for v in variables]
        order = copy.deepcopy(engine.order)
        engine.evaluate()
        for level in (dict(record=False), dict(record=True),
                      dict(record=True, with_histograms=True)):
            engine.step(**level)[0].numpy()  # each recording level's first call, paid here
        for variable, value in zip(variables, saved):
            variable.assign(value)
        engine.order = order
        self.engine: Engine | None = engine

    def can_serve(self, config: RunConfig, device: str) -> bool:
        """True when a run of `config` on `device` may adopt this engine (see the module)."""
        if self.engine is None or device != self.device:
            return False
        mine = self.config.model_dump()
        theirs = config.model_dump()
        return all(mine[k] == theirs[k] for k in mine if k not in ADOPTABLE)

    def adopt(self, config: RunConfig) -> Engine:
        """The engine, now configured as `config` (only `ADOPTABLE` fields differ); serves once.

        Raises:
            ValueError: `config` differs in a field the trace depends on, or it served already.
        """
        if self.engine is None or not self.can_serve(config, self.device):
            raise ValueError("this prepared engine cannot serve that config (or it served)")
        engine, self.engine = self.engine, None
        engine.config = config
        return engine


_PREPARED: dict[str, Any] = {"engine": None}


def keep(prepared: PreparedEngine | None) -> None:
    """Hold `prepared` for the next run of this process (`take`)."""
    _PREPARED["engine"] = prepared


def take(config: RunConfig, device: str) -> Engine:
    """The held prepared engine when it can serve `config` on `device`, else a new `Engine`
    (built as in a fresh process: the prepared one is dropped and Keras's session cleared)."""
    prepared = _PREPARED["engine"]
    _PREPARED["engine"] = None
    if prepared is not None and prepared.can_serve(config, device):
        return prepared.adopt(config)
    if prepared is not None:
        import tf_keras

        del prepared
        tf_keras.backend.clear_session()
    return Engine(config, device)
