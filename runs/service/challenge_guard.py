"""The run service's check that a student's live change stays inside their challenge: a run
that joined a challenge may change live only the hyperparameters the challenge leaves free
(`runs.service.challenges.ChallengeSpec.free`); everything else it fixes (other
hyperparameters, `lr_schedule`, `decay`) is refused, for the run's owner as on the Train page.
A local caller (the CLI, tests, the server itself) passes, as every ownership check.

Kept apart from `runs.service.challenges` (which starts runs through `runs.service.control`)
so that `control.set_hyper` can call it without an import circle. No Streamlit, no TensorFlow.
"""

from __future__ import annotations

from runs.service.ownership import Caller, NotOwner
from runs.store.challenges import ChallengeTables
from runs.store.run_store import RunStore


class FixedByChallenge(NotOwner):
    """A live change of a setting the run's challenge fixes (a refusal of the run service,
    shown where a `NotOwner` is: the message names the setting, the run, the challenge and
    what may change)."""


def check_change(store: RunStore, run_id: int, name: str, caller: Caller) -> None:
    """Refuse a live change of `name` on `run_id` when its challenge fixes `name`.

    Raises:
        FixedByChallenge: the run joined a challenge that does not leave `name` free.
    """
    if caller.local:
        return
    tables = ChallengeTables(store)
    challenge_id = tables.challenge_of(run_id)
    if challenge_id is None:
        return
    free = list(tables.get(challenge_id)["spec"].get("free", []))
    if name not in free:
        raise FixedByChallenge(
            f"{name} of run #{run_id} refused: fixed by challenge {challenge_id}; its runs may "
            f"change {', '.join(free) if free else 'no hyperparameter'} live")
