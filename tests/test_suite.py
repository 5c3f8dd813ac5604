"""Suite files expand into RunSpecs exactly as documented; mistakes name the line."""

from __future__ import annotations

import pytest

from bakeoff.analysis.decide import resolve_weights
from bakeoff.spec import SpecError
from bakeoff.suite import load_suite, parse_suite, shipped_suites

SUITE = """
name = "s"
repeats = 2
[defaults]
workload = "text_classifier"
max_steps = 5
seed = 10
[matrix]
framework = ["torch", "tensorflow"]
execution = ["eager", "xla"]
[[variant]]
precision = "fp32"
[[variant]]
batch_size = 8
grad_accum = 4
[[exclude]]
framework = "torch"
execution = "xla"
[weights]
throughput = 0.5
[qualitative.team_familiarity]
torch = 4
"""


def test_matrix_variants_excludes_and_repeats_expand_in_repeat_major_order():
    suite = parse_suite(SUITE)
    labels = [(s.repeat, s.seed, s.label()) for s in suite.specs]
    one_repeat = ["torch/eager", "torch/eager/accum4", "tensorflow/eager", "tensorflow/eager/accum4",
                  "tensorflow/xla", "tensorflow/xla/accum4"]
    assert labels == [(0, 10, x) for x in one_repeat] + [(1, 11, x) for x in one_repeat]
    assert {s.batch_size for s in suite.specs if s.grad_accum == 4} == {8}
    assert len({s.key() for s in suite.specs}) == 12
    assert suite.weights == {"throughput": 0.5} and suite.qualitative == {"team_familiarity": {"torch": 4.0}}


def test_a_variant_sets_its_own_repeats_and_data_options():
    suite = parse_suite('repeats = 3\n[defaults]\nworkload = "speech_ctc"\nframework = "torch"\nmax_steps = 5\n'
                        '[[variant]]\nexecution = "graph"\n'
                        '[[variant]]\nrepeats = 1\ndata = {batching = "bucket", pad_multiple = "16"}\n')
    graph = [s for s in suite.specs if s.execution.value == "graph"]
    bucket = [s for s in suite.specs if s.execution.value == "eager"]
    assert [s.seed for s in graph] == [0, 1, 2] and [s.seed for s in bucket] == [0]
    assert dict(bucket[0].data) == {"batching": "bucket", "pad_multiple": "16"} and not graph[0].data


def test_auto_batch_size_is_recorded_for_the_search():
    suite = parse_suite('[defaults]\nworkload = "text_classifier"\nframework = "torch"\nmax_steps = 2\n'
                        'batch_size = "auto"\n[batch_search]\nmemory_cap = "2GiB"\nstep = 16\n')
    assert suite.auto_batch == {"memory_cap": 2 * 2**30, "step": 16}


@pytest.mark.parametrize(("text", "message"), [
    ('colour = "red"\n', "line 1: unknown key 'colour'"),
    ('[defaults]\nworkload = "text_classifier"\nframework = "torch"\n[matrix]\nexecution = "eager"\n',
     "line 5: \\[matrix\\] execution must be a non-empty list"),
    ('[defaults]\nworkload = "text_classifier"\nframework = "torch"\n', "needs a budget"),
    ('[defaults]\nframework = "torch"\nmax_steps = 1\n', "needs a workload and a framework"),
    ('repeats = 0\n[defaults]\nworkload = "w"\n', "line 1: repeats must be a positive integer"),
    ('[defaults]\nworkload = "w"\n[[variant]]\nrepeats = "2"\n', "line 4: repeats must be a positive integer"),
])
def test_mistakes_name_the_line_and_the_problem(text, message):
    with pytest.raises(SpecError, match=message):
        parse_suite(text, "t.toml")


BUDGET = '[defaults]\nworkload = "mnist"\nframework = "torch"\nmax_steps = 2\n'
CRITERIA = ", ".join(resolve_weights({}, None))  # every measured criterion, as decide names them


@pytest.mark.parametrize(("text", "message"), [
    ("[weights]\nspeed = 1\n", f"line 5: \\[weights\\]: unknown criterion 'speed' in weights; accepted: {CRITERIA}"),
    ('[weights]\nthroughput = "abc"\n', f"weight of 'throughput' must be a number >= 0, got 'abc'; accepted "
                                        f"criteria: {CRITERIA}"),
    ("[weights]\nthroughput = -1\n", "weight of 'throughput' must be a finite number >= 0, got -1"),
    ("[weights]\nteam = 1\n", "unknown criterion 'team'"),  # a qualitative criterion needs scores
    ("[qualitative.team]\ntorch = 7\n", "line 5: score of torch in \\[qualitative.team\\] must be a number from 0 "
                                        "to 5, got 7"),
    ('[qualitative.team]\ntorch = "high"\n', "must be a number from 0 to 5, got 'high'"),
    ("[qualitative.team]\npytorch = 3\n", "unknown framework 'pytorch' in \\[qualitative.team\\]; accepted: torch, "
                                          "tensorflow, jax"),
    ("[qualitative]\nteam = 3\n", "line 5: use \\[qualitative.CRITERION\\] tables"),
])
def test_weights_and_scores_are_checked_when_the_suite_loads(text, message):
    with pytest.raises(SpecError, match=message):
        parse_suite(BUDGET + text, "t.toml")


def test_qualitative_criteria_can_be_weighted():
    suite = parse_suite(BUDGET + "[weights]\nteam = 0.5\n[qualitative.team]\ntorch = 4\ntensorflow = 2.5\n")
    assert suite.weights == {"team": 0.5} and suite.qualitative == {"team": {"torch": 4.0, "tensorflow": 2.5}}


def test_every_shipped_suite_loads():
    assert set(shipped_suites()) >= {"quick", "modes", "speech", "seeds"}
    for name in shipped_suites():
        assert load_suite(name).specs
