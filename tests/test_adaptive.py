"""Adaptive repeats (``--repeats auto``, :mod:`bakeoff.run.adaptive`): the run adds repeats only to the sections whose
verdict is unsettled, stops when all are settled or at ``max_repeats``, records the looks on every run, and
resumes from the store.

The trials here are drawn, not trained: ``local.run_one`` is replaced by the calibration's synthetic runs
(:func:`bakeoff.analysis.calibration.draw_run`), seeded by each spec, so what is tested is the procedure — the
store, the runner, the analysis and the suite are the real ones. The procedure's error rates are
tests/test_calibration.py's; a real trial through the same runner is every other test's.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from bakeoff.analysis.calibration import Noise, draw_run
from bakeoff.core.result import AdaptiveRepeats
from bakeoff.core.spec import RunSpec
from bakeoff.plan.suite import parse_suite
from bakeoff.results.store import Store
from bakeoff.run import adaptive
from bakeoff.run.executors import local

SUITE = """
name = "adaptive"
repeats = "auto"
max_repeats = 5
[defaults]
preset = "tiny"
max_steps = 4
[matrix]
framework = ["torch", "tensorflow"]
[[variant]]
workload = "mnist"
[[variant]]
workload = "autoencoder"
"""


@pytest.fixture
def fake_trials(monkeypatch):
    """Each trial a synthetic run: MNIST's PyTorch twice as fast at 1% noise (settled at once); the autoencoder's
    sides equal at 25% noise (a verdict that stays unsettled)."""
    ran: list[RunSpec] = []

    def run_one(spec: RunSpec, timeout_s: float, log_dir, *args, **kwargs):
        ran.append(spec)
        rng = np.random.default_rng(zlib.crc32(spec.key().encode()))
        clear = spec.workload == "mnist"
        speed = 2.0 if clear and spec.framework == "torch" else 1.0
        drawn = draw_run(spec.framework, spec.repeat, speed, Noise.uniform(0.01 if clear else 0.25), rng)
        drawn.spec, drawn.key = spec.to_dict(), spec.key()
        return drawn

    monkeypatch.setattr(local, "run_one", run_one)
    return ran


def _run(store_path, lines):
    suite = parse_suite(SUITE, "adaptive.toml")
    with Store(store_path) as store:
        summary = adaptive.run(suite.specs, store, suite.name, suite.adaptive["first"], suite.adaptive["max"],
                               suite.weights, suite.qualitative, say=lines.append, timeout_s=60,
                               log_dir=store_path.parent / "logs")
        return summary, store.results(suite=suite.name)


def test_a_suite_says_repeats_auto_and_starts_with_three_runs():
    suite = parse_suite(SUITE, "adaptive.toml")
    assert suite.adaptive == {"first": 3, "max": 5}
    assert sorted({s.repeat for s in suite.specs}) == [0, 1, 2] and len(suite.specs) == 12


def test_repeats_are_added_only_where_the_verdict_is_unsettled_up_to_the_maximum(tmp_path, fake_trials):
    lines: list[str] = []
    summary, results = _run(tmp_path / "s.sqlite", lines)
    runs = {(r.run_spec.workload, r.run_spec.framework): sorted(x.run_spec.repeat for x in results
                                                                if (x.run_spec.workload, x.run_spec.framework)
                                                                == (r.run_spec.workload, r.run_spec.framework))
            for r in results}
    assert runs[("mnist", "torch")] == runs[("mnist", "tensorflow")] == [0, 1, 2]  # settled at 3: a clear win
    noisy = runs[("autoencoder", "torch")]
    assert noisy == runs[("autoencoder", "tensorflow")] and 3 < len(noisy) <= 5 and noisy == list(range(len(noisy)))
    assert all(r.run_spec.seed == r.run_spec.repeat for r in results)  # seed = the suite's seed + repeat
    assert all(r.adaptive_repeats == AdaptiveRepeats(first=3, max=5, looks=3) for r in results)
    assert len(summary.ran) == len(results) == len(fake_trials)
    assert lines[0] == ("adaptive repeats: autoencoder/tiny not settled after 3 runs per configuration: "
                        "run 4 of at most 5")
    assert lines[-1] in ("adaptive repeats: stopped at 5 runs per configuration (--max-repeats)",
                         f"adaptive repeats: every verdict settled after {len(noisy)} runs per configuration")


def test_an_adaptive_run_again_resumes_from_the_store_and_runs_nothing_twice(tmp_path, fake_trials):
    first, results = _run(tmp_path / "s.sqlite", [])
    fake_trials.clear()
    again, stored = _run(tmp_path / "s.sqlite", [])
    assert fake_trials == [] and again.ran == []
    assert len(again.skipped) == len(first.ran) and len(stored) == len(results)


def test_repeats_auto_and_max_repeats_are_checked_naming_the_flag_or_line():
    from bakeoff.core.spec import SpecError
    from bakeoff.plan.suite import load_suite

    assert load_suite("quick", {"repeats": "auto"}).adaptive == {"first": 3, "max": 10}
    assert load_suite("quick", {"repeats": "auto", "max_repeats": 4}).adaptive == {"first": 3, "max": 4}
    with pytest.raises(SpecError, match="--max-repeats applies only with --repeats auto"):
        load_suite("quick", {"max_repeats": 4})
    with pytest.raises(SpecError, match="--max-repeats 2: max repeats must be an integer >= 3"):
        load_suite("quick", {"repeats": "auto", "max_repeats": 2})
    with pytest.raises(SpecError, match='line 4: max_repeats applies only with repeats = "auto"'):
        parse_suite(SUITE.replace('repeats = "auto"', "repeats = 2"), "t.toml")
    with pytest.raises(SpecError, match=r'repeats must be a positive integer, got .auto. \(or "auto" at the top'):
        parse_suite(SUITE + 'repeats = "auto"\n', "t.toml")
    fixed = parse_suite(SUITE.replace('repeats = "auto"\nmax_repeats = 5\n', "repeats = 2\n"), "t.toml")
    assert fixed.adaptive is None and len(fixed.specs) == 8


def test_the_dry_run_says_how_many_more_trials_repeats_auto_may_add(tmp_path, capsys):
    from bakeoff.cli.main import main

    assert main(["run", "--repeats", "auto", "--max-repeats", "5", "--dry-run", "--store",
                 str(tmp_path / "s.sqlite")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "dry run: 24 trials, 0 already stored, 24 to run" in said
    assert ("repeats auto: these are the first 3 runs of each configuration; a section whose verdict is still "
            "unsettled then gets one more run per configuration at a time, up to 5 (at most 16 more trials") in said
    assert not (tmp_path / "s.sqlite").exists()
