"""The cross-framework parity checks and their tolerances, shared by the parity test files, and the tests of
test_parity.py, test_parity_jax.py and test_parity_paddle.py written once (:class:`PortParity`; the speech ports'
are test_parity_speech_ctc.py's ``SpeechPortParity``).

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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from bakeoff.analysis import parity_tolerances as parity
from bakeoff.analysis.parity_tolerances import Finding, first_failure, unflatten, zero_gradients
from bakeoff.core import registry
from bakeoff.measure.environment import usable_cores
from bakeoff.run import parity_session as command

if TYPE_CHECKING:  # pytest is not imported at run time: test_keras_backends.py runs this module in its probes
    import pytest

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


def _id(value: object) -> str:
    """A test id: a probe's mode as ``framework-execution-precision``, several joined by ``+``."""
    return "+".join(map(str, value)) if isinstance(value, tuple) else str(value)


class ClassCases:
    """A test class whose tests take their parameters from the class: :meth:`cases`, made from a subclass's
    declarations (a decorator on a base class's method would see the base class's attributes, not the subclass's)."""

    @classmethod
    def cases(cls) -> dict[str, tuple[str, list[Any]]]:
        """Per test method: its parameters' names and values; a test not named takes none."""
        raise NotImplementedError

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        # pytest asks a test class for its tests' parameters through this method, as it asks a conftest.py.
        case = self.cases().get(metafunc.function.__name__)
        if case is not None:
            metafunc.parametrize(*case, ids=_id)


class PortParity(ClassCases):
    """The parity tests of every workload run as probes (test_parity.py, test_parity_jax.py, test_parity_paddle.py),
    written once: a file's subclass (``class TestJaxParity(PortParity)``) declares its probes, and each test runs
    once per workload, probe or pair of probes they make.

    PORT's probes are compared with every other probe of the same workload and precision (a pair: PORT's probe
    first). Every probe of a framework not in REFERENCES is also checked on its own here (round trip, accumulation,
    every tensor moved, bf16 in force); a reference's probes are only compared with, their own checks being its own
    file's (test_parity.py's, whose PyTorch and TensorFlow probes the other files share). The probes come from the
    file's module fixture ``probes``, the session's ``parity_probes`` with every probe of MODES prefetched.
    """

    PORT: ClassVar[str]
    """The framework compared with the others."""
    REFERENCES: ClassVar[tuple[str, ...]]
    """The frameworks whose probes this file only compares with."""
    MODES: ClassVar[dict[str, tuple[Mode, ...]]]
    """Per workload, the probes run: PORT's and the ones they are compared with."""
    PARAMS: ClassVar[dict[str, int]]
    """Per workload, the tiny preset's exact parameter count."""
    OUTPUT_SHAPES: ClassVar[dict[str, tuple[int, ...]]] = {}
    """Per workload, the outputs' shape on the first 64 test examples, where a file states it (test_parity.py); the
    other files' outputs are held to the same shape by :func:`check_outputs`."""
    GRADIENTS: ClassVar[tuple[str, ...]] = ("grad", "grad_accum")
    """The gradients compared per tensor across frameworks: of the batch, and accumulated over its micro-batches."""

    @classmethod
    def all_probes(cls) -> list[tuple[str, Mode]]:
        """Every (workload, mode) probe the file runs."""
        return [(w, m) for w, modes in cls.MODES.items() for m in modes]

    @classmethod
    def own_probes(cls) -> list[tuple[str, Mode]]:
        """The probes checked on their own here: every framework's but the references'."""
        return [(w, m) for w, m in cls.all_probes() if m.framework not in cls.REFERENCES]

    @classmethod
    def port_pairs(cls) -> list[tuple[str, Mode, Mode]]:
        """Every (workload, PORT's probe, another framework's probe of the same precision)."""
        return [(w, a, b) for w, modes in cls.MODES.items() for a in modes if a.framework == cls.PORT
                for b in modes if b.framework != cls.PORT and b.precision == a.precision]

    @classmethod
    def fp32_of(cls, mode: Mode) -> Mode:
        """The fp32 probe a bf16 probe is held to: the same framework and execution."""
        return dataclasses.replace(mode, precision="fp32")

    @classmethod
    def cases(cls) -> dict[str, tuple[str, list[Any]]]:
        """Each test's parameters (names, values), made from the subclass's declarations."""
        own, pairs = cls.own_probes(), cls.port_pairs()
        return {
            "test_parameter_counts_equal_and_exact": ("workload", list(cls.MODES)),
            "test_canonical_weights_round_trip_exactly": ("workload,modes", [(w, (m,)) for w, m in own]),
            "test_forward_outputs_equal_with_copied_weights": ("workload,mode,other", pairs),
            "test_training_losses_equal_every_step": ("workload,mode,other", pairs),
            "test_gradients_and_trained_weights_equal_per_tensor":
                ("workload,mode,other", [p for p in pairs if p[1].precision == "fp32"]),
            "test_gradient_accumulation_is_exact": ("workload,mode", [p for p in own if p[1].precision == "fp32"]),
            "test_training_moved_every_tensor": ("workload,mode", own),
            "test_bf16_is_in_force_and_close_to_fp32":
                ("workload,mode", [p for p in own if p[1].precision == "bf16"]),
        }

    def test_parameter_counts_equal_and_exact(self, probes, workload):
        wl = registry.workload(workload)
        assert sum(v.size for v in wl.init_weights(wl.config("tiny"), 0).values()) == self.PARAMS[workload]
        counts = {str(m): int(probes.get(workload, m)["num_params"]) for m in self.MODES[workload]}
        assert set(counts.values()) == {self.PARAMS[workload]}, counts

    def test_canonical_weights_round_trip_exactly(self, probes, workload, modes):
        for mode in modes:
            probe = probes.get(workload, mode)
            assert bool(probe["roundtrip_same_keys"]) and float(probe["roundtrip_max_err"]) == 0.0, mode

    def test_forward_outputs_equal_with_copied_weights(self, probes, workload, mode, other):
        # Perturbed weights (non-zero biases, non-unit LayerNorm) exercise every canonical-name mapping and layout.
        # torch's predict runs eagerly in graph mode too (evaluation is off the clock); its compiled forward pass is
        # checked by the first training loss and the gradients below.
        a, b = probes.get(workload, mode), probes.get(workload, other)
        for which in ("outputs", "outputs_perturbed"):
            if workload in self.OUTPUT_SHAPES:
                assert a[which].shape == self.OUTPUT_SHAPES[workload]
            check_outputs(a, b, mode.precision, which)

    def test_training_losses_equal_every_step(self, probes, workload, mode, other):
        a, b = probes.get(workload, mode), probes.get(workload, other)
        assert a["losses"].shape == (STEPS,)
        check_losses(a["losses"], b["losses"], mode.precision)
        check_losses(a["losses_accum"], b["losses_accum"], mode.precision)  # grad_accum = 4, across frameworks

    def test_gradients_and_trained_weights_equal_per_tensor(self, probes, workload, mode, other):
        a, b = probes.get(workload, mode), probes.get(workload, other)
        for group in self.GRADIENTS:
            check_gradients(a, b, group)
        check_weights(a, b)

    def test_gradient_accumulation_is_exact(self, probes, workload, mode):
        check_accumulation(probes.get(workload, mode))

    def test_training_moved_every_tensor(self, probes, workload, mode):
        check_moved(probes.get(workload, mode), registry.workload(workload).config("tiny")["learning_rate"])

    def test_bf16_is_in_force_and_close_to_fp32(self, probes, workload, mode):
        bf16, fp32 = probes.get(workload, mode), probes.get(workload, self.fp32_of(mode))
        assert np.abs(bf16["outputs"] - fp32["outputs"]).max() > 1e-4  # bf16 rounding shows: it really ran in bf16
        check_outputs(bf16, fp32, "bf16", "outputs")
        check_losses(bf16["losses"], fp32["losses"], "bf16")
