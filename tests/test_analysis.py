"""Summaries, comparisons, grouping and the decision, on hand-made results (see tests/fake_results.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bakeoff.analysis.decide import DEFAULT_WEIGHTS, decide, decide_each, display_name, resolve_weights
from bakeoff.analysis.stats import (
    _u_counts,
    compare,
    group_results,
    mann_whitney_p,
    summarise,
    summarise_groups,
)
from bakeoff.spec import RunSpec
from fake_results import default_results, failed, repeats, trial

FAMILIARITY = {"team_familiarity": {"torch": 1, "tensorflow": 5}}


def by_label(summaries):
    return {s.label: s for s in summaries}


# --- summarise -------------------------------------------------------------------------------------------------


def test_summarise_quartiles_of_known_values():
    s = summarise([8, 1, 7, 2, 6, 3, 5, 4])
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max) == (8, 4.5, 2.75, 6.25, 1, 8)
    assert s.rel_spread == pytest.approx(3.5 / 4.5)
    assert s.noisy
    assert s.values == (1, 2, 3, 4, 5, 6, 7, 8)
    assert s.interval == (2.75, 6.25)


def test_summarise_uses_the_range_below_four_samples():
    tight, wide = summarise([101, 99, 100]), summarise([9, 10, 11])
    assert (tight.median, tight.rel_spread, tight.noisy) == (100, pytest.approx(0.02), False)
    assert (wide.rel_spread, wide.noisy) == (pytest.approx(0.2), True)
    assert wide.interval == (9, 11)


def test_summarise_ignores_missing_values():
    assert summarise([]) is None
    assert summarise([None, math.nan]) is None
    one = summarise([None, 3.0, math.nan])
    assert (one.n, one.median, one.rel_spread, one.noisy) == (1, 3.0, 0.0, False)


# --- Mann-Whitney and compare ------------------------------------------------------------------------------------


def test_mann_whitney_exact_distribution():
    assert sum(_u_counts(4, 5)) == math.comb(9, 4)
    assert _u_counts(2, 2) == [1, 1, 2, 1, 1]
    assert mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert mann_whitney_p([1, 3, 5, 7], [2, 4, 6, 8]) > 0.5
    # With ties: the normal approximation, symmetric in its arguments.
    p = mann_whitney_p([1, 1, 2, 2, 3], [3, 4, 4, 5, 5])
    assert 0 < p < 0.05 and p == pytest.approx(mann_whitney_p([3, 4, 4, 5, 5], [1, 1, 2, 2, 3]))


def test_compare_disjoint_samples_have_a_winner():
    c = compare([1.0, 1.1, 1.05], [2.0, 2.1, 2.2])  # times: lower is faster
    assert (c.verdict, c.better, c.p_value) == ("a faster", "a", None)  # 3 vs 3 cannot reach p < 0.05: no test
    assert c.ratio == pytest.approx(1.05 / 2.1)
    c = compare([950, 940, 960], [520, 510, 530], higher_is_better=True)  # throughput: higher is faster
    assert c.verdict == "a faster"


def test_compare_overlapping_samples_are_inconclusive():
    c = compare([500, 520, 540], [510, 515, 530], higher_is_better=True)
    assert (c.verdict, c.better, c.reason) == ("inconclusive", None, "the ranges overlap")


def test_compare_noisy_pair_and_single_samples_are_inconclusive():
    assert compare([1.0, 1.5], [3.0, 3.1]).verdict == "inconclusive"  # noisy with n < 3
    assert compare([1.0], [1.05]).verdict == "inconclusive"  # 5% from one sample each
    assert compare([1.0], [2.0]).verdict == "a faster"
    assert compare([], [1.0]).verdict == "inconclusive"


def test_compare_uses_mann_whitney_when_the_samples_allow():
    c = compare([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert c.verdict == "a faster" and c.p_value == pytest.approx(2 / 252)


# --- grouping and configuration summaries ------------------------------------------------------------------------


def test_group_results_puts_repeats_together():
    groups = group_results(default_results())
    assert list(groups) == [("text_classifier", "tiny", label) for label in
                            ("tensorflow/eager", "tensorflow/graph", "tensorflow/xla", "torch/eager", "torch/graph")]
    assert [r.run_spec.repeat for r in groups["text_classifier", "tiny", "torch/graph"]] == [0, 1, 2]
    assert len(groups["text_classifier", "tiny", "tensorflow/xla"]) == 1


def test_configurations_sharing_a_label_are_told_apart_by_what_differs():
    def variant(result, seed=0, **changes):
        raw = {**result.spec, **changes, "seed": seed}
        return dataclasses.replace(result, spec=raw, key=RunSpec.from_dict(raw).key())

    base = trial("torch", "eager")
    results = [variant(base, seed=s, data={"batching": "pad"}) for s in (0, 1)]
    results += [variant(base, data={"batching": "bucket", "pad_multiple": "16"})]
    results += [variant(base, batch_size=16, data={"batching": "pad"})]
    results += [trial("tensorflow", "eager")]
    groups = group_results(results)
    assert sorted(label for _, _, label in groups) == [
        "tensorflow/eager",  # alone under its label: unchanged
        "torch/eager/batch_size=16/batching=pad/pad_multiple=(default)",
        "torch/eager/batch_size=32/batching=bucket/pad_multiple=16",
        "torch/eager/batch_size=32/batching=pad/pad_multiple=(default)",
    ]
    assert len(groups["text_classifier", "tiny", "torch/eager/batch_size=32/batching=pad/pad_multiple=(default)"]) == 2
    assert display_name("torch/eager/batching=pad") == "PyTorch (eager, batching=pad)"


def test_summarise_groups_measures_every_quantity():
    s = by_label(summarise_groups(default_results()))
    tg = s["torch/graph"]
    assert (tg.framework, tg.execution, tg.n_ok, tg.n_total, tg.reached) == ("torch", "graph", 3, 3, 3)
    assert (tg.examples_per_s.median, tg.examples_per_s.q1, tg.examples_per_s.q3) == (950, 945, 955)
    assert tg.time_to_target_s.median == pytest.approx(2.1)
    assert tg.steady_step_s.median == pytest.approx(32 / 950)
    assert tg.peak_memory_bytes.median == 410 * 2**20
    assert (tg.first_step_s.median, tg.import_s.median, tg.final_metric.median) == (1.2, 1.9, 0.80)
    assert tg.tokens_per_s is None and tg.missing["tokens_per_s"] == "not recorded by the 3 successful trials"
    assert not tg.examples_per_s.noisy
    assert s["tensorflow/eager"].examples_per_s.noisy  # 280..320 around 300: 13% range


def test_missing_quantities_say_why():
    s = by_label(summarise_groups(default_results()))
    eager = s["tensorflow/eager"]
    assert eager.time_to_target_s is None and eager.reached == 0
    assert eager.missing["time_to_target_s"] == "target not reached in 3/3 trials"
    xla = s["tensorflow/xla"]
    assert (xla.n_ok, xla.n_total, xla.statuses) == (0, 1, {"failed": 1})
    assert xla.examples_per_s is None
    assert xla.missing["examples_per_s"] == ("not measured: 1 trial failed: UnimplementedError: XLA compilation is "
                                             "not supported for op 'StringToHashBucketFast' on CPU")
    assert xla.reasons == [xla.missing["examples_per_s"].removeprefix("not measured: ")]


# --- decide ------------------------------------------------------------------------------------------------------


def test_decide_names_the_winner_with_numbers():
    d = decide(summarise_groups(default_results()))
    assert d.winner == "torch" and not d.inconclusive and d.robust
    assert [(f.framework, f.label) for f in d.ranking] == [("torch", "torch/graph"), ("tensorflow", "tensorflow/graph")]
    assert d.verdict == (
        "PyTorch (graph) wins text_classifier/tiny: 1.8x the steady throughput of TensorFlow (graph) "
        "(950 vs 520 examples/s, median of 3) and reaches accuracy 0.78 in 2.1 s vs 4.1 s; "
        "the verdict holds under every single weight halved or doubled.")
    # torch/graph is best on throughput and time to target; 0.3 + 0.3 + 0.1 * 0.05/1.2 + 0.1 * 380/410 + 0.2 * 0.80/0.81
    expected = 0.3 + 0.3 + 0.1 * 0.05 / 1.2 + 0.1 * 380 / 410 + 0.2 * 0.80 / 0.81
    assert d.ranking[0].score == pytest.approx(expected)
    assert d.margin == pytest.approx(d.ranking[0].score - d.ranking[1].score)
    assert d.head_to_head["throughput"] == "a faster" and d.head_to_head["quality"] == "inconclusive"


def test_a_config_that_never_reaches_the_target_scores_zero_on_it():
    d = decide(summarise_groups(default_results()))
    parts = {c.label: c.parts for c in d.configs}
    assert parts["tensorflow/eager"]["time_to_target"] == 0
    assert parts["tensorflow/graph"]["time_to_target"] == pytest.approx(2.1 / 4.1)
    assert "tensorflow/xla" not in parts  # nothing to score


def test_sensitivity_finds_the_weight_that_flips_the_winner():
    d = decide(summarise_groups(default_results()), {"team_familiarity": 0.3}, FAMILIARITY)
    assert d.winner == "torch" and not d.robust
    row = next(r for r in d.sensitivity if r.criterion == "team_familiarity")
    assert (row.winner_if_zero, row.winner_if_halved, row.winner_if_doubled) == ("torch", "torch", "tensorflow")
    assert row.flips_at == 1.25 and row.flips_to == "tensorflow"
    throughput = next(r for r in d.sensitivity if r.criterion == "throughput")
    assert throughput.winner_if_halved == "tensorflow" and throughput.winner_if_doubled == "torch"
    assert d.verdict.endswith("but TensorFlow wins if the team_familiarity weight is doubled.")
    assert d.weights["team_familiarity"] == pytest.approx(0.3 / 1.3)


def test_differences_within_noise_are_inconclusive():
    weights = {c: 0.0 for c in DEFAULT_WEIGHTS} | {"quality": 1.0}  # 0.80 vs 0.81: overlapping ranges
    d = decide(summarise_groups(default_results()), weights)
    assert d.inconclusive and d.winner is None
    assert d.verdict.startswith("inconclusive on text_classifier/tiny: TensorFlow (graph) leads PyTorch (")
    assert d.verdict.endswith("only by differences within run-to-run noise (quality 0.81 vs 0.8)")
    close = [*repeats("torch", "graph", [500, 520, 540], [3.0, 3.1, 3.2], final_metric=[0.8] * 3),
             *repeats("tensorflow", "graph", [510, 515, 530], [3.05, 3.1, 3.15], final_metric=[0.8] * 3)]
    d = decide(summarise_groups(close))
    assert d.inconclusive and d.verdict.startswith("inconclusive")


def test_no_comparison_when_one_framework_has_no_successful_trial():
    results = [r for r in default_results() if r.spec["framework"] == "torch"] + [failed("tensorflow", "graph")]
    d = decide(summarise_groups(results))
    assert d.winner is None and d.sensitivity == []
    assert d.verdict == ("no comparison possible on text_classifier/tiny: TensorFlow had no successful trial "
                         "(1 trial failed: UnimplementedError: XLA compilation is not supported for op "
                         "'StringToHashBucketFast' on CPU)")
    d = decide(summarise_groups(results[:3]))
    assert d.verdict == ("no comparison possible on text_classifier/tiny: only PyTorch was run; "
                         "its best mode is graph (950 examples/s)")


def test_a_criterion_measured_for_only_some_configs_is_excluded():
    results = default_results()
    results[0] = dataclasses.replace(results[0], peak_memory_bytes=None)  # one repeat: still measured
    results += [trial("torch", "xla", peak_mib=1.0, examples_per_s=100, time_to_target_s=None)]
    results[-1].peak_memory_bytes = None
    d = decide(summarise_groups(results))
    assert d.excluded == {"peak_memory": "not measured for torch/xla"}
    assert "peak_memory" not in d.weights and sum(d.weights.values()) == pytest.approx(1.0)


def test_bad_weights_and_scores_are_rejected_with_the_accepted_values():
    summaries = summarise_groups(default_results())
    with pytest.raises(ValueError, match="unknown criterion 'speed'.*accepted: throughput"):
        decide(summaries, {"speed": 1})
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        decide(summaries, {"throughput": -1})
    with pytest.raises(ValueError, match="needs a score 0..5 for 'tensorflow'"):
        decide(summaries, {"ecosystem": 1}, {"ecosystem": {"torch": 4}})
    assert resolve_weights(None, FAMILIARITY) == {**DEFAULT_WEIGHTS, "team_familiarity": 0.0}


def test_decide_each_splits_workload_presets():
    results = default_results() + [trial("torch", "graph", preset="small"), trial("tensorflow", "graph",
                                                                                  preset="small")]
    summaries = summarise_groups(results)
    with pytest.raises(ValueError, match="exactly one"):
        decide(summaries)
    decisions = decide_each(summaries)
    assert list(decisions) == [("text_classifier", "small"), ("text_classifier", "tiny")]
    assert decisions["text_classifier", "tiny"].winner == "torch"


def test_display_name():
    assert display_name("torch/graph/bf16") == "PyTorch (graph, bf16)"
    assert display_name("tensorflow/xla") == "TensorFlow (xla)"
