"""An utterance as CTC sees it, the same for the speech data (:mod:`bakeoff.data.speech`) and the corpus generator
(:mod:`bakeoff.data.speech_synth`): its transcript as label ids (:data:`ALPHABET`, 0 the blank) and its frames —
feature frames of :data:`WINDOW_S` every :data:`HOP_S` (:func:`frame_count`), encoder frames after the model's
subsampling (:func:`output_frames`) — of which CTC needs at least :func:`ctc_frames_needed` to emit the labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WINDOW_S, HOP_S = 0.025, 0.010
SUBSAMPLING = 4  # the model's two stride-2 convolutions; CTC needs enough output frames per label


class Alphabet:
    """Lowercase letters, space and apostrophe; id 0 is the CTC blank, ids 1.. the characters in order."""

    chars = " abcdefghijklmnopqrstuvwxyz'"
    blank = 0

    def __init__(self) -> None:
        self._ids = {c: i + 1 for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars) + 1  # with the blank

    @staticmethod
    def normalise(text: str) -> str:
        """The documented normalisation: lowercase, whitespace runs to one space, stripped."""
        return " ".join(text.lower().split())

    def unknown(self, text: str) -> list[str]:
        """Characters of ``text`` outside the alphabet, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self._ids))

    def encode(self, text: str) -> np.ndarray:
        return np.array([self._ids[c] for c in text], np.int32)

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[i - 1] for i in ids if i > 0)


ALPHABET = Alphabet()


def frame_count(samples: int, sample_rate: int) -> int:
    """Feature frames of an utterance (0 when shorter than one window)."""
    window, hop = round(WINDOW_S * sample_rate), round(HOP_S * sample_rate)
    return 0 if samples < window else 1 + (samples - window) // hop


def output_frames(frames: int | np.ndarray) -> int | np.ndarray:
    """Encoder frames after the two stride-2 convolutions (kernel 3, padding 1): ceil(ceil(T / 2) / 2)."""
    return ((frames + 1) // 2 + 1) // 2


def ctc_frames_needed(labels: np.ndarray) -> int:
    """The fewest CTC frames that can emit ``labels``: one per label plus a blank between repeated labels."""
    return int(len(labels) + np.count_nonzero(labels[1:] == labels[:-1]))
