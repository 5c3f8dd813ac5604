"""bench/reference_efficiency.py: its pure-Python helpers (ABBA order, the table's medians and ratios, the refusal
of models that differ), and that each reference model is bakeoff's configuration (parameter count, output shape).

The reference libraries are the ``bench`` extra, which CI does not install: building each reference and checking it
is bakeoff's configuration is the bench's own ``--check`` (``make bench`` runs it), tested here with a fake child.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import reference_efficiency as bench  # noqa: E402


def test_abba_order_alternates_which_side_goes_first():
    assert bench.abba_order(4) == [("bakeoff", "reference"), ("reference", "bakeoff")] * 2
    firsts = [order[0] for order in bench.abba_order(6)]
    assert firsts.count("bakeoff") == firsts.count("reference") == 3
    assert all(sorted(order) == ["bakeoff", "reference"] for order in bench.abba_order(5))


def test_row_ratio_is_of_the_medians_and_its_spread_pairs_rounds():
    row = bench.Row(bakeoff=[90.0, 120.0, 100.0], reference=[100.0, 100.0, 125.0], bakeoff_params=1000,
                    reference_params=1000)
    assert row.ratio == pytest.approx(100.0 / 100.0)
    assert row.ratio_spread == pytest.approx((0.8, 1.2))  # 100/125 and 120/100: each round against its own
    line = bench.format_row("torch", "eager", "tiny", row)
    assert "1.00x (0.80–1.20)" in line and "100.0 (90.0–120.0)" in line and "1,000" in line


def test_models_that_differ_beyond_the_tolerance_are_not_compared():
    assert bench.comparable(100_000, 100_100) and not bench.comparable(100_000, 100_101)
    row = bench.Row([1.0], [1.0], bakeoff_params=331_201, reference_params=331_201 + 4_160)  # BERT's pooler
    assert row.ratio is None
    assert "not comparable" in bench.format_row("torch", "eager", "tiny", row)


def test_time_steps_warms_up_untimed_then_times_each_step_cycling_the_batches():
    calls = []
    times = bench.time_steps(lambda b: calls.append(b["i"]) or 0.0, [{"i": i} for i in range(4)], 3, 5)
    assert len(times) == 5 and all(t >= 0 for t in times)
    assert calls == [0, 1, 2, 3, 0, 1, 2, 3]


def test_run_prints_the_table_and_says_when_a_reference_is_not_installed(monkeypatch, capsys):
    def fake_child(script, side, framework, execution, preset):  # noqa: ANN001, ANN202
        if framework == "tensorflow" and side == "reference":
            return {"missing": "keras_hub"}
        return {"examples_per_s": 100.0 if side == "bakeoff" else 80.0, "params": 1234, "steps": 3}

    monkeypatch.setattr(bench, "in_child", fake_child)
    bench.run(["tiny"], 2, ["torch", "tensorflow"])
    out = capsys.readouterr().out
    assert "torch      eager         tiny" in out and "1.25x (1.25–1.25)" in out
    assert "tensorflow tf.function   tiny  not measured: install bakeoff[bench] (keras_hub is missing" in out
    assert "--no-deps keras-hub" in out
    assert "ratio" in out and "load average" in out


def test_flags_are_checked():
    with pytest.raises(SystemExit):
        bench.main(["--presets", "huge"])
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])


def test_check_says_which_reference_is_not_bakeoffs_configuration(monkeypatch, capsys):
    # The real builds are `bench/reference_efficiency.py --check` (make bench): the bench extra is not in CI.
    results = {("torch", "tiny"): {"params": 331_201, "expected": 331_201, "shape": [4, 1], "out_units": 1,
                                   "loss": 0.69},
               ("tensorflow", "tiny"): {"missing": "keras_hub"},
               ("jax", "tiny"): {"params": 335_425, "expected": 331_201, "shape": [4, 2], "out_units": 1,
                                 "loss": 7.0}}
    monkeypatch.setattr(bench, "in_child", lambda script, kind, framework, preset: results[framework, preset])
    assert bench.check(["tiny"], ["torch", "tensorflow"]) == 0  # a missing library is said, not a failure
    assert bench.check(["tiny"], ["jax"]) == 1
    out = capsys.readouterr().out
    assert "reference torch      tiny  bakeoff's configuration: 331,201 parameters" in out
    assert "tensorflow tiny  not measured: install bakeoff[bench] (keras_hub is missing)" in out
    assert ("jax        tiny  335,425 parameters, bakeoff's 331,201; outputs of shape [4, 2] for 4 examples, "
            "not [4, 1]; first loss 7, not near ln 2") in out


def test_check_problems_accepts_bakeoffs_configuration_only():
    good = {"params": 10, "expected": 10, "shape": [4, 1], "out_units": 1, "loss": 0.7}
    assert bench.check_problems(good) == []
    assert bench.check_problems({**good, "params": 11}) == ["11 parameters, bakeoff's 10"]
    assert bench.check_problems({**good, "loss": float("nan")}) == ["first loss nan, not near ln 2"]
