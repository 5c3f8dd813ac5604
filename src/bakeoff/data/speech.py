"""Speech data for CTC: the embedded eSpeak NG corpus or the user's manifest of WAV/FLAC files, as log-mel arrays.

Everything here is numpy and the standard library (plus ``soundfile`` to read user audio), so every framework
trains on byte-identical features:

* :func:`log_mel` — 25 ms Hann frames every 10 ms, power spectrum, ``N_MELS`` triangular HTK-mel filters
  (0 Hz to min(8 kHz, Nyquist)), ``log(· + 1e-6)``, then per-utterance mean/variance normalisation per filter;
  the transcript's CTC labels, and the frames they need, are :mod:`bakeoff.data.ctc`'s;
* :func:`load_speech_dataset` — the embedded corpus (generated once and cached) or a validated manifest;
* :func:`to_arrays` — ragged utterances to padded arrays plus lengths.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bakeoff.data import DataError, parse_flag
from bakeoff.data.ctc import ALPHABET, HOP_S, SUBSAMPLING, WINDOW_S, ctc_frames_needed, frame_count, output_frames

N_MELS = 40
BAD_ROWS_SHOWN = 5  # a skipped-rows note names this many lines


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int = N_MELS) -> np.ndarray:
    """Triangular filters on the HTK mel scale, ``(n_fft // 2 + 1, n_mels)``, peak 1, 0 Hz to min(8 kHz, Nyquist)."""

    def mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def hz(m: np.ndarray) -> np.ndarray:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    top = min(8000.0, sample_rate / 2)
    edges = hz(np.linspace(0.0, mel(np.float64(top)), n_mels + 2))  # (n_mels + 2,)
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)[:, None]  # (F, 1)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins - lower) / (centre - lower)
    falling = (upper - bins) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling))  # (F, n_mels)


def log_mel(audio: np.ndarray, sample_rate: int, n_mels: int = N_MELS) -> np.ndarray:
    """Normalised log-mel features ``(frames, n_mels)`` float32 of a mono float waveform."""
    window, hop = round(WINDOW_S * sample_rate), round(HOP_S * sample_rate)
    n_fft = 1 << (window - 1).bit_length()
    frames = np.lib.stride_tricks.sliding_window_view(audio.astype(np.float64), window)[::hop]  # (T, window)
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)  # periodic Hann
    power = np.abs(np.fft.rfft(frames * hann, n_fft)) ** 2  # (T, F)
    feats = np.log(power @ mel_filterbank(sample_rate, n_fft, n_mels) + 1e-6)  # (T, n_mels)
    feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-5)
    return feats.astype(np.float32)


@dataclass
class SpeechSplit:
    """Utterances of one split: features, transcripts, and where each came from (for messages and the report)."""

    features: list[np.ndarray]  # each (frames, n_mels) float32
    texts: list[str]
    speakers: list[str]
    origins: list[str] = field(default_factory=list)  # "manifest.csv, line 3" or "espeak f3/en-us"
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of the bad rows left out

    def skipped_note(self, name: str) -> str:
        """``"; 2 bad rows of train.csv left out (skip_bad_rows; lines 4, 9)"``, or ``""``."""
        if not self.skipped:
            return ""
        lines = ", ".join(str(line) for line, _ in self.skipped[:BAD_ROWS_SHOWN])
        more = ", …" if len(self.skipped) > BAD_ROWS_SHOWN else ""
        many = len(self.skipped) > 1
        return (f"; {len(self.skipped)} bad row{'s' if many else ''} of {name} left out (skip_bad_rows; "
                f"line{'s' if many else ''} {lines}{more})")


@dataclass
class SpeechData:
    train: SpeechSplit
    test: SpeechSplit
    source: str
    sample_rate: int


def to_arrays(split: SpeechSplit) -> dict[str, np.ndarray]:
    """Padded arrays: ``features`` (N, T_max, n_mels) float32 zero-padded, ``feature_lengths`` (N,) int32,
    ``labels`` (N, S_max) int32 padded with the blank, ``label_lengths`` (N,) int32."""
    n = len(split.features)
    lengths = np.array([len(f) for f in split.features], np.int32)
    labels = [ALPHABET.encode(t) for t in split.texts]
    label_lengths = np.array([len(x) for x in labels], np.int32)
    features = np.zeros((n, lengths.max(), split.features[0].shape[1]), np.float32)
    padded_labels = np.zeros((n, label_lengths.max()), np.int32)
    for i, (f, y) in enumerate(zip(split.features, labels, strict=True)):
        features[i, : len(f)] = f
        padded_labels[i, : len(y)] = y
    return {"features": features, "feature_lengths": lengths, "labels": padded_labels, "label_lengths": label_lengths}


# --- the embedded corpus --------------------------------------------------------------------------------------


def embedded_corpus(spec: object | None = None) -> SpeechData:
    """The eSpeak NG corpus (see :mod:`bakeoff.data.speech_synth`), generated on first use and cached."""
    from bakeoff.data import speech_synth as synth

    spec = spec or synth.CorpusSpec()
    path = synth.cache_dir() / f"corpus-{spec.key()}.npz"
    if not path.exists():
        utterances = synth.synthesise(spec)
        feats = [log_mel(u.audio, synth.SAMPLE_RATE) for u in utterances]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(feats)}.tmp.npz")
        np.savez(tmp, features=np.concatenate(feats), lengths=np.array([len(f) for f in feats]),
                 texts=np.array([u.text for u in utterances]), variants=np.array([u.variant for u in utterances]),
                 accents=np.array([u.accent for u in utterances]))
        tmp.replace(path)  # atomic: a concurrent reader sees the whole file or none
    with np.load(path) as z:
        feats = np.split(z["features"], np.cumsum(z["lengths"])[:-1])
        texts, variants, accents = z["texts"].tolist(), z["variants"].tolist(), z["accents"].tolist()
    held_out = set(spec.test_set())
    splits = {True: SpeechSplit([], [], [], []), False: SpeechSplit([], [], [], [])}
    for f, text, variant, accent in zip(feats, texts, variants, accents, strict=True):
        s = splits[variant in held_out]
        s.features.append(f)
        s.texts.append(text)
        s.speakers.append(variant)
        s.origins.append(f"espeak {variant}/{accent}")
    train, test = splits[False], splits[True]
    for s in (train, test):
        for f, text, origin in zip(s.features, s.texts, s.origins, strict=True):
            # An invariant of the generator's parameters, not user input: every utterance must be CTC-feasible.
            assert output_frames(len(f)) >= ctc_frames_needed(ALPHABET.encode(text)), (origin, text)
    source = (f"eSpeak NG synthetic commands/digits: {len(train.texts)} train / {len(test.texts)} test utterances, "
              f"test speakers unseen ({', '.join(sorted(held_out))})")
    return SpeechData(train, test, source, synth.SAMPLE_RATE)


# --- the user's manifests -------------------------------------------------------------------------------------

OPTION_DEFAULTS: dict[str, str | None] = {
    "train": None, "test": None, "audio_column": "audio", "text_column": "text", "speaker_column": "speaker",
    "sample_rate": "16000", "batching": "pad", "pad_multiple": "1", "skip_bad_rows": "false",
}
"""Accepted data options of the speech workload (``None``: no default). ``batching`` and ``pad_multiple`` are
read by the workload's ``batches()``; the others by :func:`load_speech_dataset`."""

SHIPPED_TESTS = {"cards": Path(__file__).parent / "speech_cards" / "cards.csv"}
"""Test manifests shipped with bakeoff, by name: ``cards``, five real 16 kHz recordings of one speaker reading
playing cards, from Debian's ``pocketsphinx-testdata`` (BSD-2; see ``speech_cards/SOURCE.md``)."""

_WAV_FLAC = re.compile(r"\.(wav|flac)$", re.IGNORECASE)


def load_speech_dataset(options: Mapping[str, str]) -> SpeechData:
    """Load and validate speech data.

    Args:
        options: Without ``train``, the embedded eSpeak NG corpus; with only ``test``, its train split and the
            ``test`` manifest (``test=cards``: :data:`SHIPPED_TESTS`, five real recordings). Otherwise ``train``
            and ``test``: manifests
            (``.csv`` with a header, or ``.jsonl``), one utterance per row with columns ``audio`` (a WAV or FLAC
            path, relative to the manifest's folder) and ``text`` (the transcript; names set by ``audio_column``
            and ``text_column``); an optional ``speaker`` column is kept for the report. Every file must be mono
            at ``sample_rate`` (default 16000): bakeoff does not resample. Transcripts are normalised (lowercase,
            whitespace collapsed) and must then use only ``a-z``, space and ``'``. ``skip_bad_rows=true`` leaves
            out the rows that fail those checks (the data's source line says how many, and which lines).

    Raises:
        DataError: An unknown option, or (without ``skip_bad_rows``) a manifest row whose audio is missing,
            unreadable, not mono, at another sample rate, too short for its transcript, or whose transcript is
            empty or has other characters.
    """
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        raise DataError(f"unknown speech data option(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(OPTION_DEFAULTS)}")
    opts = {k: options.get(k, default) for k, default in OPTION_DEFAULTS.items()}
    test_path = Path(opts["test"]) if opts["test"] else None
    if opts["test"] in SHIPPED_TESTS and not (test_path and test_path.exists()):
        test_path = SHIPPED_TESTS[opts["test"]]
    columns = (opts["audio_column"], opts["text_column"], opts["speaker_column"])
    skip = parse_flag("skip_bad_rows", opts["skip_bad_rows"])
    if "train" not in options:
        given = sorted(set(options) - {"batching", "pad_multiple", "test", "audio_column", "text_column",
                                       "speaker_column", "skip_bad_rows"})
        if given:
            raise DataError(f"speech data option(s) {', '.join(map(repr, given))} need 'train' and 'test' manifests")
        corpus = embedded_corpus()
        if test_path is None:
            return corpus
        test = read_manifest(test_path, corpus.sample_rate, *columns, skip_bad_rows=skip)
        source = (f"eSpeak NG synthetic commands/digits: {len(corpus.train.texts)} train utterances; "
                  f"test: {opts['test']} ({len(test.texts)} recordings){test.skipped_note(opts['test'])}")
        return SpeechData(corpus.train, test, source, corpus.sample_rate)
    if "test" not in options:
        raise DataError("speech data option 'train' needs 'test' too (a second manifest, ideally of unseen "
                        "speakers); give neither for the embedded eSpeak NG corpus")
    try:
        rate = int(opts["sample_rate"])
    except ValueError:
        rate = 0
    if rate < 8000:
        raise DataError(f"sample_rate must be an integer of at least 8000 (Hz), got {opts['sample_rate']!r}")
    train = read_manifest(Path(opts["train"]), rate, *columns, skip_bad_rows=skip)
    test = read_manifest(test_path, rate, *columns, skip_bad_rows=skip)
    source = (f"{opts['train']} ({len(train.texts)} train) / {opts['test']} ({len(test.texts)} test), {rate} Hz"
              f"{train.skipped_note(opts['train'])}{test.skipped_note(opts['test'])}")
    return SpeechData(train, test, source, rate)


def manifest_files(path: Path, audio_column: str = "audio", text_column: str = "text") -> list[Path]:
    """The manifest and every audio file it names (what a trial trained or tested on), without reading audio;
    a manifest that cannot be parsed yields itself only (:func:`read_manifest` reports what is wrong with it)."""
    try:
        text = path.read_text("utf-8-sig")
        rows = (_csv_rows(str(path), text, audio_column, text_column) if path.suffix.lower() == ".csv"
                else _jsonl_rows(str(path), text))
    except (OSError, UnicodeDecodeError, DataError):
        return [path]
    audio = [path.parent / str(row.get(audio_column) or "").strip() for _, row in rows]
    return [path, *(a for a in audio if a.is_file())]


def read_manifest(path: Path, sample_rate: int, audio_column: str = "audio", text_column: str = "text",
                  speaker_column: str = "speaker", skip_bad_rows: bool = False) -> SpeechSplit:
    """Read one manifest and every audio file it names, validating each row; see :func:`load_speech_dataset`.
    With ``skip_bad_rows`` a row that fails is left out and kept in the split's ``skipped``; without, the first
    such row fails naming the option."""
    name = str(path)
    if not path.is_file():
        raise DataError(f"{name}: manifest not found (expected a .csv or .jsonl file)")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise DataError(f"{name}: unknown manifest type {path.suffix!r}; accepted: .csv, .jsonl")
    try:
        text = path.read_text("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{name}: not valid UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    rows = _csv_rows(name, text, audio_column, text_column) if suffix == ".csv" else _jsonl_rows(name, text)
    try:
        import soundfile  # noqa: F401  (checked once here: not a fault of any row)
    except ImportError:
        raise DataError("reading WAV/FLAC needs soundfile: pip install 'bakeoff[speech]'") from None
    split = SpeechSplit([], [], [], [])
    for line, row in rows:
        where = f"{name}, line {line}"
        try:
            feats, transcript = _utterance(where, path.parent, row, sample_rate, audio_column, text_column)
        except DataError as bad:
            if not skip_bad_rows:
                raise DataError(f"{bad} (or --data skip_bad_rows=true to leave such rows out)") from None
            split.skipped.append((line, str(bad)))
            continue
        split.features.append(feats)
        split.texts.append(transcript)
        split.speakers.append(str(row.get(speaker_column) or ""))
        split.origins.append(where)
    if not split.texts:
        first = f" ({len(split.skipped)} bad, left out; the first: {split.skipped[0][1]})" if split.skipped else ""
        raise DataError(f"{name}: no usable rows{first}; expected at least one utterance")
    return split


def _utterance(where: str, folder: Path, row: Mapping, sample_rate: int, audio_column: str,
               text_column: str) -> tuple[np.ndarray, str]:
    """One manifest row's log-mel features and normalised transcript; a :class:`DataError` naming its fault."""
    audio_field = str(row.get(audio_column) or "").strip()
    if not audio_field:
        raise DataError(f"{where}: empty {audio_column!r}; every row needs an audio file")
    transcript = ALPHABET.normalise(str(row.get(text_column) or ""))
    if not transcript:
        raise DataError(f"{where}: empty transcript in {text_column!r}; every row needs text")
    bad = ALPHABET.unknown(transcript)
    if bad:
        raise DataError(f"{where}: transcript has character(s) {''.join(bad)!r} outside the alphabet "
                        f"(after lowercasing): accepted are a-z, space and apostrophe; spell numbers and "
                        f"symbols out as words")
    audio = _read_audio(where, folder / audio_field, sample_rate)
    feats = log_mel(audio, sample_rate)
    need = ctc_frames_needed(ALPHABET.encode(transcript))
    if output_frames(len(feats)) < need:
        raise DataError(f"{where}: audio {audio_field!r} is {len(audio) / sample_rate:.2f} s, too short for its "
                        f"{len(transcript)}-character transcript (CTC needs {need} encoder frames of "
                        f"{SUBSAMPLING * HOP_S * 1000:.0f} ms)")
    return feats, transcript


def _read_audio(where: str, path: Path, sample_rate: int) -> np.ndarray:
    if not _WAV_FLAC.search(path.name):
        raise DataError(f"{where}: audio file {str(path)!r} is not .wav or .flac")
    if not path.is_file():
        raise DataError(f"{where}: audio file {str(path)!r} not found")
    import soundfile

    try:
        audio, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        raise DataError(f"{where}: cannot read audio file {str(path)!r} ({exc})") from None
    if rate != sample_rate:
        raise DataError(f"{where}: audio file {str(path)!r} is {rate} Hz, expected {sample_rate} Hz; bakeoff does "
                        f"not resample: convert it (e.g. sox in.wav -r {sample_rate} out.wav), or, if every file is "
                        f"at {rate} Hz, give --data sample_rate={rate}")
    if audio.shape[1] != 1:
        raise DataError(f"{where}: audio file {str(path)!r} has {audio.shape[1]} channels; expected mono")
    if frame_count(len(audio), sample_rate) == 0:
        raise DataError(f"{where}: audio file {str(path)!r} is shorter than one {WINDOW_S * 1000:.0f} ms frame")
    return audio[:, 0]


def _csv_rows(name: str, text: str, *columns: str) -> list[tuple[int, dict]]:
    reader = csv.reader(io.StringIO(text))
    rows, header, start = [], None, 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row:
                continue
            if header is None:
                header = [c.strip() for c in row]
                missing = [c for c in columns if c not in header]
                if missing:
                    raise DataError(f"{name}, line {line} (header): no column(s) {', '.join(map(repr, missing))} "
                                    f"(columns found: {', '.join(map(repr, header))})")
                continue
            rows.append((line, dict(zip(header, row, strict=False))))
    except csv.Error as exc:
        raise DataError(f"{name}, line {reader.line_num}: malformed CSV ({exc})") from None
    return rows


def _jsonl_rows(name: str, text: str) -> list[tuple[int, dict]]:
    rows = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name}, line {line}: malformed JSON ({exc.msg}); expected one object per line") from None
        if not isinstance(record, dict):
            raise DataError(f"{name}, line {line}: expected a JSON object, got {type(record).__name__}")
        rows.append((line, record))
    return rows
