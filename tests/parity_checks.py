"""The cross-framework parity checks and their tolerances, shared by test_parity.py and test_parity_speech_ctc.py.

A probe (``bakeoff.trial.parity_probe``) is one framework in one execution mode and precision, in its own process. The
tests compare every PyTorch probe with every TensorFlow probe of the same precision — so compiled modes
(``torch.compile``, ``tf.function``, XLA) are checked against the other framework's eager and compiled modes —
and each probe with itself (gradient accumulation) and with the initial weights (training moved them).

The checks and their tolerances are the product's (:mod:`bakeoff.analysis.parity_tolerances`, which documents them and
what was measured against them; ``bakeoff parity`` runs the same ones): each ``check_*`` here asserts that a check found
nothing, its message the first disagreement. What stays here is the tests' harness (modes, pairs, probes) and the
shipped workloads' own sanity checks (outputs that vary, every tensor trained).
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bakeoff.analysis import parity_tolerances as parity
from bakeoff.analysis.parity_tolerances import Finding, first_failure, unflatten, zero_gradients
from bakeoff.measure.environment import usable_cores
from bakeoff.run import parity_session as command

BF16_U = parity.BF16_U


@dataclasses.dataclass(frozen=True)
class Mode:
    framework: str
    execution: str = "eager"
    precision: str = "fp32"

    def __str__(self) -> str:
        return f"{self.framework}-{self.execution}-{self.precision}"


EAGER = (Mode("torch"), Mode("tensorflow"))


def pairs(modes: tuple[Mode, ...]) -> list[tuple[Mode, Mode]]:
    """Every (PyTorch, TensorFlow) pair of probes with the same precision."""
    return [(a, b) for a in modes if a.framework == "torch"
            for b in modes if b.framework == "tensorflow" and a.precision == b.precision]


STEPS = command.STEPS
"""Training steps of a ``bakeoff.trial.parity_probe`` probe (each also accumulates over as many micro-batches)."""


def parity_command(workload: str, mode: Mode, out: Path) -> list[str]:
    """The ``python -m bakeoff.trial.parity_probe`` probe of ``workload`` in ``mode``, writing its arrays to ``out``:
    ``bakeoff parity``'s own."""
    return command.probe_command(workload, mode.framework, command.Mode(mode.execution, mode.precision), out)


class Probes:
    """Runs each probe once (one process each) and keeps its arrays; ``prefetch`` runs several two at a time."""

    def __init__(self, tmp: Path, command: Callable[[str, Mode, Path], list[str]]) -> None:
        self.tmp, self.command = tmp, command
        self.done: dict[tuple[str, Mode], dict[str, np.ndarray]] = {}

    def get(self, workload: str, mode: Mode) -> dict[str, np.ndarray]:
        if (workload, mode) not in self.done:
            out = self.tmp / f"{workload}-{mode}.npz"
            run = subprocess.run(self.command(workload, mode, out), capture_output=True, text=True, timeout=900)
            assert run.returncode == 0, f"probe {workload} {mode} failed:\n{run.stderr[-3000:]}"
            self.done[(workload, mode)] = dict(np.load(out))
        return self.done[(workload, mode)]

    def prefetch(self, wanted: Iterable[tuple[str, Mode]]) -> None:
        """Run the probes not yet done, one per core this process may use: a probe is mostly one busy thread
        (imports, eager dispatch, compiling). Each (workload, mode) is run once."""
        todo = list(dict.fromkeys(w for w in wanted if w not in self.done))
        with ThreadPoolExecutor(usable_cores()) as pool:
            list(pool.map(lambda wm: self.get(*wm), todo))


def _real(weights: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
          other: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """``weights`` but the tensors whose gradient is zero, as measured (:func:`zero_gradients`)."""
    zero = zero_gradients(grads, grads if other is None else other)
    return {k: v for k, v in weights.items() if k not in zero}


def _agree(findings: list[Finding], what: str) -> None:
    """Assert every finding held; the message names the first that did not, and how many did not."""
    bad = first_failure(findings)
    assert bad is None, f"{what}: {bad.describe()} ({sum(not f.ok for f in findings)} of {len(findings)} differ)"


def check_outputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], precision: str, which: str) -> None:
    _agree(parity.compare_outputs(a[which], b[which], precision, which), which)
    assert np.ptp(b[which]) > 1e-3  # the outputs really vary across examples: the check is not vacuous


def check_losses(a: np.ndarray, b: np.ndarray, precision: str) -> None:
    """Per-step losses of two runs on the same batches from the same weights."""
    assert a.ndim == 1 and len(a) >= 2
    _agree(parity.compare_losses(a, b, precision), f"{precision} per-step losses")


def check_gradients(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], group: str = "grad") -> None:
    """Per canonical tensor: relative error against ``b`` with an absolute floor; zero-in-theory ones are noise."""
    ga, gb = unflatten(a, group), unflatten(b, group)
    assert len(ga) == len(gb) > 0
    _agree(parity.compare_gradients(ga, gb), group)
    assert min(float(np.abs(g).max()) for g in _real(gb, ga, gb).values()) > 1e-6  # every real one held relatively


def check_accumulation(probe: Mapping[str, np.ndarray]) -> None:
    """4 accumulated micro-batches give the gradient of the batch they make up, tensor by tensor, and the
    accumulating run's losses equal the plain run's (the same examples, as 4 micro-batches per step)."""
    _agree(parity.compare_accumulation(probe), "accumulated against one batch")


def check_moved(probe: Mapping[str, np.ndarray], learning_rate: float) -> None:
    """Training moved every real tensor: Adam's early steps move each entry with a non-negligible gradient by
    about the learning rate, so every tensor's largest move is at least half of it."""
    init, after = unflatten(probe, "init"), unflatten(probe, "weights")
    assert sorted(init) == sorted(after)
    moved = {k: float(np.abs(after[k] - init[k]).max()) for k in _real(init, unflatten(probe, "grad"))}
    still = {k: f"{m:.2g}" for k, m in moved.items() if m < learning_rate / 2}
    assert not still, f"tensors that did not move by lr/2 = {learning_rate / 2:g}: {still}"


def check_weights(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], tolerance: float = 5e-3) -> None:
    """The canonical weights after training, per tensor: the two runs moved each tensor alike."""
    init = unflatten(b, "init")
    assert all(np.array_equal(init[k], v) for k, v in unflatten(a, "init").items())  # the same starting point
    zero = zero_gradients(unflatten(a, "grad"), unflatten(b, "grad"))
    _agree(parity.compare_weights(init, unflatten(a, "weights"), unflatten(b, "weights"), tolerance, zero),
           "tensors moved differently")
