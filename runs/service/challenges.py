"""Class challenges: what a valid challenge is, the config a student may start under it, and
who may create, close, pin and join. No Streamlit, no TensorFlow.

A teacher (a caller with the teacher role, `runs.service.ownership.Caller.is_teacher`, or a
local caller) creates a challenge from a Train setup (`ChallengeSpec.base`, a `RunConfig`):
every setting of the base is FIXED for the students except the optimizer (one of
`optimizers`) and the hyperparameters named in `free`. A student starts a run under the
challenge with `start_challenge_run`: the config is checked against the fixed settings
(`check_config`, each difference named), the nickname is checked (`check_nickname`), the run
is started by `runs.service.control.start_run` (owned by the student's session as any run) and
linked in `challenge_runs`. Steering stays under today's ownership rules: a student steers
only the runs their session started; the teacher may stop any run (`stop_challenge_run`,
through `control.stop`, recorded with the run).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from optimizers import registry
from runs.service import control
from runs.service.ownership import LOCAL, Caller, NotOwner
from runs.store.challenges import OPEN, ChallengeTables
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

GOALS = {
    "val_loss_at_step": "lowest validation loss at step N",
    "steps_to_accuracy": "reach X validation accuracy in the fewest steps",
}
Goal = Literal["val_loss_at_step", "steps_to_accuracy"]
TITLE_CHARS = (1, 80)
NICKNAME_CHARS = (2, 24)
# Letters and digits of any script, then spaces, `_`, `-`, `.`: a name a class recognises,
# nothing a browser or Markdown could read as markup (pages escape it anyway).
NICKNAME_SYNTAX = re.compile(r"[^\W_][\w .-]*")
NICKNAME_ALLOWED = (f"{NICKNAME_CHARS[0]}-{NICKNAME_CHARS[1]} characters: letters, digits, "
                    "spaces, _ - . (starting with a letter or digit)")


class ChallengeError(ValueError):
    """A challenge, a nickname or a student's config refused; the message names the field and
    what it allows."""


class ChallengeSpec(BaseModel):
    """One challenge, as stored (`challenges.spec`, JSON).

    Fields:
        title: shown on the board, 1..80 characters.
        base: the teacher's Train setup (`RunConfig` as JSON); every setting of it is fixed for
            the students except `optimizer` and the hyperparameters named in `free`.
            Hyper-gradients must be off (a class of runs each carrying tangents would not fit
            the memory budget).
        optimizers: the optimizers a student may pick (registry names), including
            `base.optimizer`; one name = the optimizer is fixed.
        free: hyperparameter names a student may set (and change live); each is a
            hyperparameter of at least one allowed optimizer. Others stay at the base's value
            (or the optimizer's default when the base optimizer has no such hyperparameter).
        goal: `val_loss_at_step` (score = validation loss at step `goal_step`, nats, lower
            is better) or `steps_to_accuracy` (score = the first validation step at which
            validation accuracy >= `goal_accuracy`, fewer is better; validation runs every
            `base.eval_every` steps, so the score is a multiple of it or the last step).
        goal_step: N for `val_loss_at_step`: 1..`base.steps`, a multiple of `base.eval_every`
            or `base.steps` itself (validation happens only there).
        goal_accuracy: X for `steps_to_accuracy`, a fraction in (0, 1].
    """

    model_config = ConfigDict(extra="forbid")

    title: str
    base: dict[str, Any]
    optimizers: list[str] = Field(default_factory=list)
    free: list[str] = Field(default_factory=list)
    goal: Goal = "val_loss_at_step"
    goal_step: int | None = None
    goal_accuracy: float | None = None

    def config(self) -> RunConfig:
        """The base as a `RunConfig`."""
        return RunConfig.model_validate(self.base)

    def goal_text(self) -> str:
        """The goal in words: "lowest validation loss at step 2,000"."""
        if self.goal == "val_loss_at_step":
            return f"lowest validation loss at step {self.goal_step:,}"
        return f"reach {self.goal_accuracy:.1%} validation accuracy in the fewest steps"


def _refuse(field: str, value: Any, allowed: str) -> ChallengeError:
    return ChallengeError(f"{field}={value!r} refused: {allowed}")


def check_spec(data: dict[str, Any]) -> ChallengeSpec:
    """A `ChallengeSpec` from `data`, every field checked.

    Raises:
        ChallengeError: the first field refused, named with its allowed range (`title`,
            `base.<field>`, `optimizers`, `free`, `goal`, `goal_step`, `goal_accuracy`).
    """
    try:
        spec = ChallengeSpec.model_validate(data)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "challenge"
        raise ChallengeError(f"{field}: {first['msg']}") from None
    title = spec.title.strip()
    if not TITLE_CHARS[0] <= len(title) <= TITLE_CHARS[1] or not title.isprintable():
        raise _refuse("title", spec.title, f"must be {TITLE_CHARS[0]}-{TITLE_CHARS[1]} "
                                           "printable characters")
    try:
        base = spec.config()
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ChallengeError(f"base.{field}: {first['msg']}" if field else
                             f"base: {first['msg']}") from None
    if base.hypergradients or base.autotune:
        raise _refuse("base.hypergradients", base.hypergradients,
                      "a challenge trains plain runs: turn hyper-gradients off in the setup")
    names = registry.names()
    optimizers = list(dict.fromkeys(spec.optimizers or [base.optimizer]))
    unknown = [name for name in optimizers if name not in names]
    if unknown or base.optimizer not in optimizers:
        raise _refuse("optimizers", spec.optimizers,
                      f"must include the setup's optimizer {base.optimizer!r} and name only "
                      f"registered optimizers ({', '.join(names)})")
    offered = {s.name for name in optimizers for s in _specs(name, base)}
    free = list(dict.fromkeys(spec.free))
    if [name for name in free if name not in offered]:
        raise _refuse("free", spec.free, "must name hyperparameters of the allowed optimizers: "
                                         + ", ".join(sorted(offered)))
    if not free and len(optimizers) == 1:
        raise _refuse("free", spec.free, "leave the students something to choose: at least one "
                                         "hyperparameter, or more than one optimizer")
    if spec.goal == "val_loss_at_step":
        step = spec.goal_step
        if step is None or not 1 <= step <= base.steps or (
                step % base.eval_every and step != base.steps):
            raise _refuse("goal_step", step, f"must be in [1, {base.steps}] (the steps) and a "
                                             f"multiple of eval_every={base.eval_every} or "
                                             f"{base.steps} itself: validation runs only there")
        accuracy = None
    else:
        accuracy = spec.goal_accuracy
        if accuracy is None or not 0 < accuracy <= 1:
            raise _refuse("goal_accuracy", accuracy, "must be a fraction in (0, 1] "
                                                     "(0.95 = 95% validation accuracy)")
        step = None
    return ChallengeSpec(title=title, base=base.to_json_dict(), optimizers=optimizers,
                         free=free, goal=spec.goal, goal_step=step, goal_accuracy=accuracy)


def _specs(optimizer: str, base: RunConfig):
    """The hyperparameter specs of `optimizer` with its options in the challenge (the base's
    for the base optimizer, the defaults for the others)."""
    return registry.specs(optimizer, options_for(optimizer, base))


def options_for(optimizer: str, base: RunConfig) -> dict[str, Any]:
    """The fixed options of `optimizer` in a challenge on `base`: the base's own options for
    its optimizer, the registry's defaults for the others."""
    return dict(base.options) if optimizer == base.optimizer else dict(
        registry.option_defaults(optimizer))


def fixed_value(spec: ChallengeSpec, optimizer: str, name: str) -> float:
    """The value a student cannot change of hyperparameter `name` of `optimizer`: the base's
    when its optimizer has it, else the optimizer's default.

    Raises:
        KeyError: `optimizer` has no hyperparameter `name`.
    """
    base = spec.config()
    if name in base.hyperparameters:
        return float(base.hyperparameters[name])
    defaults = {s.name: float(s.default) for s in _specs(optimizer, base)}
    return defaults[name]


def student_config(spec: ChallengeSpec, optimizer: str,
                   hyperparameters: dict[str, float]) -> RunConfig:
    """The config a student's run trains with: the base with `optimizer` (its fixed options),
    the student's values for the `free` hyperparameters and the fixed values for the rest.

    Raises:
        ChallengeError: `optimizer` not allowed, or a value outside its range (the message
            names the hyperparameter and its range).
    """
    if optimizer not in spec.optimizers:
        raise _refuse("optimizer", optimizer, "this challenge allows " + ", ".join(
            spec.optimizers))
    base = spec.config()
    values = {}
    for hyper in _specs(optimizer, base):
        chosen = hyper.name in spec.free and hyper.name in hyperparameters
        values[hyper.name] = (float(hyperparameters[hyper.name]) if chosen
                              else fixed_value(spec, optimizer, hyper.name))
    data = {**base.to_json_dict(), "optimizer": optimizer,
            "options": options_for(optimizer, base), "hyperparameters": values}
    if data["lr_schedule"] is not None and "learning_rate" not in values:
        data["lr_schedule"] = None
    try:
        return RunConfig.model_validate(data)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        raise ChallengeError(first["msg"].removeprefix("Value error, ")) from None


def check_config(spec: ChallengeSpec, config: RunConfig) -> None:
    """Refuse a config that changes anything the challenge fixes.

    Raises:
        ChallengeError: names every setting that differs from the challenge, with the fixed
            value (e.g. `steps=500 refused: fixed by the challenge at 2000`).
    """
    expected = student_config(spec, config.optimizer, config.hyperparameters).to_json_dict()
    sent = config.to_json_dict()
    wrong = []
    for field, value in expected.items():
        if field == "hyperparameters":
            wrong += [f"hyperparameters.{name}={sent[field].get(name)!r} refused: fixed by the "
                      f"challenge at {fixed!r}" for name, fixed in value.items()
                      if sent[field].get(name) != fixed]
        elif sent.get(field) != value:
            wrong.append(f"{field}={sent.get(field)!r} refused: fixed by the challenge at "
                         f"{value!r}")
    if wrong:
        raise ChallengeError("; ".join(wrong))


def check_nickname(nickname: object) -> str:
    """The nickname, stripped, when it is allowed (`NICKNAME_ALLOWED`).

    Raises:
        ChallengeError: not a string, too short or long, or other characters.
    """
    text = nickname.strip() if isinstance(nickname, str) else ""
    if not (NICKNAME_CHARS[0] <= len(text) <= NICKNAME_CHARS[1]
            and NICKNAME_SYNTAX.fullmatch(text)):
        raise _refuse("nickname", nickname, f"must be {NICKNAME_ALLOWED}")
    return text


# ----- actions ----------------------------------------------------------------------------------
def _teacher(caller: Caller, action: str) -> None:
    if not (caller.local or caller.is_teacher):
        raise NotOwner(f"{action} refused: only a teacher (a session that entered "
                       "OPTIMIZER_LAB_TEACHER_SECRET) may do this")


def create_challenge(store: RunStore, data: dict[str, Any], caller: Caller = LOCAL) -> int:
    """Check `data` (`check_spec`) and store an open challenge; returns its id.

    Raises:
        NotOwner: the caller is not a teacher. ChallengeError: a field refused.
    """
    _teacher(caller, "creating a challenge")
    spec = check_spec(data)
    return ChallengeTables(store).create(spec.title, spec.model_dump(),
                                         "local" if caller.local else caller.owner)


def load_spec(store: RunStore, challenge_id: int) -> tuple[dict[str, Any], ChallengeSpec]:
    """(the challenge row, its spec).

    Raises:
        KeyError: no such challenge.
    """
    row = ChallengeTables(store).get(challenge_id)
    return row, ChallengeSpec.model_validate(row["spec"])


def close_challenge(store: RunStore, challenge_id: int, caller: Caller = LOCAL) -> bool:
    """Close a challenge: no run joins it any more (its runs go on). True when this call closed
    it. Raises NotOwner (not a teacher), KeyError (no such challenge)."""
    _teacher(caller, f"closing challenge {challenge_id}")
    ChallengeTables(store).get(challenge_id)
    return ChallengeTables(store).close(challenge_id)


def pin(store: RunStore, challenge_id: int, run_id: int, pinned: bool = True,
        caller: Caller = LOCAL) -> None:
    """Pin (or unpin) a run of the challenge on its board.

    Raises:
        NotOwner: not a teacher. KeyError: the run is not one of the challenge's runs.
    """
    _teacher(caller, f"pinning run #{run_id}")
    if not ChallengeTables(store).set_pinned(challenge_id, run_id, pinned):
        raise KeyError(f"run #{run_id} is not a run of challenge {challenge_id}")


def stop_challenge_run(store: RunStore, challenge_id: int, run_id: int,
                       caller: Caller = LOCAL) -> int | None:
    """Stop a run of the challenge through `control.stop` (its owner, or a teacher: recorded).

    Raises:
        KeyError: the run is not one of the challenge's runs. NotOwner: neither its owner nor
            a teacher. ValueError: the run is not live.
    """
    if ChallengeTables(store).challenge_of(run_id) != int(challenge_id):
        raise KeyError(f"run #{run_id} is not a run of challenge {challenge_id}")
    return control.stop(store, run_id, caller=caller)


def start_challenge_run(store: RunStore, challenge_id: int, config: RunConfig, nickname: str,
                        caller: Caller = LOCAL, steps_per_second: float | None = None,
                        on_tab_close: str = "finish") -> int:
    """Start a student's run under an open challenge and link it (`challenge_runs`).

    Args:
        config: the student's setup; everything but the optimizer and the free hyperparameters
            must equal the challenge's (`check_config`).
        nickname: shown on the board (`check_nickname`).
        caller, steps_per_second, on_tab_close: as `control.start_run` (the caller owns it).

    Returns:
        The run id.

    Raises:
        KeyError: no such challenge. ChallengeError: closed, a nickname or a setting refused.
        ValueError: `control.start_run` refused (memory budget, pace).
    """
    row, spec = load_spec(store, challenge_id)
    if row["status"] != OPEN:
        raise ChallengeError(f"challenge {challenge_id} ({row['title']!r}) is closed: no new "
                             "runs join it")
    name = check_nickname(nickname)
    check_config(spec, config)
    run_id = control.start_run(config, store, name=f"{name} @ challenge {challenge_id}",
                               caller=caller, steps_per_second=steps_per_second,
                               on_tab_close=on_tab_close)
    if not ChallengeTables(store).link(challenge_id, run_id, name):
        control.stop(store, run_id)  # closed between the check and the link: it never counts
        raise ChallengeError(f"challenge {challenge_id} was closed while run #{run_id} "
                             "started: the run was stopped")
    return run_id
