"""Faults named for what they are (issue #50, item 5): a full disk is a full disk, not a damaged store; two runs on
one store never run one trial at once; a JSON-lines file with other keys is one error naming the keys it has; a
killed run leaves nothing in the temporary folder, a resumed one nothing in its logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fake_results
from bakeoff.core import registry
from bakeoff.core.spec import Status
from bakeoff.data import DataError
from bakeoff.data.text import load_text_dataset
from bakeoff.results.store import Store
from test_faults import MNIST_RUN, fill, small_disk


def bakeoff(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


# --- a JSON-lines file whose objects have other keys ---------------------------------------------------------------

def test_a_jsonl_file_with_other_keys_is_one_error_naming_the_keys_found(tmp_path):
    """Before: the same bad-row error for each of its 400 lines, then, with the suggested skip_bad_rows=true, 'no
    JSON objects' (there were 400)."""
    data = tmp_path / "reviews.jsonl"
    data.write_text("".join(json.dumps({"review": f"a review, number {i}", "stars": i % 5}) + "\n" for i in range(400)))
    run = ("run", "--workload", "text_classifier", "--framework", "torch", "--max-steps", "1", "--no-report",
           "--store", str(tmp_path / "r.sqlite"), "--data", f"train={data}")
    said = (f"{data}: the text key 'text' and the label key 'label' are in none of its 400 JSON objects; keys "
            "found: 'review' (in 400 of them), 'stars' (in 400 of them). Name the keys to read with --data "
            "text_column=KEY --data label_column=KEY")
    for skip in ((), ("--data", "skip_bad_rows=true")):
        done = bakeoff(*run, *skip, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert said in done.stderr and done.stderr.count(str(data)) == 1, done.stderr
        assert "line " not in done.stderr and "no JSON objects" not in done.stderr
    assert not (tmp_path / "r.sqlite").exists()
    with pytest.raises(DataError) as one_key:
        load_text_dataset({"train": str(data), "text_column": "review"})
    assert str(one_key.value) == (f"{data}: the label key 'label' is in none of its 400 JSON objects; keys found: "
                                  "'review' (in 400 of them), 'stars' (in 400 of them). Name the key to read with "
                                  "--data label_column=KEY")
    assert len(load_text_dataset({"train": str(data), "text_column": "review", "label_column": "stars"}).classes) == 5


def test_skip_bad_rows_that_leaves_no_row_says_every_row_was_bad(tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text("".join(json.dumps({"text": " ", "label": i % 2}) + "\n" for i in range(30)))
    with pytest.raises(DataError) as caught:
        load_text_dataset({"train": str(data), "skip_bad_rows": "true"})
    assert str(caught.value) == (f"{data}: no usable rows: all 30 are bad and skip_bad_rows left them all out "
                                 "(the first, line 1: empty text in column 'text')")


# --- a full disk ---------------------------------------------------------------------------------------------------

def test_a_full_disk_is_named_and_the_store_left_untouched(tmp_path):
    """Before: 'not a bakeoff results store (disk I/O error): a damaged or other file. Keep it aside and start a new
    store' — and after freeing space the store read fine. (SQLite reports its WAL index not growing as an I/O
    error.)"""
    with small_disk(tmp_path / "disk", "2m") as disk:
        store = disk / "r.sqlite"
        with Store(store) as s:
            s.put(fake_results.trial("torch", "eager"), "quick")
        fill(disk)
        before = sorted(p.name for p in disk.iterdir()), store.read_bytes()
        for command in (("report", "--out", str(tmp_path / "report")), MNIST_RUN):
            done = bakeoff(*command, "--store", str(store), cwd=tmp_path)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert (f"cannot open the store {store}: no space left on {disk} (0.0 MB free), free 5 MB or more there "
                    "and run the same command again (SQLite: disk I/O error). The store is untouched"
                    in done.stderr), done.stderr
            assert "damaged" not in done.stderr
            assert (sorted(p.name for p in disk.iterdir()), store.read_bytes()) == before  # not even a -wal left
        new = bakeoff(*MNIST_RUN, "--store", str(disk / "new.sqlite"), cwd=tmp_path)
        assert new.returncode == 2 and f"cannot open the store {disk / 'new.sqlite'}: no space left on {disk}" in \
            new.stderr and "No store was created" in new.stderr, new.stderr
        assert sorted(p.name for p in disk.iterdir()) == before[0]
        (disk / "filler").unlink()
        shown = bakeoff("show", "--store", str(store), cwd=tmp_path)
        assert shown.returncode == 0 and "1 trials (1 ok)" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_a_result_that_cannot_be_written_anywhere_leaves_no_part_file_and_the_resume_stores_it(tmp_path):
    """Before: a 0-byte ``unstored-*.part`` stayed in the logs after the resumed run succeeded. The store and its
    logs share one small disk, filled once the trial has started: neither can take the result."""
    with small_disk(tmp_path / "disk", "4m") as disk:
        store, logs = disk / "r.sqlite", disk / "r" / "logs"
        with (tmp_path / "out.txt").open("w") as sink:
            run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", *MNIST_RUN, "--store", str(store)],
                                   cwd=tmp_path, stdout=sink, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(logs.glob("*.log")) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        fill(disk)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 2, stderr
        printed, said = stderr.splitlines()  # the result (JSON), whose reason may quote the trial's traceback
        assert json.loads(printed)["spec"]["workload"] == "mnist"
        assert said.startswith(f"bakeoff run: error: could not store mnist/tiny torch/eager seed 0 in {store}: no "
                               f"space left on {disk} (0.0 MB free), free 5 MB or more there"), said
        assert "is printed above (JSON), as it could not be written either" in said
        assert [p.name for p in logs.iterdir() if p.name.startswith("unstored-")] == []  # no empty .part
        (disk / "filler").unlink()
        again = bakeoff(*MNIST_RUN, "--store", str(store), cwd=tmp_path)
        assert again.returncode == 0 and "ran 1 trials" in again.stdout, again.stdout + again.stderr
        assert [p.name for p in logs.iterdir() if p.name.startswith("unstored-")] == []
        with Store(store) as s:
            assert [r.status for r in s.results()] == [Status.OK]


# --- a killed run ----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_killing_bakeoff_run_leaves_no_trial_folder_in_the_temporary_folder(tmp_path):
    """Before: `kill -9` of `bakeoff run` (which the kernel's tether turns into the trial's death too) left its
    ``bakeoff-trial-*`` folder in the temporary folder for good."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
                            "--execution", "eager", "--max-steps", "100000", "--eval-every", "100000", "--store",
                            "r.sqlite", "--no-report"], cwd=tmp_path, env={**os.environ, "TMPDIR": str(temporary)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "r" / "logs").glob("*.log")) and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before its trial started"
            time.sleep(0.1)
        [folder] = temporary.glob("bakeoff-trial-*")
        assert (folder / "spec.json").is_file()  # the trial's own folder, in use
    finally:
        run.kill()
        run.wait()
    deadline = time.monotonic() + 15
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(temporary.iterdir()) == [], list(temporary.rglob("*"))[:5]
