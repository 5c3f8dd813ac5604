"""Fixtures shared across test files, and how the suite is shared out among pytest-xdist workers.

``make test`` runs ``pytest -n auto``: a worker per core (at most 4), each pinned to its share of the cores. A
trial gives its framework a thread per core its process may run on
(:func:`bakeoff.measure.environment.usable_cores`), and trial processes inherit their worker's cores, so two
workers' trials never fight over cores, and the single-threaded parts of tests (framework imports, tracing,
compiling, Python) run side by side instead of one after another.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import pytest

from bakeoff.run.machine import LOCK_ENV
from parity_checks import Probes, parity_command

SHARED_FIXTURES = {"test_parity_jax": "test_parity", "test_keras_backends": "test_parity",
                   "test_parity_paddle": "test_parity",
                   "test_parity_speech_ctc_jax": "test_parity_speech_ctc",
                   "test_parity_speech_ctc_paddle": "test_parity_speech_ctc"}
"""Files that share a session fixture (the parity probes) run on one worker, so it is made once."""
FIRST = ("test_readme", "test_parity", "test_parity_jax", "test_parity_speech_ctc_jax", "test_distributed_torch")
"""The longest files start first (longest first: 660, 560, 130, 460, 300 s on one core, 2026-12-03), so the
short ones fill in at the end instead of one long file running alone."""


def pytest_configure(config: pytest.Config) -> None:
    # Each worker's runs hold a machine lock of their own (bakeoff.run.machine): workers measure on disjoint
    # cores, and no test should wait for a developer's own `bakeoff run` in another terminal.
    os.environ[LOCK_ENV] = str(Path(tempfile.gettempdir()) / f"bakeoff-tests-{os.getpid()}.lock")
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if int(count) <= len(cores):  # the cores shared out; with more workers than cores, the OS shares them
            # (a worker replacing a crashed one is numbered past the count: gw2 of 2 takes gw0's share)
            os.sched_setaffinity(0, set(cores[int(worker.removeprefix("gw")) % int(count)::int(count)]))
    # PaddlePaddle 3.3.1's libpaddle segfaults when it is loaded into a process that has loaded TensorFlow's
    # libraries (`import tensorflow; import paddle`: SIGSEGV in paddle/base/core.py), while the other order works.
    # bakeoff never loads both (each trial, probe, export and runtime is a process of its own, refusing frameworks
    # its row does not load), but a test process does: collecting the tests imports TensorFlow (test_deploy_tf.py),
    # and the Paddle model tests import Paddle beside it. So Paddle is loaded first, before collection.
    if importlib.util.find_spec("paddle") is not None:
        importlib.import_module("bakeoff.frameworks.paddle").quiet_import()  # no ccache warning in the log
        import paddle  # noqa: F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, in FIRST's order; the rest keep theirs."""
    rank = {stem: i for i, stem in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(FIRST)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile``, files sharing a session fixture sent together, in the collection's order.

    Each file goes to one worker (its module fixtures are made once), and files are handed out in the order
    collected, longest first, to whichever worker is free. (``--dist loadgroup`` would do it with markers, but
    pytest 9.2 keeps node ids where pytest-xdist 3.8 can no longer add the group to them, so every group was
    split across the workers and its module fixtures were made on each.)
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            stem = Path(path).stem
            return str(Path(path).with_name(SHARED_FIXTURES.get(stem, stem) + ".py"))

    config.option.loadscopereorder = False  # keep the order above, not the number of tests per file
    return SharedFixtureFiles(config, log)


@pytest.fixture(scope="session")
def parity_probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """The ``bakeoff.trial.parity_probe`` probes, each (workload, framework, mode) run once per test session and
    compared by every file that needs it: test_parity.py's PyTorch and TensorFlow probes are test_parity_jax.py's
    references."""
    return Probes(tmp_path_factory.mktemp("parity"), parity_command)


@pytest.fixture(scope="session")
def speech_probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """test_parity_speech_ctc.py's probes (that file run as a script), each (framework, mode) run once per session:
    its PyTorch and TensorFlow eager probes are test_parity_speech_ctc_jax.py's references too."""
    from test_parity_speech_ctc import speech_command

    return Probes(tmp_path_factory.mktemp("parity_speech"), speech_command)
