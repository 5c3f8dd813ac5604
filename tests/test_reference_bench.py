"""bench/reference_efficiency.py: its pure-Python helpers (ABBA order, the table's medians and ratios, the refusal
of models that differ), and that each reference model is bakeoff's configuration (parameter count, output shape).

The reference libraries are the ``bench`` extra, which CI does not install: building each reference and checking it
is bakeoff's configuration is the bench's own ``--check`` (``make bench`` runs it), tested here with a fake child.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import reference_efficiency as bench  # noqa: E402


def test_abba_order_alternates_which_side_goes_first():
    assert bench.abba_order(4) == [("bakeoff", "reference"), ("reference", "bakeoff")] * 2
    firsts = [order[0] for order in bench.abba_order(6)]
    assert firsts.count("bakeoff") == firsts.count("reference") == 3
    assert all(sorted(order) == ["bakeoff", "reference"] for order in bench.abba_order(5))


def test_row_ratio_is_the_rounds_geometric_mean_and_its_interval_keeps_pairs_together():
    # Two rounds of paired step times (seconds): bakeoff's steps are 0.9 of the reference's, whatever the round's
    # speed (the second round ran twice as slow on both sides): the pairing leaves only that ratio.
    rounds = [([0.9, 0.99, 0.81], [1.0, 1.1, 0.9]), ([1.8, 1.98, 1.62], [2.0, 2.2, 1.8])]
    row = bench.Row(rounds, bakeoff_params=1000, reference_params=1000)
    assert row.ratio == pytest.approx(1 / 0.9)
    lo, hi = row.interval
    assert lo <= row.ratio <= hi and hi / lo < 1.5
    assert row.examples_per_s("bakeoff") == pytest.approx(32 / statistics.median([0.9, 0.99, 0.81, 1.8, 1.98, 1.62]))
    assert row.verdict == "par"
    line = bench.format_row("torch", "eager", "tiny", "same", row)
    assert "1.111x (" in line and "par" in line and "1,000" in line
    assert "lacks the FFN dropout" in bench.format_row("torch", "eager", "tiny", "preset", row)
    assert "lacks" not in bench.format_row("jax", "jax.jit", "tiny", "preset", row)


def test_interval_is_exact_for_a_constant_ratio_and_widens_with_noise():
    steady = [([1.0] * 8, [1.02] * 8)] * 3
    assert bench.ratio_interval(steady) == pytest.approx((1.02, 1.02))
    rng = np.random.default_rng(1)
    noisy = [(list(1 + 0.2 * rng.random(8)), list(1 + 0.2 * rng.random(8))) for _ in range(3)]
    lo, hi = bench.ratio_interval(noisy)
    assert lo < bench.mean_ratio(noisy) < hi and hi - lo > 0.02


def test_a_round_slower_on_both_sides_does_not_move_the_ratio():
    # Round 2 ran 1.5x slower on both sides: pooling the medians over rounds would give 1.5 / 0.95; the rounds'
    # own ratios (1.05 and 0.95) give their geometric mean.
    rounds = [([1.0] * 4, [1.05] * 4), ([1.5] * 4, [1.425] * 4)]
    assert bench.mean_ratio(rounds) == pytest.approx((1.05 * 0.95) ** 0.5)
    assert bench.ratio_interval(rounds)[0] == pytest.approx(0.95)


def test_verdict_says_gap_only_when_the_whole_interval_is_below_par():
    slow = bench.Row([([1.1] * 6, [1.0] * 6)] * 2, 10, 10)  # 0.909x, no noise
    assert slow.verdict == "gap"
    even = bench.Row([([1.0] * 6, [1.0] * 6)] * 2, 10, 10)  # 1.0x: the interval does not reach above 1.0
    assert even.verdict == "unsure"
    mixed = bench.Row([([1.0, 1.2, 0.9, 1.1], [1.0, 1.0, 1.0, 1.0])] * 2, 10, 10)
    assert mixed.verdict in {"unsure", "par"} and mixed.interval[0] < 0.97


def test_models_that_differ_beyond_the_tolerance_are_not_compared():
    assert bench.comparable(100_000, 100_100) and not bench.comparable(100_000, 100_101)
    row = bench.Row([([1.0], [1.0])], bakeoff_params=331_201, reference_params=331_201 + 4_160)  # BERT's pooler
    assert row.ratio is None
    assert "not comparable" in bench.format_row("torch", "eager", "tiny", "same", row)
    assert "ratio" not in row.record()


def test_time_pairs_warms_each_side_up_then_alternates_them_on_the_same_batches():
    calls = []
    steps = {side: (lambda b, side=side: calls.append((side, b["i"])) or 0.0) for side in ("bakeoff", "reference")}
    times = bench.time_pairs(steps, ("reference", "bakeoff"), [{"i": i} for i in range(4)], 2, 3)
    assert {len(t) for t in times.values()} == {3}
    assert calls[:4] == [("reference", 0), ("reference", 1), ("bakeoff", 0), ("bakeoff", 1)]
    assert calls[4:] == [("reference", 2), ("bakeoff", 2), ("bakeoff", 3), ("reference", 3),
                         ("reference", 0), ("bakeoff", 0)]


def test_run_prints_the_table_keeps_it_and_says_when_a_reference_is_not_installed(monkeypatch, capsys, tmp_path):
    seen = []

    def fake_child(script, framework, execution, preset, variant, first):  # noqa: ANN001, ANN202
        seen.append((framework, variant, first))
        if framework == "tensorflow":
            return {"missing": "keras_hub"}
        return {"times": {"bakeoff": [0.8, 0.8, 0.8], "reference": [1.0, 1.0, 1.0]},
                "params": {"bakeoff": 1234, "reference": 1234}, "threads": 2}

    monkeypatch.setattr(bench, "in_child", fake_child)
    store = tmp_path / "store.sqlite"
    bench.run(["tiny"], ["same", "preset"], 2, ["torch", "tensorflow"], store)
    out = capsys.readouterr().out
    assert "torch      eager           tiny  same" in out and "1.250x (1.250–1.250)" in out and "par" in out
    assert "tensorflow tf.function     tiny  same   not measured: install bakeoff[bench] (keras_hub is missing" in out
    assert "--no-deps keras-hub" in out
    assert "ratio" in out and "load average" in out and "kept 4 rows" in out
    assert ("torch", "same", "bakeoff") in seen and ("torch", "same", "reference") in seen
    # tf.function and tf.function+XLA, each asked once per variant: a missing library is not asked again
    assert [s for s in seen if s[0] == "tensorflow"] == [("tensorflow", "same", "bakeoff")] * 2 + [
        ("tensorflow", "preset", "bakeoff")] * 2

    from bakeoff.results import efficiency
    from bakeoff.results.store import Store

    with Store(store) as kept:
        records = efficiency.this_machine(kept)
    assert len(records) == 4  # torch eager and torch.compile, two variants each
    described = [efficiency.describe(r) for r in records]
    assert any("PyTorch" in d and "torch.compile tiny (same architecture, dropout 0)" in d and "1.25x" in d
               and "2 rounds of 3 step pairs), par" in d for d in described), described
    assert {r["fingerprint"]["threads"] for r in records} == {2}  # as the children were given them
    first = next(r for r in records if r["fingerprint"]["mode"] == "eager")
    assert first["result"]["rounds"][0] == [[0.8, 0.8, 0.8], [1.0, 1.0, 1.0]]  # every raw step kept


def test_flags_are_checked():
    with pytest.raises(SystemExit):
        bench.main(["--presets", "huge"])
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--variants", "dropout"])


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
