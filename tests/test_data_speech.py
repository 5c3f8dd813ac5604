"""Speech data: the eSpeak NG corpus is deterministic and split by speaker; features and manifests behave."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.data import DataError
from bakeoff.data import speech_synth as synth
from bakeoff.data.ctc import ALPHABET, frame_count
from bakeoff.data.speech import (
    N_MELS,
    embedded_corpus,
    load_speech_dataset,
    log_mel,
    mel_filterbank,
    read_manifest,
)
from bakeoff.workloads.speech_ctc.workload import SpeechCTCWorkload, greedy_decode

soundfile = pytest.importorskip("soundfile")
SMALL = synth.CorpusSpec(per_variant=3, test_variants=2, variants=("default", "f3", "m2", "klatt", "Annie"))


@pytest.fixture(scope="module")
def small_corpus() -> list[synth.Utterance]:
    pytest.importorskip("espeakng_loader")
    return synth.synthesise(SMALL, workers=2)


def test_generation_is_deterministic_and_independent_of_workers(small_corpus):
    again = synth.synthesise(SMALL, workers=1)
    assert [u.text for u in again] == [u.text for u in small_corpus]
    assert all(np.array_equal(a.audio, b.audio) for a, b in zip(again, small_corpus, strict=True))
    assert len(small_corpus) == 15 and len({u.accent for u in small_corpus}) > 1
    assert all(set(u.text) <= set(ALPHABET.chars) for u in small_corpus)
    assert all(len(u.audio) > synth.SAMPLE_RATE // 4 for u in small_corpus)  # a quarter second at least


def test_embedded_corpus_is_split_by_speaker_and_cached(small_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_SPEECH_CACHE", str(tmp_path))
    monkeypatch.setattr(synth, "synthesise", lambda spec: small_corpus)  # generated above, in fresh processes
    data = embedded_corpus(SMALL)
    assert set(data.test.speakers) == set(SMALL.test_set()) and len(SMALL.test_set()) == 2
    assert not set(data.train.speakers) & set(data.test.speakers)
    assert (len(data.train.texts), len(data.test.texts)) == (9, 6)
    assert data.train.features[0].shape[1] == N_MELS
    monkeypatch.setattr(synth, "synthesise", None)  # a second load must read the cache, not synthesise
    cached = embedded_corpus(SMALL)
    assert all(np.array_equal(a, b) for a, b in zip(cached.train.features, data.train.features, strict=True))


def test_log_mel_finds_a_tone_in_the_right_filter():
    rate = 16000
    t = np.arange(rate) / rate
    feats = log_mel(np.sin(2 * np.pi * 1000 * t).astype(np.float32), rate)
    assert feats.shape == (frame_count(rate, rate), N_MELS) == (98, N_MELS)
    bank = mel_filterbank(rate, 512)
    assert bank.shape == (257, N_MELS) and np.all(bank.max(0) > 0.5) and bank.max() <= 1.0
    assert np.abs(feats.mean(0)).max() < 1e-4  # per-utterance normalisation: every filter centred
    loudest = int(np.argmax(np.log(np.abs(np.fft.rfft(np.sin(2 * np.pi * 1000 * t[:400]), 512)) ** 2 + 1e-6)
                            @ bank))
    centre_hz = np.argmax(bank[:, loudest]) * rate / 512
    assert abs(centre_hz - 1000) < 100  # the 1 kHz tone lands in the filter centred near 1 kHz


def test_alphabet_and_greedy_ctc_decoding():
    assert len(ALPHABET) == 29 and ALPHABET.decode(ALPHABET.encode("don't stop")) == "don't stop"
    assert ALPHABET.normalise("  Turn  ON\tthe light ") == "turn on the light"
    a, b = ALPHABET.encode("ab")
    path = [a, a, 0, a, b, b, 0, 0]  # a a _ a b b _ _ -> "aab"; the last two frames are padding
    log_probs = np.log(np.full((1, 8, 29), 1e-3))
    log_probs[0, np.arange(8), path] = 0.0
    assert greedy_decode(log_probs, np.array([6])) == [[a, a, b]]


def _wav(path, seconds=1.0, rate=16000, channels=1):
    rng = np.random.default_rng(0)
    soundfile.write(str(path), rng.normal(0, 0.1, (int(seconds * rate), channels)).astype(np.float32), rate)
    return path.name


@pytest.mark.parametrize("row, message", [
    ("missing.wav,hello", "audio file .*missing.wav' not found"),
    ("good.wav,", "empty transcript"),
    ("good.wav,turn 2 left!", r"character\(s\) '2!' outside the alphabet"),
    ("fast.wav,hello", "is 44100 Hz, expected 16000 Hz"),
    ("stereo.wav,hello", "has 2 channels; expected mono"),
    ("broken.wav,hello", "cannot read audio file"),
    ("short.wav,a very long transcript for a short file", "too short for its 39-character transcript"),
])
def test_manifest_errors_name_file_and_line(tmp_path, row, message):
    _wav(tmp_path / "good.wav")
    _wav(tmp_path / "fast.wav", rate=44100)
    _wav(tmp_path / "stereo.wav", channels=2)
    _wav(tmp_path / "short.wav", seconds=0.3)
    (tmp_path / "broken.wav").write_bytes(b"RIFF not really")
    manifest = tmp_path / "train.csv"
    manifest.write_text(f"audio,text\ngood.wav,Hello World\n{row}\n")
    with pytest.raises(DataError, match=f"train.csv, line 3: .*{message}"):
        read_manifest(manifest, 16000)


def test_bad_rows_are_left_out_on_request_and_the_source_says_which(tmp_path):
    _wav(tmp_path / "good.wav")
    _wav(tmp_path / "fast.wav", rate=44100)
    rows = "audio,text\ngood.wav,go left\nfast.wav,hello\nmissing.wav,stop\ngood.wav,turn right\n"
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "test.csv").write_text("audio,text\ngood.wav,stop\n")
    options = {"train": str(tmp_path / "train.csv"), "test": str(tmp_path / "test.csv")}
    # Without the option: the first bad row, naming the option; a rate mismatch says how to set the rate.
    with pytest.raises(DataError, match=r"line 3: .*is 44100 Hz, expected 16000 Hz.*give --data sample_rate=44100"
                                        r" \(or --data skip_bad_rows=true to leave such rows out\)"):
        load_speech_dataset(options)
    data = load_speech_dataset({**options, "skip_bad_rows": "true"})
    assert data.train.texts == ["go left", "turn right"] and [line for line, _ in data.train.skipped] == [3, 4]
    assert data.source.endswith(f"; 2 bad rows of {tmp_path / 'train.csv'} left out (skip_bad_rows; lines 3, 4)")
    (tmp_path / "none.csv").write_text("audio,text\nfast.wav,hello\n")
    with pytest.raises(DataError, match=r"none.csv: no usable rows \(1 bad, left out; the first: .*44100 Hz"):
        load_speech_dataset({**options, "train": str(tmp_path / "none.csv"), "skip_bad_rows": "yes"})
    with pytest.raises(DataError, match="skip_bad_rows must be true or false, got 'maybe'"):
        load_speech_dataset({**options, "skip_bad_rows": "maybe"})


def test_manifests_load_normalised_and_options_are_checked(tmp_path):
    _wav(tmp_path / "a.wav")
    (tmp_path / "train.jsonl").write_text('{"audio": "a.wav", "text": "Go  LEFT", "speaker": "s1"}\n')
    (tmp_path / "test.csv").write_text("audio,text\na.wav,stop\n")
    data = load_speech_dataset({"train": str(tmp_path / "train.jsonl"), "test": str(tmp_path / "test.csv")})
    assert data.train.texts == ["go left"] and data.train.speakers == ["s1"] and data.test.texts == ["stop"]
    with pytest.raises(DataError, match="needs 'test' too"):
        load_speech_dataset({"train": str(tmp_path / "train.jsonl")})
    with pytest.raises(DataError, match="unknown speech data option.*'trian'"):
        load_speech_dataset({"trian": "x.csv"})
    (tmp_path / "bad.csv").write_text("path,text\na.wav,stop\n")
    with pytest.raises(DataError, match=r"bad.csv, line 1 \(header\): no column\(s\) 'audio'"):
        read_manifest(tmp_path / "bad.csv", 16000)


def test_shipped_real_recordings_serve_as_the_test_split(small_corpus, tmp_path, monkeypatch):
    import bakeoff.data.speech as speech

    cards = read_manifest(speech.SHIPPED_TESTS["cards"], 16000)  # real WAV files, read like a user's
    assert cards.texts[0] == "ten of clubs" and cards.texts[3] == "five five" and len(cards.texts) == 5
    assert all(len(f) > 100 and np.isfinite(f).all() for f in cards.features)  # over a second each
    monkeypatch.setenv("BAKEOFF_SPEECH_CACHE", str(tmp_path))
    monkeypatch.setattr(synth, "synthesise", lambda spec: small_corpus)
    monkeypatch.setattr(speech, "embedded_corpus", lambda: embedded_corpus(SMALL))
    data = load_speech_dataset({"test": "cards", "batching": "bucket"})
    assert len(data.train.texts) == 9 and data.test.texts == cards.texts  # embedded train, real test
    assert "cards (5 recordings)" in data.source
    with pytest.raises(DataError, match=r"'sample_rate' need 'train' and 'test'"):
        load_speech_dataset({"test": "cards", "sample_rate": "8000"})


def _split(n=40, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 100, n).astype(np.int32)
    return {"features": rng.normal(size=(n, 100, N_MELS)).astype(np.float32), "feature_lengths": lengths,
            "labels": np.ones((n, 10), np.int32), "label_lengths": rng.integers(1, 11, n).astype(np.int32)}


def test_batches_pad_to_the_batch_and_bucket_deterministically():
    split, wl = _split(), SpeechCTCWorkload()
    pad = list(wl.batches(split, 8, seed=1, epoch=0))
    assert all(b["features"].shape[1] == b["feature_lengths"].max() for b in pad)
    assert all(b["labels"].shape[1] == 10 for b in pad)  # labels keep the split's width: one shape fewer to vary
    wl.batching = "bucket"
    bucket = list(wl.batches(split, 8, seed=1, epoch=0))
    again = list(wl.batches(split, 8, seed=1, epoch=0))
    assert all(np.array_equal(a["features"], b["features"]) for a, b in zip(bucket, again, strict=True))
    assert sorted(np.concatenate([b["feature_lengths"] for b in bucket])) == sorted(split["feature_lengths"])
    assert sum(b["features"].shape[1] for b in bucket) < sum(b["features"].shape[1] for b in pad)
    other_epoch = list(wl.batches(split, 8, seed=1, epoch=1))
    assert any(not np.array_equal(a["feature_lengths"], b["feature_lengths"])
               for a, b in zip(bucket, other_epoch, strict=True))
    wl.pad_multiple = 16
    assert all(b["features"].shape[1] % 16 == 0 or b["features"].shape[1] == 100
               for b in wl.batches(split, 8, seed=1, epoch=0))
