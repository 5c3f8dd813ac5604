"""Fixtures shared across test files: what is costly to make and the same for every file that needs it; and how
``pytest -n 2`` (pytest-xdist, ``make test``) splits the suite between its two workers."""

from __future__ import annotations

import pytest

from parity_checks import Probes, parity_command

SHARED_SESSION = {"test_parity.py": "parity", "test_parity_jax.py": "parity"}
"""Files that share a session fixture (:func:`parity_probes`): one group, so one worker computes it once."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` every file is one group, so its module fixtures (a file's shared trials) are made
    once, by one worker; the files of :data:`SHARED_SESSION` share a group."""
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group(SHARED_SESSION.get(name, name)))


@pytest.fixture(scope="session")
def parity_probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """The ``bakeoff.parity`` probes, each (workload, framework, mode) run once per test session and compared by
    every file that needs it: test_parity.py's PyTorch and TensorFlow probes are test_parity_jax.py's references."""
    return Probes(tmp_path_factory.mktemp("parity"), parity_command)
