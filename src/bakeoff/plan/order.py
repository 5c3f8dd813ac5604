"""The order a run's trials go in, and which of them run (resume): decided before any trial starts, so that
``bakeoff run --dry-run`` (:mod:`.preview`) and the run itself agree.

Order (:func:`order`): repeat by repeat; within a repeat the frameworks take turns (round-robin, the framework
that goes first rotating from one repeat to the next), and each framework's configurations are shuffled with a
seed and the repeat number. Slow drift of the machine (heat, background load) so lands on every framework alike.

Resume (:func:`to_run`): a trial whose key is already in the store is skipped, whatever its status, unless the run
is ``fresh``, retries failures, or measures it again (:func:`measure_again`).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.results.store import Store


def order(specs: Sequence[RunSpec], seed: int = 0) -> list[RunSpec]:
    """The order trials run in (see module docstring): repeat by repeat; within a repeat, frameworks take turns,
    the first framework rotating with the repeat, and each framework's configurations are shuffled with
    ``seed`` and the repeat."""
    frameworks = list(dict.fromkeys(spec.framework for spec in specs))  # in order of first appearance
    by_repeat: dict[int, dict] = {}
    for spec in specs:
        by_repeat.setdefault(spec.repeat, {f: [] for f in frameworks})[spec.framework].append(spec)
    out: list[RunSpec] = []
    for repeat in sorted(by_repeat):
        rng = random.Random(f"{seed}:{repeat}")  # str seeds hash the same in every process
        queues = list(by_repeat[repeat].values())
        for queue in queues:
            rng.shuffle(queue)
        turn = repeat % len(queues)
        queues = queues[turn:] + queues[:turn]
        for i in range(max(len(q) for q in queues)):
            out.extend(q[i] for q in queues if i < len(q))
    return out


def to_run(spec: RunSpec, recorded: dict[str, Status], fresh: bool, retry_failed: bool,
           again: Collection[str] = ()) -> bool:
    """Whether a run with these options runs ``spec`` (identified) given the store's ``recorded`` statuses and the
    stored trials it measures ``again`` (:func:`measure_again`)."""
    status = recorded.get(spec.key())
    return status is None or fresh or spec.key() in again or (retry_failed and status is not Status.OK)


def measure_again(store: Store, timeout_s: float | None, retry_busy: bool = False) -> set[str]:
    """Keys of stored trials a run measures again although stored.

    The timeout is not part of a trial's key (it does not change what the trial measures), but a stored timeout
    is no answer to a longer one: a trial that timed out under a shorter timeout than ``timeout_s`` runs again.
    With ``retry_busy``, so does a trial measured while other processes used more than
    :data:`bakeoff.measure.environment.OTHER_WORK_SHARE` of its cores (``bakeoff run --retry-busy``).
    """
    again = {key for key, seconds in store.timeouts().items() if timeout_s is not None and seconds < timeout_s}
    return again | busy(store) if retry_busy else again


def busy(store: Store) -> set[str]:
    """Keys of the stored successful trials measured while other processes used more than
    :data:`bakeoff.measure.environment.OTHER_WORK_SHARE` of their cores: what ``--retry-busy`` measures again,
    keeping the quieter measurement (:meth:`bakeoff.results.store.Store.keep_quieter`)."""
    return {key for key, share in store.other_work().items() if share > OTHER_WORK_SHARE}
