"""Your model, your target: `--set` overrides of preset fields (typed, checked) and targets (set, derived, measured),
for every workload, without a framework."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.core.workload import Target


def spec(workload: str, **fields) -> RunSpec:
    return RunSpec(workload=workload, framework="torch", max_steps=1, **fields)


def resolved(workload: str, preset: str = "tiny", **config: str) -> dict:
    return registry.workload(workload).config(preset, spec(workload, preset=preset, config=config))


# --- --set KEY=VALUE ------------------------------------------------------------------------------------------


def test_an_override_changes_the_config_and_the_parameter_count():
    wl = registry.workload("text_classifier")
    base, wider = resolved("text_classifier"), resolved("text_classifier", d_model="128", num_layers="3")
    assert (wider["d_model"], wider["num_layers"]) == (128, 3) and isinstance(wider["d_model"], int)
    assert {k: v for k, v in wider.items() if k not in ("d_model", "num_layers")} == \
        {k: v for k, v in base.items() if k not in ("d_model", "num_layers")}  # nothing else moved
    assert wl.num_params(base) == 331201
    # embeddings (4000 + 128 positions) · 128; per block 4·(128² + 128) + 4·128 + 128·128 + 128 + 128·128 + 128;
    # head 128 + 1
    block = 4 * (128 * 128 + 128) + 4 * 128 + (128 * 128 + 128) + (128 * 128 + 128)
    assert wl.num_params(wider) == (4000 + 128) * 128 + 3 * block + 129


@pytest.mark.parametrize(("workload", "config", "field", "value"), [
    ("text_classifier", {"seq_len": "256", "dropout": "0.25", "learning_rate": "3e-4"}, "seq_len", 256),
    ("speech_ctc", {"d_model": "128", "num_heads": "8"}, "num_heads", 8),
    ("autoencoder", {"latent_dim": "8", "num_train": "512"}, "num_train", 512),
    ("mnist", {"filters": "16,32"}, "filters", [16, 32]),
    ("mnist", {"filters": "[16, 32]"}, "filters", [16, 32]),  # how a TOML list reaches the spec
    ("mnist", {"dropout": "0"}, "dropout", 0.0),
])
def test_overrides_are_typed_like_the_presets_own_values(workload, config, field, value):
    cfg = resolved(workload, **config)
    assert cfg[field] == value and type(cfg[field]) is type(value)


def test_an_unknown_key_is_refused_naming_the_accepted_keys_and_types():
    with pytest.raises(SpecError) as info:
        resolved("text_classifier", dmodel="128")
    assert str(info.value) == (
        "unknown config key(s) 'dmodel' for text_classifier; accepted: vocab_size (integer), seq_len (integer), "
        "d_model (integer), num_heads (integer), d_ff (integer), num_layers (integer), dropout (number), "
        "learning_rate (number)")
    with pytest.raises(SpecError, match="for mnist; accepted: filters \\(list of integers\\), kernel_size"):
        resolved("mnist", d_model="128")  # a field of another workload
    with pytest.raises(SpecError, match="'num_classes' for text_classifier"):
        resolved("text_classifier", num_classes="3")  # derived from the data, not a preset field


@pytest.mark.parametrize(("workload", "config", "message"), [
    ("text_classifier", {"d_model": "wide"}, "config d_model='wide' for text_classifier: d_model is an integer, "
                                             "like the preset's 64"),
    ("text_classifier", {"d_model": "64.5"}, "d_model is an integer"),
    ("text_classifier", {"dropout": "lots"}, "dropout is a number, like the preset's 0.1"),
    ("text_classifier", {"learning_rate": "inf"}, "learning_rate is a number"),
    ("mnist", {"filters": "8,x"}, "config filters='8,x' for mnist: filters is a list of integers, like the preset's "
                                  "\\[8, 16\\]"),
    ("text_classifier", {"num_layers": "0"}, "config num_layers=0 for text_classifier: num_layers must be a positive "
                                             "integer"),
    ("text_classifier", {"dropout": "1"}, "dropout must be at least 0 and below 1"),
    ("text_classifier", {"learning_rate": "0"}, "learning_rate must be above 0"),
    ("mnist", {"filters": "8,0"}, "filters must be positive integers"),
    ("text_classifier", {"d_model": "66"}, "config d_model=66 for text_classifier: must be divisible by num_heads 4"),
    ("autoencoder", {"num_heads": "5"}, "config d_model=64 for autoencoder: must be divisible by num_heads 5"),
    ("speech_ctc", {"d_model": "98"}, "d_model=98 for speech_ctc: must be even .* and divisible by num_heads 4"),
    ("speech_ctc", {"d_model": "99", "num_heads": "9"}, "must be even"),
    ("text_classifier", {"vocab_size": "1"}, "vocab_size=1 for text_classifier: must be at least 2"),
    ("mnist", {"filters": "8,16,32"}, "config filters=\\[8, 16, 32\\] for mnist: give two convolutions' channels"),
    ("mnist", {"kernel_size": "11"}, "kernel_size=11 for mnist: leaves no feature map of a 28-pixel image"),
])
def test_bad_values_and_inconsistent_fields_are_refused(workload, config, message):
    with pytest.raises(SpecError, match=message):
        resolved(workload, **config)


def test_learning_rate_is_a_spec_field_or_an_override_not_two_different_ones():
    wl = registry.workload("mnist")
    assert wl.config("tiny", spec("mnist", learning_rate=0.01))["learning_rate"] == 0.01
    assert wl.config("tiny", spec("mnist", learning_rate=0.01, config={"learning_rate": "0.01"}))["learning_rate"] \
        == 0.01
    with pytest.raises(SpecError, match="learning_rate is given twice, 0.01 as a spec field and 0.1 in config"):
        wl.config("tiny", spec("mnist", learning_rate=0.01, config={"learning_rate": "0.1"}))


def test_the_data_follows_the_configured_sizes():
    wl = registry.workload("autoencoder")
    data = wl.load_data(spec("autoencoder", config={"d_model": "32", "seq_len": "8", "num_train": "64",
                                                    "num_test": "16"}))
    assert data.train["inputs"].shape == (64, 8, 32) and data.test["inputs"].shape == (16, 8, 32)
    text = registry.workload("text_classifier").load_data(spec("text_classifier", config={"seq_len": "16"}))
    assert text.train["tokens"].shape[1] == 16


# --- targets ------------------------------------------------------------------------------------------------


def test_the_preset_target_is_measured_and_says_so():
    wl = registry.workload("mnist")
    assert wl.target("tiny") == 0.93  # the call trial/loop.py makes today
    assert wl.target_and_rule("paper") == (0.96, "measured for preset paper on the shipped data")
    assert wl.target_and_rule("tiny", spec("mnist", config={"dropout": "0.2"}))[1].endswith(
        "the config overrides may move what is reachable")


def test_a_preset_target_nobody_measured_is_declared_by_the_workload():
    """text_classifier's small and paper targets are provisional, copied from tiny: declared, not measured, whatever
    the rule said before (every preset's target was called "measured for preset ... on the shipped data")."""
    wl = registry.workload("text_classifier")
    assert wl.measured_targets == ("tiny",)
    assert wl.resolve_target("paper") == Target(0.75, "declared", "declared by the workload for preset paper, "
                                                                  "not measured")
    assert wl.resolve_target("tiny").source == "measured"
    assert wl.resolve_target("tiny", spec("text_classifier", target=0.6)).source == "user"


def test_a_given_target_wins_over_every_other():
    wl = registry.workload("text_classifier")
    given = spec("text_classifier", target=0.61, data={"train": "x.csv"})
    assert wl.target_and_rule("tiny", given) == (0.61, "set by the user")


@pytest.mark.parametrize(("workload", "target", "message"), [
    ("mnist", 1.5, "target 1.5 is outside the range of mnist's accuracy \\(0 to 1\\)"),
    ("text_classifier", -0.1, "outside the range of text_classifier's accuracy"),
    ("autoencoder", -1.0, "target -1.0 is outside the range of autoencoder's mse \\(0 to inf\\)"),
])
def test_a_target_outside_the_metrics_range_is_refused(workload, target, message):
    with pytest.raises(SpecError, match=message):
        registry.workload(workload).config("tiny", spec(workload, target=target))


def test_user_text_data_gets_a_target_derived_from_its_majority_class(tmp_path: Path):
    # 3 classes; the test split's majority class holds 9 of 20 rows: 0.45, so half-way to 1 is 0.725.
    labels = ["a"] * 9 + ["b"] * 6 + ["c"] * 5
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"word{i} {lab},{lab}\n"
                                                                 for i, lab in enumerate(labels * 2)))
    (tmp_path / "test.csv").write_text("text,label\n" + "".join(f"word{i} {lab},{lab}\n"
                                                                for i, lab in enumerate(labels)))
    wl = registry.workload("text_classifier")
    user = spec("text_classifier", data={"train": str(tmp_path / "train.csv"), "test": str(tmp_path / "test.csv")})
    data = wl.load_data(user)
    assert data.info["majority_rate"] == pytest.approx(0.45)
    assert data.info["target"]["value"] == pytest.approx(0.725)
    assert "half-way from the test split's majority-class rate 0.450 to 1 = 0.725" in data.info["target"]["rule"]
    assert wl.target("tiny", user, data) == pytest.approx(0.725)  # never the shipped data's 0.75
    shipped = wl.load_data(spec("text_classifier"))
    assert "target" not in shipped.info and wl.target("tiny", spec("text_classifier"), shipped) == 0.75


def _write_idx(folder: Path, stem: str, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, ">i4").tobytes()
    (folder / f"{stem}.gz").write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0))


def test_user_mnist_files_get_a_derived_target(tmp_path: Path):
    rng = np.random.default_rng(0)
    _write_idx(tmp_path, "train-images-idx3-ubyte", rng.integers(0, 256, (20, 28, 28)))
    _write_idx(tmp_path, "train-labels-idx1-ubyte", np.arange(20) % 10)
    _write_idx(tmp_path, "t10k-images-idx3-ubyte", rng.integers(0, 256, (10, 28, 28)))
    _write_idx(tmp_path, "t10k-labels-idx1-ubyte", np.array([3] * 6 + [1, 2, 4, 5]))  # majority 0.6
    wl = registry.workload("mnist")
    user = spec("mnist", data={"dir": str(tmp_path)})
    data = wl.load_data(user)
    value, rule = wl.target_and_rule("tiny", user, data)
    assert value == pytest.approx(0.8) and "majority-class rate 0.600" in rule
    assert wl.resolve_target("tiny", user, data).source == "derived"
