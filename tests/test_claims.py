"""``bakeoff claims``: the claims file (every bad input refused naming the claim, field and accepted values), the
verdicts on synthetic stored results (supported, refuted, unsettled and why; hardware; deployments), the
report's Claims section, and one real run of one cheap claim end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bakeoff.cli.main import main
from bakeoff.core.result import Mfu
from bakeoff.core.spec import SpecError
from bakeoff.plan.capacity import measured_mfu
from bakeoff.plan.claims import load_claims, parse_claims
from bakeoff.report import claims as judged
from bakeoff.report.render import render_report
from bakeoff.report.templates import to_markdown
from fake_results import BATCH, STEPS, default_results, failed, respec, trial

# Matches fake_results' trials (text_classifier/tiny, STEPS steps of BATCH, evaluated every 10)
TRIALS = f"""
[claim.trials]
workload = "text_classifier"
max_steps = {STEPS}
batch_size = {BATCH}
eval_every = 10
"""
BUILD = """
[[claim]]
name = "build"
said = "TensorFlow's graph builds 3x slower than PyTorch's"
quantity = "first_step_s"
at_least = 3.0
a = {framework = "tensorflow", execution = "graph"}
b = {framework = "torch", execution = "graph"}
""" + TRIALS


def runs(framework: str, execution: str, first_steps: list[float]) -> list:
    return [trial(framework, execution, repeat=i, seed=i, first_step_s=v) for i, v in enumerate(first_steps)]


def verdict_of(text: str, results: list, **kwargs) -> judged.ClaimVerdict:
    (v,) = judged.judge(parse_claims(text), results, **kwargs)
    return v


# --- the claims file ---------------------------------------------------------------------------------------------

def test_the_shipped_claims_load_with_their_measurable_forms():
    claims = {c.name: c for c in load_claims()}
    assert {"graph_build", "accumulation_sync", "static_graphs_faster", "mirrored_48h_to_8h", "tflite_mobile",
            "ddp_libraries"} <= set(claims)
    build = claims["graph_build"]
    assert (build.quantity, build.threshold, build.gpus) == ("first_step_s", "≥ 3x", 0)
    (c,) = build.comparisons
    assert [s.label() for s in (c.a[0], c.b[0])] == ["tensorflow/graph", "torch/graph"]
    assert [s.seed for s in c.a] == [0, 1, 2]  # 3 runs a side, seeds as a suite's repeats
    sync = claims["accumulation_sync"]
    assert sync.threshold == "≤ 0.6x" and [c.label for c in sync.comparisons] == ["torch eager", "tensorflow graph"]
    assert sync.comparisons[0].a[0].label() == "torch/eager/accum2/data_parallelx2"
    assert [c.label for c in claims["static_graphs_faster"].comparisons] == ["torch", "tensorflow", "jax"]
    assert claims["mirrored_48h_to_8h"].gpus == 8 and claims["mirrored_48h_to_8h"].plan["devices"] == 8
    assert claims["tflite_mobile"].deployment == {"framework": "tensorflow", "format": "litert", "target": "mobile"}
    assert claims["ddp_libraries"].form == "untestable" and "not quantities" in claims["ddp_libraries"].why


BAD = [
    (BUILD.replace('"first_step_s"', '"compile_minutes"'), "claim 'build', quantity: unknown quantity "
                                                           "'compile_minutes'; accepted: examples_per_s"),
    (BUILD.replace("at_least = 3.0", ""), "claim 'build', at_least: give the threshold as at_least"),
    (BUILD.replace("at_least = 3.0", "at_least = 3.0\nat_most = 5.0"), "at_least = R or at_most = R"),
    (BUILD.replace("at_least = 3.0", "at_least = -1"), "claim 'build', at_least: give a ratio above 0"),
    (BUILD.replace('execution = "graph"}', 'execution = "jit"}', 1),
     "claim 'build', a.execution: unknown execution 'jit'; accepted: eager, graph, xla"),
    (BUILD.replace("max_steps", "max_stepz"), "claim 'build', trials.max_stepz: unknown configuration field "
                                              "'max_stepz'; accepted: workload, framework"),
    (BUILD.replace('"text_classifier"', '"imagenet"'), "claim 'build', trials.workload: unknown workload"),
    (BUILD.replace('b = {framework = "torch", execution = "graph"}', 'b = {framework = "tensorflow", '
                                                                    'execution = "graph"}'),
     "a and b are the same configuration"),
    (BUILD.replace("[[claim]]", "[[claim]]\nthreshold = 3"), "claim 'build', threshold: unknown field; accepted:"),
    (BUILD + BUILD, "two claims are named 'build'"),
    (BUILD.replace("[[claim]]", "claims = 1\n[[claim]]"), "unknown key(s) claims"),
    ("[[claim]\nname = 'x'", "not valid TOML"),
    ("", "no claims: write each as a [[claim]] table"),
    ('[[claim]]\nname = "d"\nsaid = "DDP is hard"\ntestable = false\n', "claim 'd', why: say why"),
    ('[[claim]]\nname = "d"\nsaid = "DDP is hard"\ntestable = false\nwhy = "no"\nquantity = "first_step_s"\n',
     "claim 'd', quantity: a claim with testable = false has no measurable form"),
    ('[[claim]]\nname = "m"\nsaid = "TF Lite"\ndeployment = {framework = "tensorflow", format = "tflite", '
     'target = "mobile"}\n', "claim 'm', deployment.format: unknown format 'tflite'; accepted: torchscript"),
    ('[[claim]]\nname = "m"\nsaid = "TF Lite"\ndeployment = {framework = "torch", format = "litert", '
     'target = "mobile"}\n', "claim 'm', deployment.framework: 'torch' does not export litert"),
    ('[[claim]]\nname = "m"\nsaid = "TF Lite"\ndeployment = {framework = "tensorflow", format = "litert", '
     'target = "browser"}\n', "claim 'm', deployment.target: litert is deployed to mobile, edge, not 'browser'"),
    (BUILD.replace("[[claim]]", "[[claim]]\nneeds = {gpus = -8}"), "claim 'build', needs.gpus: give a number"),
    (BUILD.replace("[[claim]]", "[[claim]]\nneeds = {tpus = 8}"), "claim 'build', needs: give a table of gpus"),
    (BUILD + '[claim.plan]\npreset = "paper"\nbatch = 8\nmemory = "80GB"\n',
     "claim 'build', plan: a plan answers for hardware this machine may lack: give needs"),
    (BUILD.replace("[[claim]]", "[[claim]]\nneeds = {gpus = 8}") + '[claim.plan]\nlayers = 2\nwidth = 100\n'
     'heads = 3\nbatch = 8\nmemory = "80GB"\n', "claim 'build', plan: heads=3 does not divide width=100"),
    (BUILD.replace("[[claim]]", "[[claim]]\nneeds = {gpus = 8}") + '[claim.plan]\nparams = 1e9\nbatch = 8\n'
     'memory = "80"\n', "claim 'build', plan: "),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=range(len(BAD)))
def test_each_bad_claims_file_is_refused_naming_the_claim_and_the_field(text, message):
    with pytest.raises(SpecError) as caught:
        parse_claims(text, "mine.toml")
    assert message in str(caught.value) and str(caught.value).startswith("mine.toml")


def test_cli_refuses_a_bad_claim_with_exit_2_before_anything_runs_or_is_written(tmp_path, capsys):
    mine = tmp_path / "mine.toml"
    mine.write_text(BUILD.replace('"first_step_s"', '"compile_minutes"'))
    store = tmp_path / "store.sqlite"
    assert main(["claims", "--file", str(mine), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "bakeoff claims: error: " in err and "unknown quantity 'compile_minutes'; accepted:" in err
    # A preset the workload lacks is only known to the workload: refused before any trial, nothing written
    mine.write_text(BUILD.replace('workload = "text_classifier"', 'workload = "text_classifier"\npreset = "huge"'))
    assert main(["claims", "--file", str(mine), "--store", str(store)]) == 2
    said = capsys.readouterr()
    assert "claim 'build': unknown preset 'huge'" in said.err and said.out == "" and not store.exists()
    assert main(["claims", "--only", "graph_build,nonsense", "--store", str(store)]) == 2
    assert "--only graph_build,nonsense: unknown claim nonsense; accepted: graph_build," in capsys.readouterr().err
    assert main(["claims", "--file", str(tmp_path / "none.toml")]) == 2
    assert "no such claims file" in capsys.readouterr().err


# --- verdicts on synthetic stored results ------------------------------------------------------------------------

def test_supported_when_the_whole_interval_clears_the_threshold():
    v = verdict_of(BUILD, runs("tensorflow", "graph", [3.6, 3.5, 3.7]) + runs("torch", "graph", [1.0, 1.02, 0.98]))
    (f,) = v.findings
    assert v.verdict == f.verdict == "supported" and f.n == (3, 3)
    assert f.low > 3.0 and f.low <= f.ratio <= f.high and f.ratio == pytest.approx(3.6, rel=0.01)
    assert f.why.startswith("the whole 95% CI") and "clears ≥ 3x" in f.why
    assert judged.figures(v.claim, f).startswith("3.6 vs 1 s (3.60x, 95% CI ")


def test_refuted_when_the_whole_interval_misses_it_and_at_most_reads_the_other_way():
    v = verdict_of(BUILD, runs("tensorflow", "graph", [2.0, 2.05, 1.95]) + runs("torch", "graph", [1.0, 1.0, 1.01]))
    assert v.verdict == "refuted" and v.findings[0].high < 3.0 and "misses ≥ 3x" in v.findings[0].why
    # The same figures against "at most 2.5x": supported
    v = verdict_of(BUILD.replace("at_least = 3.0", "at_most = 2.5"),
                   runs("tensorflow", "graph", [2.0, 2.05, 1.95]) + runs("torch", "graph", [1.0, 1.0, 1.01]))
    assert v.verdict == "supported" and "clears ≤ 2.5x" in v.findings[0].why


def test_unsettled_when_the_interval_straddles_the_threshold_or_runs_are_too_few():
    v = verdict_of(BUILD, runs("tensorflow", "graph", [2.0, 4.5, 3.2]) + runs("torch", "graph", [1.0, 1.0, 1.0]))
    f = v.findings[0]
    assert v.verdict == "unsettled" and f.low < 3.0 < f.high and "reaches both sides of ≥ 3x" in f.why
    # Two runs a side: an interval exists and clears 3x, but a verdict needs 3 (provisional everywhere in bakeoff)
    v = verdict_of(BUILD, runs("tensorflow", "graph", [3.6, 3.5]) + runs("torch", "graph", [1.0, 1.02]))
    assert v.verdict == "unsettled" and v.findings[0].n == (2, 2)
    assert "provisional: n = 2 vs 2 runs, 3 a side needed" in v.findings[0].why
    assert "the interval alone would say supported" in v.findings[0].why
    v = verdict_of(BUILD, runs("tensorflow", "graph", [3.6]) + runs("torch", "graph", [1.0]))
    assert v.verdict == "unsettled" and "n = 1 vs 1 runs: no interval" in v.findings[0].why


def test_a_side_that_failed_or_was_never_run_is_unsettled_with_the_reason():
    broken = [failed("torch", "graph", repeat=i, seed=i, reason="inductor needs a C++ compiler") for i in range(3)]
    v = verdict_of(BUILD, runs("tensorflow", "graph", [3.6, 3.5, 3.7]) + broken)
    assert v.verdict == "unsettled" and v.findings[0].ratio is None
    assert "torch/graph" in v.findings[0].why and "inductor needs a C++ compiler" in v.findings[0].why
    v = verdict_of(BUILD, runs("tensorflow", "graph", [3.6, 3.5, 3.7]))
    assert v.verdict == "unsettled" and "no trials of torch/graph in the store" in v.findings[0].why


def test_each_comparison_is_judged_alone_and_disagreeing_ones_make_the_claim_mixed():
    text = BUILD.replace('a = {framework = "tensorflow", execution = "graph"}', 'a = {execution = "graph"}').replace(
        'b = {framework = "torch", execution = "graph"}', 'b = {execution = "eager"}').replace(
        "[[claim]]", '[[claim]]\neach = [{framework = "torch"}, {framework = "tensorflow"}]')
    results = (runs("torch", "graph", [4.0, 4.1, 3.9]) + runs("torch", "eager", [1.0, 1.0, 1.0])
               + runs("tensorflow", "graph", [1.5, 1.5, 1.55]) + runs("tensorflow", "eager", [1.0, 1.0, 1.0]))
    v = verdict_of(text, results)
    assert [(f.label, f.verdict) for f in v.findings] == [("torch", "supported"), ("tensorflow", "refuted")]
    assert v.verdict == "mixed"


def test_a_claim_needing_gpus_this_machine_lacks_says_so_with_the_plans_answer():
    text = (BUILD.replace("[[claim]]", "[[claim]]\nneeds = {gpus = 8}")
            + '[claim.plan]\npreset = "paper"\nbatch = 256\ndevices = 8\nmemory = "80GB"\nflops = 312e12\n'
              'bandwidth = "300GB/s"\n')
    v = verdict_of(text, [], gpus=0)
    assert v.verdict == "needs hardware" and "needs 8 GPUs; this machine has 0" in v.findings[0].why
    assert "a prediction, not a measurement" in v.notes[0] and "on 8 × 80.0 GB" in v.notes[0]
    assert "fits" in v.notes[0] and "tensorflow: no MFU measured on a GPU" in v.notes[1]
    # A CPU's MFU is not a GPU's (#49): the plan's GPUs get no time from it, and it says so
    v = verdict_of(text, [], gpus=0, mfu={"tensorflow": {"CPU": (0.3, "measured on this CPU")}})
    assert "no speed-up predicted" in v.notes[1] and "30.0% on a CPU, does not transfer" in v.notes[1]
    # With an MFU measured on a GPU the plan predicts a speed-up, still not a verdict
    v = verdict_of(text, [], gpus=0, mfu={"tensorflow": {"GPU": (0.4, "measured on a GPU in the test")}})
    assert v.verdict == "needs hardware" and "predicted speed-up over one device" in v.notes[1]
    # Results stored from a machine that had the GPUs are judged like any
    v = verdict_of(text, runs("tensorflow", "graph", [3.6, 3.5, 3.7]) + runs("torch", "graph", [1.0, 1.0, 1.01]))
    assert v.verdict == "supported" and v.notes == []


def test_a_claim_true_exactly_at_its_threshold_is_rarely_called_either_way_and_a_clear_one_is_found():
    """Calibration, by simulation through the real judge (about 2 s): runs drawn with 10% log-normal noise around
    a true ratio of exactly 3 (the threshold) are called supported or refuted at most 5% of the time each (2.5%
    expected of a one-sided read of a 95% interval); a true ratio of 4.5 at 5% noise is called supported in most."""
    rng = np.random.default_rng(29)
    claims = parse_claims(BUILD)

    def called(true_ratio: float, noise: float, draws: int) -> dict[str, int]:
        counts = {"supported": 0, "refuted": 0, "unsettled": 0}
        for _ in range(draws):
            a, b = true_ratio * np.exp(rng.normal(0, noise, 3)), np.exp(rng.normal(0, noise, 3))
            (v,) = judged.judge(claims, runs("tensorflow", "graph", list(a)) + runs("torch", "graph", list(b)))
            counts[v.verdict] += 1
        return counts

    null = called(3.0, 0.10, 300)
    assert null["supported"] <= 15 and null["refuted"] <= 15 and null["unsettled"] >= 270
    assert called(4.5, 0.05, 60)["supported"] >= 48


TFLITE = ('[[claim]]\nname = "m"\nsaid = "TF Lite is the mobile path"\n'
          'deployment = {framework = "tensorflow", format = "litert", target = "mobile"}\n')


def deployment_row(fmt: str, framework: str, status: str = "ok", parity: str = "ok") -> dict:
    return {"key": f"{framework}-{fmt}", "model_key": "m1", "workload": "mnist", "preset": "tiny",
            "framework": framework, "format": fmt, "status": status, "reason": "converter error" * (status != "ok"),
            "targets": ["mobile"], "inference": {"parity": parity, "latency_s": {"p50": 1e-4}}}


def test_a_deployment_claim_reads_what_bakeoff_deploy_stored():
    v = verdict_of(TFLITE, [], deployments=[deployment_row("litert", "tensorflow"),
                                            deployment_row("torch-onnx", "torch")])
    assert v.verdict == "supported" and "litert exported, ran in its runtime and matched" in v.findings[0].why
    assert v.notes == ["also reaching mobile here: torch torch-onnx"]
    v = verdict_of(TFLITE, [], deployments=[deployment_row("litert", "tensorflow", "failed")])
    assert v.verdict == "refuted" and "converter error" in v.findings[0].why
    v = verdict_of(TFLITE, [], deployments=[deployment_row("litert", "tensorflow", parity="differs")])
    assert v.verdict == "refuted"
    v = verdict_of(TFLITE, [])
    assert v.verdict == "unsettled" and "no stored deployment of tensorflow litert" in v.findings[0].why
    missing = {**deployment_row("litert", "tensorflow", "unsupported"), "reason": "pip install 'bakeoff[deploy]'"}
    v = verdict_of(TFLITE, [], deployments=[missing])  # not installed here: no evidence either way
    assert v.verdict == "unsettled" and "litert was not tried here: pip install" in v.findings[0].why


def test_a_claim_without_a_measurable_form_gets_no_number():
    v = verdict_of('[[claim]]\nname = "d"\nsaid = "DDP needs extra libraries"\ntestable = false\n'
                   'why = "a judgement about packaging"\n', runs("torch", "graph", [1.0, 1.0, 1.0]))
    assert v.verdict == "not testable" and v.findings[0].ratio is None and v.findings[0].why == "a judgement about " \
                                                                                              "packaging"
    assert v.to_dict()["findings"][0]["a"] is None


def test_measured_mfu_reads_each_trials_framework():
    # bakeoff plan --store (and a claim's plan) read the MFU stored with every trial; the spec is a dict
    results = [trial("torch", "graph", repeat=i, seed=i) for i in range(3)]
    results = [dataclasses.replace(r, mfu=Mfu(value=v, device_kind="CPU"))
               for r, v in zip(results, (0.1, 0.3, 0.2), strict=True)]
    assert measured_mfu(results) == {"torch": {"CPU": (0.2, "median of 3 stored trials on a CPU")}}
    gpu = [dataclasses.replace(r, mfu=Mfu(value=0.5, device_kind="GPU")) for r in results[:1]]
    assert measured_mfu([*results, *gpu])["torch"] == {"CPU": (0.2, "median of 3 stored trials on a CPU"),
                                                       "GPU": (0.5, "median of 1 stored trials on a GPU")}


# --- the report --------------------------------------------------------------------------------------------------

def test_the_report_has_a_claims_section_only_when_a_claims_trials_are_in_it(tmp_path, monkeypatch):
    results = default_results()  # torch graph first step 1.2 s, TensorFlow graph 0.8 s: 3x slower is refuted
    assert judged.section(results) == []  # the shipped claims' trials are none of these
    monkeypatch.setattr(judged, "load_claims", lambda: parse_claims(BUILD))
    markdown = to_markdown("t", judged.section(results))
    assert "## Claims" in markdown and "| refuted |" in markdown and "0.8 vs 1.2 s (0.67x, 95% CI" in markdown
    paths = render_report(results, tmp_path)
    report = paths["markdown"].read_text()
    assert "## Claims" in report and report.index("## Plots") < report.index("## Claims")  # card, plots, sections


def test_results_match_a_claims_configuration_whatever_their_seed_and_versions():
    r = trial("torch", "graph", repeat=7, seed=7)
    (claim,) = parse_claims(BUILD)
    assert judged.configuration(r.run_spec) == judged.configuration(claim.comparisons[0].b[0])
    other = respec(r, max_steps=STEPS + 1)
    assert judged.configuration(other.run_spec) != judged.configuration(claim.comparisons[0].b[0])


def test_no_run_judges_what_the_store_holds_whichever_version_stored_it_and_writes_nothing(tmp_path):
    from bakeoff.results.store import Store
    from bakeoff.run.claims import check

    path = tmp_path / "store.sqlite"
    with Store(path) as store:  # fake_results' trials carry another bakeoff version's content keys
        for r in runs("tensorflow", "graph", [3.6, 3.5, 3.7]) + runs("torch", "graph", [1.0, 1.02, 0.98]):
            store.put(r, "somewhere")
        store.put_deployment(deployment_row("litert", "tensorflow"))
    before = path.stat().st_mtime_ns
    build, tflite = check(parse_claims(BUILD + TFLITE), path, run=False)
    assert build.verdict == "supported" and build.findings[0].n == (3, 3) and path.stat().st_mtime_ns == before
    assert tflite.verdict == "supported"  # what bakeoff deploy stored
    build, tflite = check(parse_claims(BUILD + TFLITE), tmp_path / "none.sqlite", run=False)
    assert build.verdict == tflite.verdict == "unsettled" and not (tmp_path / "none.sqlite").exists()


# --- end to end --------------------------------------------------------------------------------------------------

CHEAP = """
[[claim]]
name = "bigger_batches_take_longer"
said = "a batch of 64 takes at least 1.5x as long a step as a batch of 16"
quantity = "steady_step_s"
at_least = 1.5
a = {batch_size = 64}
b = {batch_size = 16}
[claim.trials]
workload = "mnist"
framework = "torch"
execution = "eager"
max_steps = 40
eval_every = 40
"""


def test_a_real_claim_runs_end_to_end_then_is_judged_again_from_the_store(tmp_path, capsys):
    """Six real trials (PyTorch eager, MNIST tiny, 40 steps, 3 runs a side): about 45 s on 2 cores. The verdict
    itself depends on this machine's timings, so the test checks its evidence, not which way it went."""
    pytest.importorskip("torch")
    mine, store = tmp_path / "cheap.toml", tmp_path / "store.sqlite"
    mine.write_text(CHEAP)
    assert main(["claims", "--file", str(mine), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "6 run of 6" in out and re.search(r"verdicts: 1 (supported|refuted|unsettled)\n", out), out
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*), MIN(status), MAX(status) FROM trials").fetchone() == (6, "ok", "ok")
    assert main(["claims", "--file", str(mine), "--store", str(store), "--no-run", "--format", "json"]) == 0
    (claim,) = json.loads(capsys.readouterr().out)["claims"]
    (f,) = claim["findings"]
    assert claim["name"] == "bigger_batches_take_longer" and claim["threshold"] == "≥ 1.5x"
    assert (f["a_label"], f["b_label"]) == ("torch/eager/batch_size=64", "torch/eager/batch_size=16")
    assert f["n"] == [3, 3] and f["verdict"] in ("supported", "refuted", "unsettled") and f["why"]
    assert 0 < f["low"] <= f["ratio"] <= f["high"] and f["a"] > 0 and f["b"] > 0
    # Asked again (not --no-run), nothing runs: every trial is reused from the store by its key
    assert main(["claims", "--file", str(mine), "--store", str(store), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["claims"][0]["findings"][0] == f
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone() == (6,)


def test_the_shipped_file_is_package_data():
    assert Path(judged.__file__).parent.parent.joinpath("plan", "claims.toml").is_file()


def test_an_unsettled_claim_says_how_many_runs_would_settle_it():
    from scipy.stats import t as student_t

    wide = verdict_of(BUILD, runs("tensorflow", "graph", [2.0, 4.5, 3.2]) + runs("torch", "graph", [1.0, 1.0, 1.0]))
    assert "; more than 100 runs a side would be needed to settle it, if the 3.20x measured" in wide.findings[0].why
    tf, torch = [3.3, 4.1, 3.7], [1.0, 1.06, 0.95]
    v = verdict_of(BUILD, runs("tensorflow", "graph", tf) + runs("torch", "graph", torch))
    f = v.findings[0]
    assert v.verdict == "unsettled" and f.low < 3.0 < f.high
    said = re.search(r"; about (\d+) runs a side would settle it, if the 3.70x measured is the true ratio", f.why)
    assert said, f.why
    m = int(said.group(1))
    # Simulated independently: at the runs' own spread and a true 3.7x, m runs a side clear 3x about 4 times in 5
    rng, k = np.random.default_rng(0), 20_000
    sa, sb = np.log(tf).std(ddof=1), np.log(torch).std(ddof=1)
    a, b = rng.normal(np.log(3.7), sa, (k, m)), rng.normal(0.0, sb, (k, m))
    va, vb = a.var(axis=1, ddof=1) / m, b.var(axis=1, ddof=1) / m
    df = (va + vb) ** 2 / (va**2 / (m - 1) + vb**2 / (m - 1))
    low = a.mean(axis=1) - b.mean(axis=1) - student_t.ppf(0.975, df) * np.sqrt(va + vb)
    assert 3 < m <= 30 and 0.72 <= float(np.mean(low > np.log(3.0))) <= 0.90
