"""The one place a trial is put together: its workload, data, resolved configuration, initial weights and engine.

The trial process (:mod:`.main`), the parity probes (:mod:`.parity`) and the benchmarks (``bench/``) all build
through :func:`build_trial`, so that what a parity test proves equivalent and what a bench times is what a trial
trains. Building is in two steps because a trial records them apart: the framework-free parts first (nothing
imported), then :meth:`TrialParts.build_engine`, which imports the framework (``import_s``) and builds the model
from the weights (``build_s``), or those two steps apart (a trial records what it can of an engine whose setup
failed).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Dataset, Weights, Workload


@dataclasses.dataclass
class TrialParts:
    """A trial's framework-free parts (:func:`build_trial`); :meth:`build_engine` adds the engine."""

    spec: RunSpec
    workload: Workload
    data: Dataset
    config: dict[str, Any]
    weights: Weights
    import_s: float | None = None  # importing the framework (the engine's module), the first build only
    build_s: float | None = None  # the engine's setup: the model built and the weights loaded

    def build_engine(self, spec: RunSpec | None = None, weights: Weights | None = None) -> Any:
        """The engine of ``spec`` (default: this trial's; another spec of the same workload, such as the same
        trial with accumulation, shares this configuration and data), set up from ``weights`` (default: the
        initial ones): :meth:`new_engine`, then :meth:`set_up`."""
        engine = self.new_engine(spec)
        self.set_up(engine, weights)
        return engine

    def new_engine(self, spec: RunSpec | None = None) -> Any:
        """The engine of ``spec`` (default: this trial's), not set up yet (:meth:`engine_class`, then its
        constructor)."""
        spec = spec or self.spec
        return self.engine_class(spec)(spec, self.workload, self.config)

    def engine_class(self, spec: RunSpec | None = None) -> type:
        """The engine class of ``spec``'s framework. Imports the framework (timed as ``import_s`` the first
        time): an ImportError means it is not installed."""
        t0 = time.perf_counter()
        engine_cls = registry.engine_class((spec or self.spec).framework)
        if self.import_s is None:
            self.import_s = time.perf_counter() - t0
        return engine_cls

    def set_up(self, engine: Any, weights: Weights | None = None) -> None:
        """Build ``engine``'s model from ``weights`` (default: the initial ones), timed as ``build_s``."""
        t0 = time.perf_counter()
        engine.setup(self.weights if weights is None else weights)
        self.build_s = time.perf_counter() - t0


def build_trial(spec: RunSpec, config_changes: Mapping[str, Any] | None = None) -> TrialParts:
    """The workload of ``spec``, its data (loaded, as :meth:`Workload.load_data` reads them for this spec), its
    configuration resolved from the preset, the spec and the data, with ``config_changes`` over it (the parity
    probes turn dropout off), and the initial weights of the spec's seed. Imports no framework."""
    workload = registry.workload(spec)
    data = workload.load_data(spec)
    config = workload.config(spec.preset, spec, data)
    config.update(config_changes or {})
    return TrialParts(spec, workload, data, config, workload.init_weights(config, spec.seed))
