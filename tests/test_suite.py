"""Suite files expand into RunSpecs exactly as documented; mistakes name the line."""

from __future__ import annotations

import pytest

from bakeoff.analysis.decide import resolve_weights
from bakeoff.core.spec import SpecError
from bakeoff.plan.suite import adhoc_suite, load_suite, parse_suite, shipped_suites

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
team_familiarity = 0.1
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
    assert suite.weights == {"throughput": 0.5, "team_familiarity": 0.1}
    assert suite.qualitative == {"team_familiarity": {"torch": 4.0}}


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
    # scores without a weight would count for nothing: refused, saying how to weigh them
    ("[qualitative.team]\ntorch = 4\n", "line 5: \\[qualitative.team\\] has scores but no weight: add `team = 0.2`"),
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


# --- every value checked before any trial -------------------------------------------------------------------

TC = '[defaults]\nworkload = "text_classifier"\nframework = "torch"\nmax_steps = 2\n'


@pytest.mark.parametrize(("text", "message"), [
    (TC + 'batch_size = "sixteen"\n', "t.toml, line 5: \\[defaults\\] batch_size must be a positive integer, got "
                                      "'sixteen'"),
    (TC + "batch_size = 16.0\n", "line 5: \\[defaults\\] batch_size must be a positive integer, got 16.0"),
    (TC + 'stop_at_target = "yes"\n', "stop_at_target must be true or false, got 'yes'"),
    (TC + 'target = "high"\n', "line 5: \\[defaults\\] target must be a number, got 'high'"),
    (TC + "max_epochs = -1\n", "max_epochs must be a number above 0, got -1"),
    (TC + "seed = -3\n", "seed must be an integer >= 0, got -3"),
    (TC + 'device = "gpu"\n', "unknown device 'gpu'; accepted: auto, cpu, cuda"),
    (TC + '[matrix]\nexecution = ["eager", "jit"]\n', "line 6: \\[matrix\\] unknown execution 'jit'; accepted: "
                                                      "eager, graph, xla"),
    (TC + '[[variant]]\nbatch_size = "auto"\n', "\\[variant\\] batch_size must be a positive integer, got 'auto' "
                                                "\\('auto' is accepted in \\[defaults\\] only\\)"),
    (TC + 'data = "train.csv"\n', "data must be a table of KEY = value"),
    (TC + "config = {d_model = {width = 1}}\n", "config must be a table of KEY = value"),
    (TC.replace("text_classifier", "sentiment"), "line 2: \\[defaults\\] unknown workload 'sentiment'; accepted: "
                                                 "autoencoder, mnist, speech_ctc, text_classifier, MODULE:CLASS"),
    (TC + '[batch_search]\nmemory_cap = "2GiB"\n', 'line 5: \\[batch_search\\] applies only with batch_size = "auto"'),
    (TC + 'batch_size = "auto"\n[batch_search]\nmemory_cap = "lots"\n', "memory_cap: cannot read memory size 'lots'"),
    (TC + 'batch_size = "auto"\n[batch_search]\nstep = 0\n', "step must be a positive integer, got 0"),
    ('timeout_s = "long"\n' + TC, "line 1: timeout_s must be a number of seconds above 0, got 'long'"),
    ("name = 3\n" + TC, "line 1: name must be a string, got 3"),
    (TC + '[[exclude]]\nframwork = "torch"\n', "line 6: unknown field 'framwork' in \\[exclude\\]"),
    (TC + 'content = {x = "1"}\n', "unknown field 'content' in \\[defaults\\]"),  # the runner's, not the suite's
    ("[config]\nd_model = 32\n" + TC + "config = {num_layers = 1}\n", "give the config overrides once"),
])
def test_every_value_is_checked_when_the_suite_loads(text, message):
    with pytest.raises(SpecError, match=message):
        parse_suite(text, "t.toml")


def test_config_tables_merge_key_by_key_and_lists_keep_toml_spelling():
    suite = parse_suite('[config]\nd_model = 32\n' + TC.replace("text_classifier", "mnist")
                        + "[[variant]]\nconfig = {num_layers = 1}\n[[variant]]\nconfig = {d_model = 128}\n"
                        + '[[variant]]\nconfig = {filters = [16, 32]}\ntarget = 0.9\n')
    assert [dict(s.config) for s in suite.specs] == [
        {"d_model": "32", "num_layers": "1"}, {"d_model": "128"}, {"d_model": "32", "filters": "[16, 32]"}]
    assert [s.target for s in suite.specs] == [None, None, 0.9]


# --- command-line overrides ---------------------------------------------------------------------------------

MINE = """
name = "mine"
description = "torch eager against TF graph"
[defaults]
workload = "text_classifier"
max_epochs = 2
batch_size = 16
eval_every = 10
[config]
d_model = 32
[matrix]
framework = ["torch", "tensorflow"]
execution = ["eager", "graph"]
[[exclude]]
framework = "torch"
execution = "graph"
[[variant]]
repeats = 2
[[variant]]
batch_size = 8
grad_accum = 2
"""


def test_flags_override_the_suite_in_every_trial_and_the_suite_says_so():
    suite = parse_suite(MINE, "mine.toml", {"max_steps": 4, "repeats": 1, "framework": ["torch"], "batch_size": 64,
                                            "config": {"num_layers": "1"}, "target": 0.7})
    # torch's graph mode stays excluded; both variants now use batch 64, and the second keeps its grad_accum
    assert [(s.label(), s.batch_size, s.repeat) for s in suite.specs] == [("torch/eager", 64, 0),
                                                                           ("torch/eager/accum2", 64, 0)]
    assert {(s.max_steps, s.max_epochs, s.target) for s in suite.specs} == {(4, None, 0.7)}  # budget replaced
    assert {s.config for s in suite.specs} == {(("d_model", "32"), ("num_layers", "1"))}  # merged key by key
    assert suite.overrides == {"--set": "num_layers=1", "--target": "0.7", "--framework": "torch",
                               "--repeats": "1", "--batch-size": "64", "--max-steps": "4"}
    assert suite.description == ("torch eager against TF graph (overridden from the command line in every trial: "
                                 "--max-steps 4, --repeats 1, --framework torch, --batch-size 64, --set num_layers=1, "
                                 "--target 0.7)")  # in the order given
    # Stored apart from the suite as written, under one name per set of overrides (so a re-run resumes).
    assert suite.name.startswith("mine+") and suite.name != parse_suite(MINE, "mine.toml").name
    assert parse_suite(MINE, "mine.toml", {"max_steps": 4, "repeats": 1, "framework": ["torch"], "batch_size": 64,
                                           "config": {"num_layers": "1"}, "target": 0.7}).name == suite.name
    assert parse_suite(MINE, "mine.toml", {"max_steps": 5}).name != suite.name


def test_set_learning_rate_replaces_the_suites_learning_rate_field():
    suite = parse_suite(MINE.replace("eval_every = 10", "eval_every = 10\nlearning_rate = 0.01"), "mine.toml",
                        {"config": {"learning_rate": "0.002"}})
    assert {(s.learning_rate, s.config_overrides["learning_rate"]) for s in suite.specs} == {(None, "0.002")}


def test_a_list_flag_becomes_the_matrix_and_auto_batch_size_comes_with_its_search():
    suite = parse_suite(MINE, "mine.toml", {"execution": ["graph", "xla"], "batch_size": "auto",
                                            "memory_cap": "2GiB", "batch_step": 8})
    assert sorted({s.label() for s in suite.specs}) == ["tensorflow/graph", "tensorflow/graph/accum2",
                                                        "tensorflow/xla", "tensorflow/xla/accum2", "torch/xla",
                                                        "torch/xla/accum2"]
    assert suite.auto_batch == {"memory_cap": 2 * 2**30, "step": 8}
    assert parse_suite(MINE, "mine.toml", {"stop_at_target": True}).specs[0].stop_at_target


@pytest.mark.parametrize(("overrides", "message"), [
    ({"workload": "mnist"}, "--workload mnist: a suite names its workloads"),
    ({"batch_size": "sixteen"}, "--batch-size sixteen: batch_size must be a positive integer or 'auto', got "
                                "'sixteen'"),
    ({"max_steps": 0}, "--max-steps 0: max_steps must be a positive integer, got 0"),
    ({"max_seconds": float("inf")}, "--max-seconds inf: max_seconds must be a number above 0"),
    ({"framework": ["torch", "mxnet"]}, "--framework torch,mxnet: unknown framework 'mxnet'; accepted: torch, "
                                        "tensorflow, jax"),
    ({"framework": []}, "--framework : give at least one framework"),
    ({"precision": ["fp8"]}, "--precision fp8: unknown precision 'fp8'; accepted: fp32, bf16, fp16"),
    ({"repeats": 0}, "--repeats 0: repeats must be a positive integer, got 0"),
    ({"threads": -1}, "--threads -1: threads must be an integer >= 0, got -1"),
    ({"device": "tpu"}, "--device tpu: unknown device 'tpu'; accepted: auto, cpu, cuda"),
    ({"target": float("nan")}, "--target nan: target must be a number"),
    ({"memory_cap": "lots"}, "--memory-cap lots: cannot read memory size 'lots'"),
    ({"memory_cap": "2GiB"}, "--memory-cap applies only with --batch-size auto"),
    ({"batch_step": 0}, "--batch-step 0: batch step must be a positive integer"),
    ({"execution": ["jit"]}, "--execution jit: unknown execution 'jit'; accepted: eager, graph, xla"),
])
def test_bad_flags_with_a_suite_are_refused_naming_the_flag(overrides, message):
    with pytest.raises(SpecError, match=message):
        parse_suite(MINE, "mine.toml", overrides)


def test_a_target_for_a_suite_of_several_workloads_is_refused():
    with pytest.raises(SpecError, match="--target 0.9: this suite runs several workloads \\(autoencoder, mnist, "
                                        "text_classifier\\), each with its own metric"):
        load_suite("quick", {"target": 0.9})


def test_adhoc_trials_are_the_flags_over_the_documented_defaults():
    suite = adhoc_suite({"workload": "mnist", "framework": ["torch"], "max_steps": 3, "seed": None,
                         "config": {"filters": "4,8"}, "repeats": 2})
    assert suite.name == "adhoc-mnist" and suite.overrides == {}  # the flags are the suite: nothing overridden
    assert [(s.label(), s.seed, s.max_steps, s.max_epochs, s.batch_size, s.eval_every) for s in suite.specs] == [
        ("torch/eager", 0, 3, None, 32, 25), ("torch/graph", 0, 3, None, 32, 25),
        ("torch/eager", 1, 3, None, 32, 25), ("torch/graph", 1, 3, None, 32, 25)]
    assert adhoc_suite({"workload": "mnist"}).specs[0].max_epochs == 1.0  # no budget given: one epoch
    with pytest.raises(SpecError, match="--workload sentiment: unknown workload 'sentiment'; accepted: "):
        adhoc_suite({"workload": "sentiment"})
