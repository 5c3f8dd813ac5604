"""bench/reference_efficiency.py: its pure-Python helpers (ABBA order, the table's medians and ratios, the refusal
of models that differ), and that each reference model is bakeoff's configuration (parameter count, output shape).

The reference libraries are the ``bench`` extra, which CI does not install: those tests skip without them. Each
reference is built in its own process, one framework per process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
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


REFERENCE_PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {bench!r})
    import numpy as np
    from _references import REFERENCES
    from bakeoff import registry
    from bakeoff.spec import RunSpec
    framework, preset = {framework!r}, {preset!r}
    spec = RunSpec(workload="text_classifier", framework=framework, preset=preset, max_steps=1, device="cpu")
    workload = registry.workload("text_classifier")
    data = workload.load_data(spec)
    config = workload.config(preset, spec, data)
    ref = REFERENCES[framework](config, workload.output_units(config), "eager", 2)
    batch = {{k: v[:4] for k, v in data.train.items()}}
    loss = ref.step(batch)
    expected = int(sum(w.size for w in workload.init_weights(config, 0).values()))  # bakeoff's canonical weights
    print(json.dumps({{"params": ref.num_params, "expected": expected, "shape": list(ref.logits(batch["tokens"]).shape),
                      "out_units": workload.output_units(config), "loss": loss}}))
""")


@pytest.mark.parametrize("framework,library", [("torch", "transformers"), ("tensorflow", "keras_hub"),
                                               ("jax", "flax")])
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_reference_is_bakeoffs_configuration(framework, library, preset):
    # importorskip without the import: keras_hub would load TensorFlow into the test process
    for module in (framework, library):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (the bench extra: pip install -e '.[bench]')")
    code = REFERENCE_PROBE.format(bench=str(BENCH), framework=framework, preset=preset)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["params"] == r["expected"]  # exactly: the tolerance is for references that cannot match
    assert bench.comparable(r["expected"], r["params"])
    assert r["shape"] == [4, r["out_units"]]
    assert np.isfinite(r["loss"]) and 0.3 < r["loss"] < 1.5  # sigmoid cross-entropy near ln 2 at the start
