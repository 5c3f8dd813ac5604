"""Text-classification data: the shipped fine-foods reviews or the user's own CSV / JSON-lines files.

Everything here is numpy and the standard library, so every framework trains on byte-identical token arrays:

* :func:`load_text_dataset` reads and validates texts and string labels into a :class:`TextData`;
* :class:`WordTokenizer` turns texts into fixed-length ``int32`` id arrays;
* :func:`encode_dataset` fits the tokenizer on the training texts only and encodes both splits.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from bakeoff.data import DataError, parse_flag
from bakeoff.data.text_files import Rows, parse_rows, read_file

OPTION_DEFAULTS: dict[str, str | None] = {
    "train": None,
    "test": None,
    "text_column": "text",
    "label_column": "label",
    "test_fraction": "0.2",
    "split_seed": "0",
    "skip_bad_rows": "false",
}
"""Accepted keys of :func:`load_text_dataset`'s options and their defaults (``None``: no default)."""

_SHIPPED = "fine_foods"
_SHIPPED_SOURCE = "Amazon fine-food reviews (modeldata::small_fine_foods)"


@dataclass
class TextData:
    """Texts and labels of one text-classification data set, split into train and test.

    Attributes:
        train_texts: Training texts.
        train_labels: ``int64`` class ids, shape ``(len(train_texts),)``.
        test_texts: Test texts.
        test_labels: ``int64`` class ids, shape ``(len(test_texts),)``.
        classes: Sorted label strings; a class id indexes this list.
        source: A human description of the data for the report.
    """

    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray
    classes: list[str]
    source: str


def load_text_dataset(options: Mapping[str, str]) -> TextData:
    """Load and validate a text-classification data set.

    Args:
        options: Empty for the shipped fine-foods reviews (4000 train / 1000 test). Otherwise ``train`` (a
            ``.csv``, ``.tsv`` or ``.jsonl`` file, optionally ``.gz``) and optionally ``test`` (a second file);
            ``text_column`` and ``label_column`` (defaults ``text`` and ``label``); without ``test``,
            ``test_fraction`` (default ``0.2``) of the rows are split off with ``numpy.random.default_rng(split_seed)``
            (default seed ``0``). Labels are read as strings, so ``0``/``1`` and ``pos``/``neg`` both work.

    Returns:
        The texts, ``int64`` class ids and sorted class names.

    Raises:
        DataError: An unknown option, or a file that is missing, empty, malformed, lacks a column, has a row with
            no text or label, is not UTF-8, has a single training class, or has test labels unseen in training.
    """
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        raise DataError(
            f"unknown text data option(s) {', '.join(map(repr, unknown))}; accepted: {', '.join(OPTION_DEFAULTS)}"
        )
    if not options:
        return _load_shipped()
    opts = {key: str(options[key]) if key in options else default for key, default in OPTION_DEFAULTS.items()}
    if opts["train"] is None:
        raise DataError(
            f"text data options {', '.join(map(repr, sorted(options)))} need 'train' "
            f"(a .csv or .jsonl file); give no options at all for the shipped fine-foods reviews"
        )
    columns = (opts["text_column"], opts["label_column"])
    skip = parse_flag("skip_bad_rows", opts["skip_bad_rows"])
    train = read_file(Path(opts["train"]), *columns, skip)
    if opts["test"] is not None:
        if "test_fraction" in options or "split_seed" in options:
            raise DataError("test_fraction and split_seed apply only without a 'test' file; give one or the other")
        test = read_file(Path(opts["test"]), *columns, skip)
        source = f"{train.name} ({len(train.texts)} train) / {test.name} ({len(test.texts)} test)"
        source += train.skipped_note() + test.skipped_note()
    else:
        fraction, seed = _parse_fraction(opts["test_fraction"]), _parse_seed(opts["split_seed"])
        whole = train
        train, test = _split(whole, fraction, seed)
        source = (
            f"{whole.name}, {len(train.texts)} train / {len(test.texts)} test "
            f"(seeded split: test_fraction={fraction:g}, split_seed={seed})"
        ) + whole.skipped_note()
    return _to_text_data(train, test, source)


def _load_shipped() -> TextData:
    folder = resources.files("bakeoff.data").joinpath(_SHIPPED)
    splits = []
    for split in ("train", "test"):
        name = f"{_SHIPPED}/{split}.jsonl.gz"
        splits.append(parse_rows(name, folder.joinpath(f"{split}.jsonl.gz").read_bytes(), ".jsonl.gz", "text", "label"))
    train, test = splits
    return _to_text_data(train, test, f"{_SHIPPED_SOURCE}, {len(train.texts)} train / {len(test.texts)} test")


def _to_text_data(train: Rows, test: Rows, source: str) -> TextData:
    classes = sorted(set(train.labels))
    if len(classes) < 2:
        raise DataError(
            f"{train.name}: every training label is {classes[0]!r}; a classifier needs at least two "
            f"classes (check label_column)"
        )
    class_id = {label: i for i, label in enumerate(classes)}
    unseen = {}
    for label, line in zip(test.labels, test.lines, strict=True):
        if label not in class_id:
            unseen.setdefault(label, line)
    if unseen:
        listed = ", ".join(f"{label!r} (first on line {line})" for label, line in sorted(unseen.items()))
        raise DataError(
            f"{test.name}: test labels never seen in training: {listed}; "
            f"training classes: {', '.join(map(repr, classes))}"
        )
    return TextData(
        train_texts=train.texts,
        train_labels=np.array([class_id[label] for label in train.labels], dtype=np.int64),
        test_texts=test.texts,
        test_labels=np.array([class_id[label] for label in test.labels], dtype=np.int64),
        classes=classes,
        source=source,
    )


def _parse_fraction(value: str) -> float:
    try:
        fraction = float(value)
    except ValueError:
        fraction = float("nan")
    if not 0.0 < fraction < 1.0:  # also rejects NaN
        raise DataError(f"test_fraction must be a number strictly between 0 and 1, got {value!r}")
    return fraction


def _parse_seed(value: str) -> int:
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if seed < 0:
        raise DataError(f"split_seed must be a non-negative integer, got {value!r}")
    return seed


def _split(rows: Rows, fraction: float, seed: int) -> tuple[Rows, Rows]:
    """Split off ``round(fraction * n)`` random rows as test; both parts keep the file's order."""
    n = len(rows.texts)
    n_test = round(fraction * n)
    if not 0 < n_test < n:
        raise DataError(
            f"{rows.name}: {n} rows cannot be split with test_fraction={fraction:g} "
            f"(it leaves {n_test} test and {n - n_test} train rows); give a 'test' file or more rows"
        )
    order = np.random.default_rng(seed).permutation(n)
    train, test = rows.take(np.sort(order[n_test:])), rows.take(np.sort(order[:n_test]))
    train.name = test.name = f"{rows.name} (seeded split)"
    return train, test


PAD, UNK = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1

_LINE_BREAK = re.compile(r"<br\s*/?>")
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


class WordTokenizer:
    """A deterministic word-level tokenizer: lowercase, ``<br />`` to space, tokens ``[a-z0-9]+(?:'[a-z]+)?``.

    Id 0 is ``[PAD]``, id 1 is ``[UNK]``; the rest are the most frequent training tokens, ties broken by the token
    itself, so the same texts always give the same vocabulary.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        """Wrap an existing vocabulary (``vocab[0] == "[PAD]"``, ``vocab[1] == "[UNK]"``)."""
        if list(vocab[:2]) != [PAD, UNK] or len(set(vocab)) != len(vocab):
            raise ValueError(f"vocab must start with {PAD!r}, {UNK!r} and have no duplicates, got {list(vocab[:3])}...")
        self._vocab = list(vocab)
        self._ids = {token: i for i, token in enumerate(self._vocab)}

    @staticmethod
    def tokenize(text: str) -> list[str]:
        """Split one text into lowercase word tokens."""
        return _TOKEN.findall(_LINE_BREAK.sub(" ", text.lower()))

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int) -> WordTokenizer:
        """Build a vocabulary of at most ``vocab_size`` entries (including ``[PAD]`` and ``[UNK]``) from texts."""
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2 ([PAD] and [UNK]), got {vocab_size}")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls.tokenize(text))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return cls([PAD, UNK] + [token for token, _ in ranked[: vocab_size - 2]])

    def encode(self, texts: Sequence[str], seq_len: int) -> np.ndarray:
        """Encode texts as an ``int32`` array of shape ``(len(texts), seq_len)``.

        Keeps the first ``seq_len`` tokens and pads with 0 at the end; a text with no tokens becomes a single
        ``[UNK]``, so every row has at least one non-pad position for the attention mask.
        """
        if seq_len < 1:
            raise ValueError(f"seq_len must be at least 1, got {seq_len}")
        get, flat, lengths = self._ids.get, [], np.empty(len(texts), dtype=np.int64)
        for row, text in enumerate(texts):
            ids = [get(token, UNK_ID) for token in self.tokenize(text)[:seq_len]] or [UNK_ID]
            flat.extend(ids)
            lengths[row] = len(ids)
        tokens = np.zeros((len(texts), seq_len), dtype=np.int32)  # (N, T), 0 = [PAD]
        # Row-major boolean assignment fills each row's first lengths[row] positions, in order.
        tokens[np.arange(seq_len) < lengths[:, None]] = flat
        return tokens

    @property
    def vocab(self) -> list[str]:
        """The tokens in id order (a copy)."""
        return list(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)


def reading(texts: Sequence[str], seq_len: int) -> dict[str, float | int]:
    """How much of each text a model reading its first ``seq_len`` tokens sees: the texts' mean and median length
    in tokens, the share of texts cut, and the share of all their tokens left unread."""
    lengths = np.array([len(WordTokenizer.tokenize(t)) for t in texts], dtype=np.int64)
    total = int(lengths.sum())
    return {"seq_len": seq_len, "mean_tokens": float(lengths.mean()), "median_tokens": float(np.median(lengths)),
            "texts_cut": float((lengths > seq_len).mean()),
            "tokens_unread": float(np.maximum(lengths - seq_len, 0).sum() / total) if total else 0.0}


def encode_dataset(
    data: TextData, vocab_size: int, seq_len: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], WordTokenizer]:
    """Fit a :class:`WordTokenizer` on the training texts only and encode both splits.

    Args:
        data: The loaded data set.
        vocab_size: Vocabulary entries, including ``[PAD]`` and ``[UNK]``.
        seq_len: Tokens per example after truncation / padding.

    Returns:
        ``(train, test, tokenizer)``; ``train`` and ``test`` map ``"tokens"`` to ``int32 (N, seq_len)`` and
        ``"labels"`` to ``int64 (N,)``.
    """
    tokenizer = WordTokenizer.fit(data.train_texts, vocab_size)
    train = {"tokens": tokenizer.encode(data.train_texts, seq_len), "labels": data.train_labels.astype(np.int64)}
    test = {"tokens": tokenizer.encode(data.test_texts, seq_len), "labels": data.test_labels.astype(np.int64)}
    return train, test, tokenizer
