"""Fixtures shared across test files: what is costly to make and the same for every file that needs it."""

from __future__ import annotations

import pytest

from parity_checks import Probes, parity_command


@pytest.fixture(scope="session")
def parity_probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """The ``bakeoff.parity`` probes, each (workload, framework, mode) run once per test session and compared by
    every file that needs it: test_parity.py's PyTorch and TensorFlow probes are test_parity_jax.py's references."""
    return Probes(tmp_path_factory.mktemp("parity"), parity_command)

