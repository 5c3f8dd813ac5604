"""The report says what ran, how to run it again, when a section mixes experiments, and why a criterion is missing."""

from __future__ import annotations

import dataclasses
import shlex

import numpy as np
import pytest

from bakeoff.analysis.decide import decide, decide_each
from bakeoff.analysis.mixing import section_mixes
from bakeoff.analysis.stats import summarise_groups
from bakeoff.core import registry
from bakeoff.core.result import BatchSearch
from bakeoff.core.spec import RunSpec
from bakeoff.report.render import render_report
from bakeoff.report.reproduce import reproduce_commands
from bakeoff.report.what_ran import what_ran_blocks
from fake_results import TRAIN_ROWS, respec, trial, verdict_body

TRAIN_A, TRAIN_B = "1a2b3c4d5e6f7a8b", "9f8e7d6c5b4a3921"
USER_INFO = {"source": "reviews.csv, 800 train / 200 test (seeded split: test_fraction=0.2, split_seed=0)",
             "classes": ["bad", "good", "ok"], "vocab_size_used": 3900, "majority_rate": 0.45,
             "target": {"value": 0.725, "rule": "derived from your data: half-way from the test split's "
                                                "majority-class rate 0.450 to 1 = 0.725"}}


def runs(framework: str, execution: str, examples_per_s=(900, 950, 1000), time_to_target_s=(2.0, 2.1, 2.2),
         **kwargs):
    """Three repeats seeded as suites and ``bakeoff run --repeats 3`` seed them: repeat r has seed r."""
    return [trial(framework, execution, seed=i, repeat=i, examples_per_s=e, time_to_target_s=t, **kwargs)
            for i, (e, t) in enumerate(zip(examples_per_s, time_to_target_s, strict=True))]


def tf_runs(**kwargs):
    """TensorFlow graph, clearly behind :func:`runs` of PyTorch at its defaults."""
    return runs("tensorflow", "graph", (500, 520, 540), (4.0, 4.1, 4.2), **kwargs)


def pair(**kwargs):
    """PyTorch eager clearly ahead of TensorFlow graph, each framework in its users' mode, 3 runs each."""
    return runs("torch", "eager", **kwargs) + tf_runs(**kwargs)


def markdown(results, tmp_path, **kwargs) -> str:
    return render_report(results, tmp_path, **kwargs)["markdown"].read_text()


def block(md: str, heading: str) -> str:
    return md.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]


def verdict(md: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("**Verdict:**"))


# --- what ran ------------------------------------------------------------------------------------------------------


def test_what_ran_lists_data_model_budget_target_and_settings(tmp_path):
    lines = [line for line in block(markdown(pair(), tmp_path), "What ran").splitlines() if line]
    assert lines == [  # golden
        "- **Data:** shipped with bakeoff",
        "- **Data set:** Amazon fine-food reviews (modeldata::small_fine_foods), 4000 train / 1000 test · 2 classes "
        "(great, other) · majority class 0.658 of the test split",
        "- **Preset:** tiny, no overrides",
        "- **Model:** vocab_size 4000 · seq_len 128 · d_model 64 · num_heads 4 · d_ff 128 · num_layers 2 · "
        "dropout 0.1 · learning_rate 0.001 · num_classes 2 · layer_norm_eps 1e-05",
        "- **Parameters:** 1,234,567",
        "- **Batch:** 32 per step",
        "- **Budget:** at most 100 steps",
        "- **Trained:** 100 steps, 0.8 epochs, 96 steady",
        "- **Evaluation:** every 10 steps on the test split, off the training clock",
        "- **Target:** accuracy ≥ 0.78, measured for preset tiny on the shipped data",
        "- **Precision:** fp32",
        "- **Execution:** graph (tensorflow/graph); eager (torch/eager)",
        "- **Threads:** all 16 cores",
        "- **Thread pools, intra / inter-op:** 16 / 1 (tensorflow/graph); 16 / 16 (torch/eager)",
        "- **Device:** auto → cpu",
        "- **Runs:** 3 trials, 3 successful, seeds 0, 1, 2",
        "- **Versions:** bakeoff 0.1.0+9f8e7d6c; tensorflow 2.21.0; torch 2.13.0",
        "- **Order:** frameworks take turns within each repeat, shuffled with order seed 0",
    ]


def test_what_ran_states_the_trials_own_facts(tmp_path):
    # The golden above pins the rendering; here each fact is derived from the trials themselves, independently of
    # the report's code: the shipped data's counts, the resolved model configuration, what each run trained.
    results = pair()
    facts = block(markdown(results, tmp_path), "What ran")
    first = results[0]
    data = first.setup.data
    majority = registry.workload("text_classifier").load_data(first.run_spec).info["majority_rate"]
    assert f"majority class {majority:.3f} of the test split" in facts and data["majority_rate"] == majority
    assert ", ".join(data["classes"]) in facts and f"{len(data['classes'])} classes" in facts
    model = " · ".join(f"{k} {v}" for k, v in first.setup.config.items())
    assert f"- **Model:** {model}\n" in facts
    assert f"- **Parameters:** {first.num_params:,}\n" in facts
    assert f"- **Batch:** {first.run_spec.batch_size} per step\n" in facts
    steps = len(first.step_times_s)
    steady = steps - 1 - first.run_spec.warmup_steps  # the first step and the warm-up are not steady
    epochs = steps * first.run_spec.batch_size / TRAIN_ROWS
    assert f"- **Trained:** {steps} steps, {epochs:g} epochs, {steady} steady\n" in facts
    seeds = ", ".join(str(r.run_spec.seed) for r in results if r.run_spec.framework.value == "torch")
    assert f"{len(results) // 2} trials, {len(results) // 2} successful, seeds {seeds}" in facts


def test_user_data_shows_its_file_hash_classes_majority_rate_and_where_the_target_came_from(tmp_path):
    results = pair(data={"train": "reviews.csv"}, data_hashes={"train": TRAIN_A}, data_info=USER_INFO,
                   target=0.725)
    results = [dataclasses.replace(r, target=0.725) for r in results]
    facts = block(markdown(results, tmp_path), "What ran")
    assert "- **Data:** train=reviews.csv (content 1a2b3c4d)\n" in facts
    assert ("- **Data set:** reviews.csv, 800 train / 200 test (seeded split: test_fraction=0.2, split_seed=0) · "
            "3 classes (bad, good, ok) · majority class 0.45 of the test split\n") in facts
    assert ("- **Target:** accuracy ≥ 0.725, derived from your data: half-way from the test split's majority-class "
            "rate 0.450 to 1 = 0.725\n") in facts


def declared(results):
    """``results`` as trials of a workload that declared its target rather than measured it record them."""
    for r in results:
        r.training.target_rule = "declared by the workload for preset tiny, not measured"
        r.training.target_source = "declared"
    return results


def test_a_declared_target_reads_declared_by_the_workload_in_what_ran_and_the_verdict(tmp_path):
    """A user workload's guessed target once read "measured for preset tiny on the shipped data", and time to it
    decided the verdict with nothing said."""
    md = markdown(declared(pair()), tmp_path)
    assert ("- **Target:** accuracy ≥ 0.78, declared by the workload for preset tiny, not measured\n"
            in block(md, "What ran"))
    assert "measured for preset" not in md
    assert ("time to target is to accuracy ≥ 0.78, a target declared by the workload, not measured: it is only as "
            "telling as that choice") in verdict(md)
    weights = {"throughput": 1, "time_to_target": 0, "first_step": 0, "memory": 0, "quality": 0}
    assert "declared by the workload" not in verdict(markdown(declared(pair()), tmp_path, weights=weights))


def test_a_measured_target_adds_nothing_to_the_verdict(tmp_path):
    assert "a target declared" not in verdict(markdown(pair(), tmp_path))


def test_an_older_result_without_the_targets_source_does_not_claim_measured(tmp_path):
    """Stored before the source was recorded, a result's rule said "measured" of declared targets too: its word is
    not taken. Its own record still settles a target the user set."""
    results = pair()
    for r in results:
        r.training.target_source = ""  # as read from such a store: the field's default
    facts = block(markdown(results, tmp_path), "What ran")
    assert ("- **Target:** accuracy ≥ 0.78, the workload's for preset tiny, source not recorded (stored before "
            "bakeoff recorded whether a target was measured or declared)\n") in facts
    given = [respec(r, target=0.78) for r in results]
    for r in given:
        r.training.target_rule = "set by the user"
    assert "- **Target:** accuracy ≥ 0.78, set by the user\n" in block(markdown(given, tmp_path), "What ran")


def test_steps_epochs_and_steady_steps_trained_differ_per_configuration(tmp_path):
    results = runs("torch", "eager", steps=60) + tf_runs(steps=100)
    results[1].training.epochs = 0.5  # this run stopped earlier
    facts = block(markdown(results, tmp_path), "What ran")
    assert ("- **Trained:** 100 steps, 0.8 epochs, 96 steady (tensorflow/graph); 60 steps, 0.48–0.5 epochs, "
            "56 steady (torch/eager)\n") in facts


# --- reproduce -----------------------------------------------------------------------------------------------------


def test_reproduce_gives_the_run_command_of_each_configuration(tmp_path):
    md = markdown(pair(), tmp_path)
    assert block(md, "Reproduce").split("```")[1].strip().splitlines() == [
        "bakeoff run --workload text_classifier --framework tensorflow --execution graph --precision fp32 --preset "
        "tiny --batch-size 32 --max-steps 100 --eval-every 10 --seed 0 --repeats 3",
        "bakeoff run --workload text_classifier --framework torch --execution eager --precision fp32 --preset tiny "
        "--batch-size 32 --max-steps 100 --eval-every 10 --seed 0 --repeats 3"]


def test_a_full_cross_of_modes_is_one_command_with_every_flag_the_specs_set():
    results = [respec(r, grad_accum=2, stop_at_target=True, threads=4, device="cpu", config={"d_model": "512"},
                      target=0.7, data={"train": "my data/reviews.csv"}, max_steps=None, max_epochs=2.5)
               for fw in ("torch", "tensorflow") for ex in ("eager", "graph") for r in runs(fw, ex)]
    commands, notes = reproduce_commands(summarise_groups(results))
    assert commands == [
        "bakeoff run --workload text_classifier --framework tensorflow,torch --execution eager,graph --precision "
        "fp32 --preset tiny --batch-size 32 --grad-accum 2 --max-epochs 2.5 --eval-every 10 --stop-at-target "
        "--threads 4 --device cpu --data 'train=my data/reviews.csv' --set d_model=512 --target 0.7 --seed 0 "
        "--repeats 3"]
    assert notes == []


def test_the_reproduce_command_parses_back_into_the_same_trials():
    from bakeoff.cli import main as cli
    from bakeoff.cli.options import trial_flags
    from bakeoff.plan import suite

    results = [respec(r, grad_accum=2, stop_at_target=True, data={"split_seed": "3"}, max_steps=None,
                      max_epochs=2.0, eval_every=20)
               for r in runs("torch", "eager") + runs("tensorflow", "graph")]
    commands, _ = reproduce_commands(summarise_groups(results))
    rebuilt = []
    for command in commands:
        args = cli.build_parser().parse_args(shlex.split(command)[1:])
        rebuilt += suite.adhoc_suite(trial_flags(args)).specs

    def comparable(spec: RunSpec) -> dict:
        return {k: v for k, v in spec.to_dict().items() if k != "content"}

    assert sorted(map(comparable, rebuilt), key=str) == sorted((comparable(r.run_spec) for r in results), key=str)


def test_specs_no_flag_can_make_are_named():
    results = [respec(r, warmup_steps=5) for r in runs("torch", "eager")]
    results += [trial("tensorflow", "graph", seed=0, repeat=i) for i in range(2)]  # two repeats, one seed
    _, notes = reproduce_commands(summarise_groups(results))
    assert notes == ["2 runs with seed 0, which `--repeats` cannot make (it gives repeat r the seed + r): one run per "
                     "seed (tensorflow/graph)", "warmup_steps = 5: not a flag, only a suite sets it (torch/eager)"]


def test_reproduce_names_the_shipped_suite_the_trials_came_from(tmp_path):
    results = pair()
    md = markdown(results, tmp_path, suites={r.key: "quick" for r in results})
    assert "Or the whole suite they came from:\n\n```\nbakeoff run --suite quick\n```" in block(md, "Reproduce")
    for name in ("adhoc-text_classifier", "quick+1a2b3c4d"):  # the flag lines are their command
        assert "--suite" not in markdown(results, tmp_path / name, suites={r.key: name for r in results})


# --- never mixes without saying so ---------------------------------------------------------------------------------


def mixed_data():
    """PyTorch trained on one content of the training file, TensorFlow on another (an edit, another path)."""
    return (runs("torch", "eager", data={"train": "ux/data/train.csv"}, data_hashes={"train": TRAIN_A})
            + tf_runs(data={"train": "data/train.csv"}, data_hashes={"train": TRAIN_B}))


def test_different_data_contents_are_separate_sections_never_one_verdict(tmp_path):
    """Before: one verdict compared accuracy on two different test sets (a JSONL and a CSV run in one store), with
    one data set's target applied to both, flagged only by hashes. Now each data set is a section of its own."""
    both = mixed_data() + runs("torch", "eager", data={"train": "data/train.csv"}, data_hashes={"train": TRAIN_B})
    md = markdown(both, tmp_path)
    assert "## text_classifier / tiny · data train 1a2b3c4d\n" in md and "## text_classifier / tiny · data train " \
        "9f8e7d6c\n" in md
    verdicts = [line for line in md.splitlines() if line.startswith("**Verdict:**")]  # each once, in its section
    assert len(verdicts) == 2 and "different data" not in md and "Not like with like" not in md
    alone, compared = sorted(verdicts, key=lambda v: "9f8e7d6c" in v)
    assert "1a2b3c4d" in alone and "TensorFlow" not in alone  # PyTorch alone on that data: nothing to compare
    assert "text_classifier/tiny · data train 9f8e7d6c" in compared and "TensorFlow" in compared
    d = decide_each(summarise_groups(both))
    assert sorted(d) == [("text_classifier", "tiny · data train 1a2b3c4d"),
                         ("text_classifier", "tiny · data train 9f8e7d6c")]
    page = (tmp_path / "report.html").read_text()
    assert page.count("tiny · data train 9f8e7d6c</h2>") == 1


def test_other_sizes_of_a_preset_are_separate_sections_never_one_verdict(tmp_path):
    """Before: the `sizes` suite's three sizes of the tiny preset (its ``config`` overrides, as ``--set`` gives) were
    one section, whose verdict compared PyTorch at one size against TensorFlow at another. Now a preset with other
    overrides is another model: a section of its own, named by them."""
    wider = [respec(r, config={"d_model": "128", "num_layers": "2"}) for r in pair()]
    both = pair() + wider
    md = markdown(both, tmp_path)
    assert "## text_classifier / tiny\n" in md and "## text_classifier / tiny (d_model=128, num_layers=2)\n" in md
    verdicts = [line for line in md.splitlines() if line.startswith("**Verdict:**")]
    assert len(verdicts) == 2 and any("tiny (d_model=128, num_layers=2)" in v for v in verdicts)
    summaries = summarise_groups(both)
    assert sorted(decide_each(summaries)) == [("text_classifier", "tiny"),
                                              ("text_classifier", "tiny (d_model=128, num_layers=2)")]
    assert sorted({s.label for s in summaries}) == ["tensorflow/graph", "torch/eager"]  # no config_hash= in a label
    assert wider[-1].run_spec.title() == "text_classifier/tiny (d_model=128, num_layers=2) tensorflow/graph seed 2"


def test_sizes_of_a_preset_read_smallest_first():
    """Sections are in reading order: numbers in the overrides compare as numbers (``d_ff=1024`` sorted as text came
    before ``d_ff=256``)."""
    sized = [respec(r, config={"d_ff": str(d_ff)}) for d_ff in (1024, 256) for r in pair()]
    want = ["tiny", "tiny (d_ff=256)", "tiny (d_ff=1024)"]
    summaries = summarise_groups(pair() + sized)
    assert [preset for _, preset in decide_each(summaries)] == want
    assert list(dict.fromkeys(s.preset for s in summaries)) == want


def test_one_file_through_two_paths_is_one_data_set_and_one_configuration(tmp_path):
    torch = runs("torch", "eager", data={"train": "data/train.csv"}, data_hashes={"train": TRAIN_A})
    torch[2] = respec(torch[2], data={"train": "./ux/../data/train.csv"})  # the same content, another path
    tf = tf_runs(data={"train": "data/train.csv"}, data_hashes={"train": TRAIN_A})
    summaries = summarise_groups(torch + tf)
    assert [(s.label, s.n_total) for s in summaries] == [("tensorflow/graph", 3), ("torch/eager", 3)]
    assert section_mixes(summaries) == []
    assert "Not like with like" not in markdown(torch + tf, tmp_path)


def test_results_of_two_bakeoff_versions_are_kept_apart_and_flagged(tmp_path):
    old = "0.1.0+0000aaaa11112222"
    results = pair(bakeoff=old) + runs("torch", "eager", (600, 610, 620), (3.0, 3.1, 3.2))
    summaries = summarise_groups(results)
    assert sorted(s.label for s in summaries) == [
        "tensorflow/graph", "torch/eager/bakeoff=0.1.0+0000aaaa", "torch/eager/bakeoff=0.1.0+9f8e7d6c"]
    assert [m.text() for m in section_mixes(summaries)] == [
        "bakeoff version: 0.1.0+0000aaaa (tensorflow/graph, torch/eager/bakeoff=0.1.0+0000aaaa); 0.1.0+9f8e7d6c "
        "(torch/eager/bakeoff=0.1.0+9f8e7d6c)"]
    d = decide(summaries)
    assert d.verdict.startswith("PyTorch (eager, bakeoff=0.1.0+0000aaaa) wins text_classifier/tiny over")
    assert "different bakeoff versions" not in d.verdict  # the two compared ran on one version
    newer_tf = runs("torch", "eager", bakeoff=old) + tf_runs()
    assert "text_classifier/tiny (different bakeoff versions) over" in decide(summarise_groups(newer_tf)).verdict


def test_a_setting_every_framework_varied_is_no_mix_one_framework_apart_is():
    both = [respec(r, batch_size=8, grad_accum=4) for r in pair()] + pair()
    assert section_mixes(summarise_groups(both)) == []  # 4×8 and 32 for each framework: a suite's variant
    apart = [respec(r, batch_size=64) for r in runs("torch", "eager")] + tf_runs()
    summaries = summarise_groups(apart)
    assert [m.text() for m in section_mixes(summaries)] == ["batch size: 32 (tensorflow/graph); 64 (torch/eager)"]
    assert "text_classifier/tiny (different batch sizes: 64 vs 32) over" in decide(summaries).verdict
    searched = apart[:3]
    for r in searched:
        r.batch_search = BatchSearch(64, None, "rss", [])
    assert section_mixes(summarise_groups(searched + apart[3:]))[0].note == "each found by the batch-size search"


def test_a_different_model_config_names_the_entries_that_differ():
    """A resolved configuration that differs with no override to say so (a workload whose preset changed between
    versions) is a mix, named entry by entry; an override (``--set d_model=512``) is another section
    (:func:`test_other_sizes_of_a_preset_are_separate_sections_never_one_verdict`)."""
    torch = runs("torch", "eager")
    for r in torch:
        r.setup.config["d_model"] = 512
    summaries = summarise_groups(torch + tf_runs())
    assert [m.text() for m in section_mixes(summaries)] == [
        "model config: d_model 64 (tensorflow/graph); d_model 512 (torch/eager)"]
    assert "(different model configs: d_model 512 vs d_model 64)" in decide(summaries).verdict
    overridden = summarise_groups([respec(r, config={"d_model": "512"}) for r in torch] + tf_runs())
    assert sorted({s.preset for s in overridden}) == ["tiny", "tiny (d_model=512)"]


# --- why a criterion is missing; no equal criterion cited -----------------------------------------------------------


def three_steps(r):
    """``r`` as the engine records a trial of 3 steps: no steady step after the first and 3 warm-up steps."""
    return dataclasses.replace(r, step_times_s=r.step_times_s[:3], steady_step_s=None, throughput={},
                               training=dataclasses.replace(r.training, steady_steps=0))


def test_a_criterion_left_out_says_why_in_the_verdict_and_the_report(tmp_path):
    results = [three_steps(r) for r in pair()]
    why = "no steady steps: 3 steps trained left nothing after the first step and 3 warm-up steps"
    assert decide(summarise_groups(results)).excluded["throughput"] == why
    md = markdown(results, tmp_path)
    assert f"; without throughput ({why})" in verdict(md)
    weights = {line.split(" | ")[0][2:]: line for line in block(md, "Weights").splitlines()[2:] if line}
    assert weights["throughput"].endswith(f"| 0.3 | 0 (excluded: {why}) |")
    assert ("- **Trained:** 3 steps, 0.8 epochs, no steady step (the first step and 3 warm-up steps are not timed "
            "as steady)") in md
    assert "; without " not in decide(summarise_groups(pair())).verdict  # nothing left out: nothing said


def test_no_verdict_cites_a_criterion_on_which_the_two_sides_are_equal():
    equal = pair(final_metric=0.658)
    d = decide(summarise_groups(equal), {"quality": 0.6})
    assert d.winner == "torch" and d.head_to_head["quality"].equivalent
    assert "0.658" not in d.verdict and "accuracy at 3,200 examples:" not in d.verdict
    assert d.verdict.split("equal within ±5% on ")[1].split(";")[0].endswith("accuracy at 3,200 examples")  # named
    # Inconclusive: the equal criterion is named as equal, without its numbers.
    close = (runs("torch", "eager", (400, 1000, 1600), (2.0, 2.1, 2.2), final_metric=0.658)
             + runs("tensorflow", "graph", (500, 900, 1300), (2.0, 2.1, 2.2), final_metric=0.658))
    d = decide(summarise_groups(close), {"throughput": 1, "time_to_target": 0, "first_step": 0, "memory": 0,
                                         "quality": 1})
    assert d.inconclusive and "0.658" not in d.verdict
    assert verdict_body(d.verdict).endswith("equal within ±5% on accuracy at 3,200 examples; PyTorch ran only in "
                                            "eager mode, one its users train in; its compiled mode (graph) was not "
                                            "tried.")


@pytest.mark.parametrize("kind", ["verdict", "warning"])
def test_templates_mark_verdicts_and_warnings_in_both_formats(kind):
    from bakeoff.report.templates import Code, Facts, Para, to_html, to_markdown

    blocks = [Para("a < b", kind), Facts([("Data", "x & y")]), Code(["bakeoff run --seed 0"])]
    md, page = to_markdown("t", blocks), to_html("t", blocks)
    prefix = {"verdict": "Verdict:", "warning": "Not like with like:"}[kind]
    assert f"**{prefix}** a < b" in md and f'<p class="{kind}"><strong>{prefix}</strong> a &lt; b</p>' in page
    assert "- **Data:** x & y" in md and "<li><strong>Data:</strong> x &amp; y</li>" in page
    assert "```\nbakeoff run --seed 0\n```" in md and "<pre><code>bakeoff run --seed 0</code></pre>" in page


# --- what the report says about the data ----------------------------------------------------------------------------


def test_the_report_gives_class_counts_reading_and_balanced_accuracy_on_imbalanced_classes(tmp_path):
    """Before: a class with 8 of 302 test rows was invisible behind "majority 0.262", and nothing said how much of
    each text the model read."""
    info = {**USER_INFO, "class_counts": {"train": [700, 60, 40], "test": [180, 12, 8]},
            "reading": {"seq_len": 128, "mean_tokens": 412.5, "median_tokens": 380.0, "texts_cut": 0.83,
                        "tokens_unread": 0.71}}
    results = pair(data={"train": "reviews.csv"}, data_hashes={"train": TRAIN_A}, data_info=info)
    for i, r in enumerate(results):
        r.curve[-1]["balanced_accuracy"] = 0.40 + 0.01 * (i % 3)  # 0.40, 0.41, 0.42 per framework: median 0.41
    facts = block(markdown(results, tmp_path), "What ran")
    assert "rows per class (train / test): bad 700 / 180, good 60 / 12, ok 40 / 8" in facts
    assert ("texts of 412 tokens on average (median 380); the model reads the first 128: 83% of texts cut, 71% of "
            "all tokens unread") in facts
    assert [r.curve[-1]["metric"] for r in results] == [0.8] * 6
    assert "- **Balanced accuracy:** 0.41 (median of 3 runs' last evaluation; accuracy 0.8): each class's" in facts
    balanced = {**info, "class_counts": {"train": [400, 400, 400], "test": [100, 90, 70]}}
    even = pair(data={"train": "reviews.csv"}, data_hashes={"train": TRAIN_A}, data_info=balanced)
    assert "Balanced accuracy" not in block(markdown(even, tmp_path / "even"), "What ran")  # 100 / 70: balanced enough


def test_text_classifier_records_class_counts_and_how_much_of_the_texts_it_reads():
    from bakeoff.data.text import reading

    assert reading(["a b c", "a b c d e"], 4) == {"seq_len": 4, "mean_tokens": 4.0, "median_tokens": 4.0,
                                                   "texts_cut": 0.5, "tokens_unread": 1 / 8}
    wl = registry.workload("text_classifier")
    data = wl.load_data(RunSpec(workload="text_classifier", framework="torch", max_steps=1))
    counts = data.info["class_counts"]
    assert sum(counts["train"]) == data.num_train and sum(counts["test"]) == data.num_test
    assert data.info["reading"]["seq_len"] == 128 and 0 < data.info["reading"]["texts_cut"] < 1
    probabilities = np.array([0.9, 0.8, 0.7, 0.2, 0.1])  # predicted 1, 1, 1, 0, 0
    labels = np.array([1, 1, 1, 1, 0])  # class 1 recall 3/4, class 0 recall 1/1
    assert wl.metrics(probabilities, {"labels": labels}) == {"accuracy": 0.8, "balanced_accuracy": 0.875}


def test_a_section_whose_trials_ran_on_several_machines_names_them():
    """An executor spreads trials over a cluster's nodes (#27): the report says which machine ran what."""
    torch, tf = runs("torch", "eager"), tf_runs()
    for r, host in zip(torch + tf, ["node-a"] * 3 + ["node-b", "node-b", "node-a"], strict=True):
        r.environment["host"] = host
    summaries = summarise_groups(torch + tf)
    assert [m.text() for m in section_mixes(summaries)] == [
        "machine: node-b (tensorflow/graph); node-a (tensorflow/graph, torch/eager)"]
    assert "text_classifier/tiny (ran on different machines: node-a vs node-b / node-a) over" \
        in decide(summaries).verdict
    facts = " ".join(" ".join(str(b) for b in what_ran_blocks(summaries)).split())
    assert "node-a (1 trial), node-b (2 trials) (tensorflow/graph); node-a (3 trials) (torch/eager)" in facts
    for r in tf:
        r.environment["host"] = "node-b"
    assert "text_classifier/tiny (ran on different machines: node-a vs node-b) over" \
        in decide(summarise_groups(torch + tf)).verdict
    one = runs("torch", "eager") + tf_runs()  # no host recorded (older results): nothing said
    assert section_mixes(summarise_groups(one)) == [] and "Machines" not in str(what_ran_blocks(summarise_groups(one)))
