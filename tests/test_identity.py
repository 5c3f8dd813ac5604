"""Trials are keyed by content: the data a trial trained on, its resolved configuration, bakeoff's and the
framework's versions — not by the path a file was reached through."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.core.identity import digest, identify
from bakeoff.core.spec import RunSpec


def _csv(path: Path, flip: bool = False) -> Path:
    rows = ["body,stars"] + [f"{'great tasty lovely' if (i % 2) != flip else 'stale awful bland'} snack {i},{i % 2}"
                             for i in range(120)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def _spec(train: str) -> RunSpec:
    return RunSpec(workload="text_classifier", framework="torch", max_steps=2,
                   data={"train": train, "text_column": "body", "label_column": "stars"})


def test_the_key_follows_the_file_content_not_its_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "data" / "train.csv")
    (tmp_path / "ux").mkdir()
    via_relative, via_absolute, via_detour = identify([_spec("data/train.csv"), _spec(str(tmp_path / "data/train.csv")),
                                                       _spec("ux/../data/train.csv")])
    assert dict(via_relative.content)["data:train"] == digest(tmp_path / "data" / "train.csv")
    assert via_relative.key() == via_absolute.key() == via_detour.key()
    assert via_relative.key() != _spec("data/train.csv").key()  # the content is part of the key
    _csv(tmp_path / "data" / "train.csv", flip=True)  # the same path, other labels
    (edited,) = identify([_spec("data/train.csv")])
    assert edited.key() != via_relative.key()
    assert dict(edited.content)["data:train"] != dict(via_relative.content)["data:train"]


def test_configuration_and_versions_are_part_of_the_content():
    (spec,) = identify([RunSpec(workload="mnist", framework="tensorflow", max_steps=1)])
    content = dict(spec.content)
    assert set(content) == {"config", "bakeoff", "tensorflow"}  # no data file named: the shipped data
    assert content["bakeoff"].startswith("0.1.0+")
    (bigger,) = identify([RunSpec(workload="mnist", framework="tensorflow", max_steps=1, preset="paper")])
    assert dict(bigger.content)["config"] != content["config"]
    assert "data:test" not in dict(identify([RunSpec(workload="speech_ctc", framework="torch", max_steps=1,
                                                     data={"test": "cards"})])[0].content)  # a name, not a file


def test_a_folder_hashes_its_files_names_and_contents(tmp_path):
    (tmp_path / "a.idx").write_bytes(b"1234")
    before = digest(tmp_path)
    (tmp_path / "b.idx").write_bytes(b"")
    assert digest(tmp_path) != before
    (tmp_path / "b.idx").unlink()
    assert digest(tmp_path) == before


@pytest.mark.slow
@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_editing_the_data_file_trains_anew_and_another_path_to_it_does_not(tmp_path):
    _csv(tmp_path / "data" / "train.csv")
    (tmp_path / "ux").mkdir()

    def run(train: str) -> str:
        command = [sys.executable, "-m", "bakeoff.cli", "run", "--workload", "text_classifier", "--framework",
                   "torch", "--execution", "eager", "--max-steps", "2", "--eval-every", "2", "--no-report",
                   "--data", f"train={train}", "--data", "text_column=body", "--data", "label_column=stars"]
        out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    assert "ran 1 trials, skipped 0" in run("data/train.csv")
    assert "ran 0 trials, skipped 1" in run("ux/../data/train.csv")  # the same file through another path
    _csv(tmp_path / "data" / "train.csv", flip=True)
    assert "ran 1 trials, skipped 0" in run("data/train.csv")  # edited labels: not the stored result
    rows = sqlite3.connect(tmp_path / "results" / "bakeoff.sqlite").execute("SELECT COUNT(*) FROM trials")
    assert rows.fetchone() == (2,)


def test_a_speech_manifest_counts_by_the_audio_it_lists_too(tmp_path):
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "a.wav").write_bytes(b"RIFF-first-take")
    (tmp_path / "train.csv").write_text("audio,text\nclips/a.wav,go left\n")
    spec = RunSpec(workload="speech_ctc", framework="torch", max_steps=1,
                   data={"train": str(tmp_path / "train.csv"), "test": str(tmp_path / "train.csv")})
    (before,) = identify([spec])
    (tmp_path / "clips" / "a.wav").write_bytes(b"RIFF-second-take")  # same manifest, re-recorded audio
    (after,) = identify([spec])
    assert dict(before.content)["data:train"] != dict(after.content)["data:train"]
    assert before.key() != after.key()
