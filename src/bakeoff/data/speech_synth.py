"""The embedded speech corpus: short English utterances synthesised offline with eSpeak NG, cached on disk.

Speakers are eSpeak NG *voice variants* (``f3``, ``klatt2``, ``Annie``, …), each heard in several English
accents (``en-us``, ``en-gb-scotland``, ``en-029``, …) at per-utterance speeds and pitches, with seeded white
noise added. The train/test split is by variant, so every test speaker's voice is unseen in training.

Determinism. eSpeak NG seeds its random numbers from the clock and keeps state across utterances (its pitch
"flutter" advances continuously, whatever is reset), so two calls with the same text differ inside one process.
We therefore synthesise each variant's utterances in a *fresh* process (``max_tasks_per_child=1``) in a fixed
order, with the random seeds pinned before every utterance: the result depends on the corpus parameters and the
eSpeak NG build only, not on the number of workers or what ran before. The cache key includes the library version.

The eSpeak NG library and its voice data come from the PyPI package ``espeakng-loader`` and are driven
through ``ctypes`` (the five calls of ``speak_lib.h`` we need), so no system package is required.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np

from bakeoff.data import DataError
from bakeoff.data.ctc import ALPHABET, ctc_frames_needed, frame_count, output_frames

ACCENTS = ("en", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
"""English languages of eSpeak NG; an accent is drawn per utterance."""

VARIANTS = ("default", "f1", "f2", "f3", "f4", "f5", "m1", "m2", "m3", "m4", "m5", "m6", "m7",
            "klatt", "klatt2", "klatt3", "Annie", "Alicia", "Andy", "Gene", "Lee", "linda", "max", "steph")
"""The speakers: eSpeak NG voice variants ("default" is the accent's own voice). Novelty voices are left out."""

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "forward", "backward",
            "follow", "learn", "wait", "start")
_PHRASES = (
    ("turn", ("on", "off"), "the", ("light", "radio", "fan", "heater")),
    ("go", ("left", "right", "up", "down", "forward", "back"), DIGITS),
    ("set", ("volume", "timer", "alarm"), "to", DIGITS),
    (("open", "close", "lock"), "the", ("door", "window", "gate")),
    ("call", ("home", "mom", "office", "john")),
)

SYNTH_RATE = 22050  # eSpeak NG's fixed output rate
SAMPLE_RATE = 16000  # the corpus rate after resampling


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """What the embedded corpus is made of; every field is part of the cache key.

    Attributes:
        per_variant: Utterances per speaker (voice variant).
        test_variants: How many variants are held out as unseen test speakers.
        seed: Seeds texts, accents, speeds, pitches, noise and the split.
        rate_wpm: Speaking rate range, words per minute (eSpeak NG's default is 175).
        pitch: Base pitch range on eSpeak NG's 0-99 scale.
        snr_db: Signal-to-noise ratio range of the added white noise.
        silence_ms: Range of the silence added before and after the speech (then noise covers it).
        variants: The speakers.
    """

    per_variant: int = 120
    test_variants: int = 5
    seed: int = 0
    rate_wpm: tuple[int, int] = (120, 200)
    pitch: tuple[int, int] = (25, 75)
    snr_db: tuple[float, float] = (10.0, 30.0)
    silence_ms: tuple[int, int] = (50, 300)
    variants: tuple[str, ...] = VARIANTS

    def test_set(self) -> tuple[str, ...]:
        """The held-out variants: a seeded choice, the same for every framework and run."""
        if not 0 < self.test_variants < len(self.variants):
            raise ValueError(f"test_variants must be in 1..{len(self.variants) - 1}, got {self.test_variants}")
        order = np.random.default_rng([self.seed, 7]).permutation(len(self.variants))
        return tuple(sorted(self.variants[i] for i in order[: self.test_variants]))

    def key(self) -> str:
        raw = json.dumps({**dataclasses.asdict(self), "espeak": _espeak_version(), "format": 1}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclasses.dataclass
class Utterance:
    text: str
    variant: str
    accent: str
    audio: np.ndarray  # float32 (samples,) at SAMPLE_RATE, noise added


def _espeak_version() -> str:
    try:
        return metadata.version("espeakng-loader")
    except metadata.PackageNotFoundError:
        return "missing"


def random_text(rng: np.random.Generator) -> str:
    """A digit string, one or two command words, or a short command phrase."""
    kind = rng.integers(3)
    if kind == 0:
        words = [DIGITS[i] for i in rng.integers(len(DIGITS), size=rng.integers(2, 5))]
    elif kind == 1:
        words = [COMMANDS[i] for i in rng.integers(len(COMMANDS), size=rng.integers(1, 3))]
    else:
        template = _PHRASES[rng.integers(len(_PHRASES))]
        words = [part if isinstance(part, str) else part[rng.integers(len(part))] for part in template]
    return " ".join(words)


class _ESpeak:
    """Minimal ctypes driver for libespeak-ng in synchronous mode, collecting 16-bit samples."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError:
            raise DataError("the embedded speech corpus needs eSpeak NG: pip install 'bakeoff[speech]' "
                            "(PyPI espeakng-loader), or give your own manifest with data option train=...") from None
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        synchronous = 2  # AUDIO_OUTPUT_SYNCHRONOUS
        rate = lib.espeak_Initialize(synchronous, 0, espeakng_loader.get_data_path().encode(), 0)
        if rate != SYNTH_RATE:
            raise RuntimeError(f"eSpeak NG failed to initialise (returned {rate}, expected {SYNTH_RATE} Hz)")
        self._chunks: list[np.ndarray] = []
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
        self._callback = callback_type(self._collect)  # keep a reference: the library calls it later
        lib.espeak_SetSynthCallback(self._callback)
        self._lib, self._libc = lib, ctypes.CDLL(None)

    def _collect(self, wav: ctypes.Array, n: int, events: int) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        return 0  # continue synthesis

    def say(self, text: str, voice: str, rate_wpm: int, pitch: int, seed: int) -> np.ndarray:
        """Synthesise ``text``; int16 samples at 22050 Hz."""
        lib = self._lib
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise RuntimeError(f"eSpeak NG has no voice {voice!r}")
        lib.espeak_SetParameter(1, rate_wpm, 0)  # espeakRATE
        lib.espeak_SetParameter(3, pitch, 0)  # espeakPITCH
        lib.espeak_ng_SetRandSeed(seed)  # eSpeak's own generator (seeded from the clock at start-up)
        self._libc.srand(seed)  # and libc rand(), which the Klatt voices use
        self._chunks.clear()
        raw = text.encode() + b"\0"
        lib.espeak_Synth(raw, len(raw), 0, 1, 0, 0, None, None)  # POS_CHARACTER, espeakCHARS_AUTO
        lib.espeak_Synchronize()
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)


def resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling by truncating (or zero-padding) the spectrum: exact, deterministic numpy."""
    n = len(x)
    m = round(n * rate_out / rate_in)
    spectrum = np.fft.rfft(x.astype(np.float64))
    return (np.fft.irfft(spectrum[: m // 2 + 1], m) * (m / n)).astype(np.float32)


def synthesise_variant(spec: CorpusSpec, variant_index: int) -> list[Utterance]:
    """All utterances of one speaker, in order. Run in a fresh process (see the module docstring)."""
    variant = spec.variants[variant_index]
    rng = np.random.default_rng([spec.seed, 1, variant_index])
    engine = _ESpeak()
    out = []
    for i in range(spec.per_variant):
        text = random_text(rng)
        accent = ACCENTS[rng.integers(len(ACCENTS))]
        rate = int(rng.integers(spec.rate_wpm[0], spec.rate_wpm[1] + 1))
        pitch = int(rng.integers(spec.pitch[0], spec.pitch[1] + 1))
        snr_db = float(rng.uniform(*spec.snr_db))
        lead, trail = (int(rng.integers(*spec.silence_ms) * SAMPLE_RATE // 1000) for _ in range(2))
        voice = accent if variant == "default" else f"{accent}+{variant}"
        while True:  # slow down the rare utterance too fast for CTC at 40 ms encoder frames
            samples = engine.say(text, voice, rate, pitch, seed=variant_index * 100_003 + i)
            audio = resample(samples.astype(np.float32) / 32768.0, SYNTH_RATE, SAMPLE_RATE)
            audio = np.pad(audio, (lead, trail))
            frames = output_frames(frame_count(len(audio), SAMPLE_RATE))
            if frames >= ctc_frames_needed(ALPHABET.encode(text)) or rate <= 80:
                break
            rate -= 20
        noise_rng = np.random.default_rng([spec.seed, 2, variant_index, i])
        power = float(np.mean(audio**2)) + 1e-12
        audio = audio + noise_rng.normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), audio.shape).astype(np.float32)
        out.append(Utterance(text, variant, accent, audio))
    return out


def synthesise(spec: CorpusSpec, workers: int | None = None) -> list[Utterance]:
    """The whole corpus, variant by variant, each variant in a fresh process."""
    workers = workers or min(len(spec.variants), os.cpu_count() or 1)
    context = multiprocessing.get_context("spawn")  # no inherited library state; safe with threads
    with ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1) as pool:
        parts = pool.map(synthesise_variant, [spec] * len(spec.variants), range(len(spec.variants)))
        return [u for part in parts for u in part]


def cache_dir() -> Path:
    """``$BAKEOFF_SPEECH_CACHE``, else ``$XDG_CACHE_HOME/bakeoff/speech``, else ``~/.cache/bakeoff/speech``."""
    if os.environ.get("BAKEOFF_SPEECH_CACHE"):
        return Path(os.environ["BAKEOFF_SPEECH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bakeoff" / "speech"
