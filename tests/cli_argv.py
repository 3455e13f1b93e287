"""The command line that gives a `RunConfig`: the round-trip tests of the CLI flags write a
config as flags with it, parse them with `lab_cli.cli` and compare."""

from __future__ import annotations

import json

from settings import fields
from settings.cli_flags import flag
from settings.run_config import RunConfig


def to_argv(config: RunConfig) -> list[str]:
    """The flags that give `config` (every field; inverse of `values_from_args`)."""
    argv: list[str] = []
    for field in fields.names():
        value = getattr(config, field)
        kind = fields.kind(field)
        if field == "hyperparameters":
            for name, number in value.items():
                argv += [flag(name), repr(float(number))]
        elif field == "options":
            for name, option in value.items():
                if isinstance(option, bool):
                    argv.append(flag(name) if option else "--no-" + flag(name)[2:])
                else:
                    argv += [flag(name), str(option)]
        elif kind == "mapping":
            for name, number in value.items():
                argv += [flag(field), f"{name}={float(number)!r}"]
        elif kind == "names":
            if value:
                argv += [flag(field), *value]
        elif kind == "schedule":
            if value:
                argv += [flag(field), json.dumps(value, separators=(",", ":"))]
        elif kind == "float":
            argv += [flag(field), repr(float(value))]
        else:
            argv += [flag(field), str(value)]
    return argv
