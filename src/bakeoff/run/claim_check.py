"""``bakeoff claims`` from Python: :func:`check` runs the trials the claims need through the same runner as ``bakeoff
run`` (:func:`bakeoff.run.session.run_suite`: stored results reused by their keys, an interrupted run resumed), or
with ``run=False`` only reads the store, then judges every claim (:func:`bakeoff.report.claim_verdicts.judge`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError
from bakeoff.measure.environment import cuda_devices
from bakeoff.plan.suite import Suite
from bakeoff.predict.capacity import measured_mfu
from bakeoff.predict.hypotheses import Claim, all_specs
from bakeoff.report.claim_verdicts import ClaimVerdict, judge
from bakeoff.results.store import Store
from bakeoff.run import runner
from bakeoff.run.session import ProgressFactory, run_suite

log = logging.getLogger(__name__)

SUITE = "claims"
"""The suite name the claims' trials are stored under (a trial stored by another suite is reused, not re-stored)."""
TIMEOUT_S = 900.0


def runnable(claims: Sequence[Claim], gpus: int) -> list[Claim]:
    """The ratio claims whose trials this machine can run (enough GPUs)."""
    return [c for c in claims if c.form == "ratio" and c.gpus <= gpus]


def validate(claims: Sequence[Claim]) -> None:
    """Every trial's spec checked against its workload (preset, config fields) and its data, before anything runs or
    is written: :class:`SpecError` naming the claim. This machine's GPUs are checked by the run itself."""
    for claim in claims:
        for spec in claim.specs:
            try:
                registry.workload(spec).config(spec.preset, spec)
            except SpecError as exc:
                raise SpecError(f"claim {claim.name!r}: {exc}") from None
    runner.validate(all_specs(claims), here=False)


def check(claims: Sequence[Claim], store_path: Path, *, run: bool = True, timeout_s: float | None = None,
          retry_failed: bool = False, retry_busy: bool = False, say: Callable[[str], None] = log.info,
          progress: ProgressFactory | None = None, validated: bool = False) -> list[ClaimVerdict]:
    """Judge ``claims`` on the store at ``store_path``, running first (``run``) the trials of those this machine can
    test that the store lacks (with ``retry_failed`` and ``retry_busy``, also those, as
    :func:`bakeoff.run.session.run_suite` does).

    Every trial's spec is checked (:func:`validate`; ``validated``: the caller did) before anything runs or is
    written. With ``run=False`` nothing runs or is written: the claims are judged on every stored result of their
    configurations, whichever bakeoff version stored it; a missing store judges every claim on no results.
    """
    if not validated:
        validate(claims)
    gpus, _why = cuda_devices()
    specs = all_specs(claims)
    for evaluate in (True, False):  # claims about training time alone never evaluate (a large preset's is minutes)
        group = all_specs([c for c in runnable(claims, gpus) if c.evaluate is evaluate])
        if run and group:
            suite = Suite(name=SUITE, description="the trials of bakeoff claims", specs=group,
                          timeout_s=timeout_s or TIMEOUT_S, weights={}, qualitative={}, source="bakeoff claims")
            run_suite(suite, store_path, timeout_s=timeout_s, retry_failed=retry_failed, retry_busy=retry_busy,
                      say=say, progress=progress, evaluate=evaluate)
    results: list[TrialResult] = []
    deployments: list[dict] = []
    mfu: dict[str, tuple[float, str]] = {}
    if store_path.exists():
        with Store(store_path, readonly=True) as store:
            # A run judges what it ran or reused (by key: this version, this data); --no-run whatever the store holds
            # of the same configurations, whichever bakeoff version stored it (one version's runs per side)
            results = store.results(keys=[s.key() for s in identify(specs)]) if run else store.results()
            deployments = store.deployments()
            if any(c.plan for c in claims):
                mfu = measured_mfu(store.results())
    return judge(claims, results, deployments, gpus, mfu)
