"""Fixtures shared across test files, and how the suite is shared out among pytest-xdist workers.

``make test`` runs ``pytest -n auto``: a worker per core (at most 4), each pinned to its share of the cores. A
trial gives its framework a thread per core its process may run on
(:func:`bakeoff.measure.environment.usable_cores`), and trial processes inherit their worker's cores, so two
workers' trials never fight over cores, and the single-threaded parts of tests (framework imports, tracing,
compiling, Python) run side by side instead of one after another.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from bakeoff.launch.machine import LOCK_ENV
from parity_checks import Probes, parity_command

SHARED_FIXTURES = {"test_parity": "parity", "test_parity_jax": "parity"}
"""Files that share a session fixture (the parity probes) run on one worker, so it is made once."""
FIRST = ("test_readme.py",)
"""The longest test (every README command, the quick suite among them) starts first, not last on one worker."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): tests that run on one pytest-xdist worker")
    # Each worker's runs hold a machine lock of their own (bakeoff.launch.machine): workers measure on disjoint
    # cores, and no test should wait for a developer's own `bakeoff run` in another terminal.
    os.environ[LOCK_ENV] = str(Path(tempfile.gettempdir()) / f"bakeoff-tests-{os.getpid()}.lock")
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if int(count) <= len(cores):  # the cores shared out; with more workers than cores, the OS shares them
            os.sched_setaffinity(0, set(cores[int(worker.removeprefix("gw"))::int(count)]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each file is one xdist group (module fixtures are made once), the README test first."""
    for item in items:
        stem = item.path.stem
        item.add_marker(pytest.mark.xdist_group(SHARED_FIXTURES.get(stem, stem)))
    items.sort(key=lambda item: item.path.name not in FIRST)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def parity_probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """The ``bakeoff.parity`` probes, each (workload, framework, mode) run once per test session and compared by
    every file that needs it: test_parity.py's PyTorch and TensorFlow probes are test_parity_jax.py's references."""
    return Probes(tmp_path_factory.mktemp("parity"), parity_command)
