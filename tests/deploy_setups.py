"""The in-process harness the per-framework deployment tests share: one workload's tiny model (perturbed initial
weights, so every mapping matters), saved and loaded back through its framework's adapter, exported once per test
module per format, and each format's own runtime as the inference process loads it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import formats, registry
from bakeoff.core.spec import RunSpec

WORKLOADS = ("text_classifier", "autoencoder", "mnist", "speech_ctc")
EXAMPLES = 4
Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


class Setup:
    """One workload's model in one framework, with its test inputs (``config``: preset overrides that shrink it)."""

    def __init__(self, framework: str, workload: str, root: Path, config: tuple = ()) -> None:
        from bakeoff.trial.parity_probe import perturbed

        self.adapter = importlib.import_module(formats.adapter_module(framework))
        self.workload = workload
        self.wl = registry.workload(workload)
        spec = RunSpec(workload=workload, framework=framework, max_steps=1, device="cpu", config=config)
        data = self.wl.load_data(spec)
        self.config = self.wl.config("tiny", spec, data)
        self.weights = perturbed(self.wl.init_weights(self.config, 0))
        self.axes = dict(self.wl.serving_inputs)
        self.test = {k: v[:64] for k, v in data.test.items()}
        self.inputs = {k: self.test[k][:EXAMPLES] for k in self.axes}
        self.directory = root / workload
        self.directory.mkdir()
        self.saved = self.adapter.save_model(workload, self.config, self.weights, self.directory)
        self.model = self.adapter.load_model(workload, self.config, self.directory)
        self.exports: dict[str, tuple[Path, dict]] = {}

    def export(self, fmt: str) -> tuple[Path, dict]:
        """The format's file (exported once per module) and ``export``'s info."""
        if fmt not in self.exports:
            out = self.directory / "exports" / fmt / formats.FORMATS[fmt].file
            example = {k: v[:2] for k, v in self.inputs.items()}  # as bakeoff.deploy.exporting passes it
            self.exports[fmt] = out, self.adapter.export(self.model, fmt, out, example, self.axes)
        return self.exports[fmt]

    def predict(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The framework model's outputs: what every format is compared with."""
        return self.adapter.predict(self.model, inputs)


def setups_fixture(framework: str, shrunk: dict[str, tuple] | None = None) -> Callable:
    """A module-scoped ``setups`` fixture: ``setups(workload)`` builds that workload's :class:`Setup` once."""

    @pytest.fixture(scope="module")
    def setups(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Setup]:
        root = tmp_path_factory.mktemp(f"deploy_{framework}")
        made: dict[str, Setup] = {}

        def get(workload: str) -> Setup:
            if workload not in made:
                made[workload] = Setup(framework, workload, root, (shrunk or {}).get(workload, ()))
            return made[workload]

        return get

    return setups


def runner(fmt: str, path: Path, threads: int = 1) -> Runner:
    """The format's own runtime module, as the inference process loads it."""
    return importlib.import_module(formats.FORMATS[fmt].runtime_module).load_runtime(fmt, path, threads)


def worst(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference; the shapes must agree."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
