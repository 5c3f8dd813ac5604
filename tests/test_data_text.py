"""The framework-free text data layer: shipped data, user files, validation messages and the tokenizer."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from bakeoff.data import DataError
from bakeoff.data.text import TextData, WordTokenizer, encode_dataset, load_text_dataset


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    data = content.encode("utf-8") if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def raises(path: Path | str, detail: str) -> pytest.RaisesContext:
    """Expect a DataError whose message starts with the file name and contains ``detail`` (a regex; bad rows are
    listed one per line)."""
    return pytest.raises(DataError, match="(?s)" + re.escape(str(path)) + ".*" + detail)


# --- shipped data -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> TextData:
    return load_text_dataset({})


def test_shipped_fine_foods_counts_and_classes(shipped: TextData) -> None:
    assert len(shipped.train_texts) == 4000 and shipped.train_labels.shape == (4000,)
    assert len(shipped.test_texts) == 1000 and shipped.test_labels.shape == (1000,)
    assert shipped.classes == ["great", "other"]
    assert shipped.train_labels.dtype == np.int64 and shipped.test_labels.dtype == np.int64
    assert np.bincount(shipped.train_labels).tolist() == [2600, 1400]
    assert np.bincount(shipped.test_labels).tolist() == [658, 342]
    assert np.bincount(shipped.test_labels).max() / len(shipped.test_labels) == pytest.approx(0.658)
    assert shipped.source == "Amazon fine-food reviews (modeldata::small_fine_foods), 4000 train / 1000 test"
    assert shipped.test_texts[0].startswith("These are the best tasting gummy fruits")
    assert shipped.test_labels[0] == 0  # "great"


def test_encode_shipped_dataset_shapes(shipped: TextData) -> None:
    # How long it takes is bench/text_encoding.py's figure (target < 1 s), not an assertion.
    train, test, tokenizer = encode_dataset(shipped, vocab_size=8000, seq_len=128)
    assert len(tokenizer) == 8000 and tokenizer.vocab[:4] == ["[PAD]", "[UNK]", "the", "i"]
    assert train["tokens"].shape == (4000, 128) and train["tokens"].dtype == np.int32
    assert test["tokens"].shape == (1000, 128) and test["tokens"].dtype == np.int32
    assert train["labels"].dtype == np.int64 and np.array_equal(test["labels"], shipped.test_labels)
    assert (train["tokens"] != 0).any(axis=1).all() and (test["tokens"] != 0).any(axis=1).all()
    assert int(train["tokens"].max()) == 7999


# --- tokenizer ----------------------------------------------------------------------------------------------


TOY = ["the cat sat", "The dog<br />sat", "a cat's toy, the cat"]


def test_tokenize_lowercases_splits_line_breaks_and_keeps_contractions() -> None:
    assert WordTokenizer.tokenize("Don't STOP<br />believing<BR>42x's rock'n'roll!") == [
        "don't",
        "stop",
        "believing",
        "42x's",
        "rock'n",
        "roll",
    ]


def test_fit_ranks_by_count_then_token_deterministically() -> None:
    # counts: the 3, cat 2, sat 2, then a / cat's / dog / toy once each; ties are broken alphabetically
    tokenizer = WordTokenizer.fit(TOY, vocab_size=6)
    assert tokenizer.vocab == ["[PAD]", "[UNK]", "the", "cat", "sat", "a"]
    assert len(tokenizer) == 6
    assert WordTokenizer.fit(list(reversed(TOY)), vocab_size=6).vocab == tokenizer.vocab
    assert WordTokenizer.fit(TOY, vocab_size=100).vocab == [
        "[PAD]",
        "[UNK]",
        "the",
        "cat",
        "sat",
        "a",
        "cat's",
        "dog",
        "toy",
    ]


def test_encode_truncates_pads_and_gives_empty_texts_one_unk() -> None:
    tokenizer = WordTokenizer.fit(TOY, vocab_size=6)
    tokens = tokenizer.encode(["the cat sat on the mat", "", "!!! ...", "Dog cat"], seq_len=4)
    expected = np.array([[2, 3, 4, 1], [1, 0, 0, 0], [1, 0, 0, 0], [1, 3, 0, 0]], dtype=np.int32)
    assert tokens.dtype == np.int32
    np.testing.assert_array_equal(tokens, expected)
    np.testing.assert_array_equal(tokenizer.encode([], seq_len=3), np.zeros((0, 3), dtype=np.int32))


def test_tokenizer_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="vocab_size must be at least 2"):
        WordTokenizer.fit(TOY, vocab_size=1)
    with pytest.raises(ValueError, match="seq_len must be at least 1"):
        WordTokenizer.fit(TOY, vocab_size=4).encode(TOY, seq_len=0)


def test_encode_dataset_fits_on_train_texts_only() -> None:
    data = TextData(["good good", "bad"], np.array([1, 0]), ["excellent bad"], np.array([0]), ["neg", "pos"], "toy")
    train, test, tokenizer = encode_dataset(data, vocab_size=10, seq_len=3)
    assert tokenizer.vocab == ["[PAD]", "[UNK]", "good", "bad"]
    np.testing.assert_array_equal(train["tokens"], [[2, 2, 0], [3, 0, 0]])
    np.testing.assert_array_equal(test["tokens"], [[1, 3, 0]])  # "excellent" never seen in train
    assert train["labels"].dtype == np.int64 and train["labels"].tolist() == [1, 0]


# --- user files ---------------------------------------------------------------------------------------------


def test_csv_files_with_custom_columns_and_three_classes(tmp_path: Path) -> None:
    train = write(
        tmp_path,
        "train.csv",
        'id,body,sentiment\n1,"Loved it, really",pos\n2,"Meh.\nTwo lines",neutral\n3,Awful,neg\n4,Great stuff,pos\n',
    )
    test = write(tmp_path, "test.csv", "body,sentiment\nfine I guess,neutral\nterrible,neg\n")
    data = load_text_dataset(
        {"train": str(train), "test": str(test), "text_column": "body", "label_column": "sentiment"}
    )
    assert data.classes == ["neg", "neutral", "pos"]
    assert data.train_texts == ["Loved it, really", "Meh.\nTwo lines", "Awful", "Great stuff"]
    assert data.train_labels.tolist() == [2, 1, 0, 2] and data.train_labels.dtype == np.int64
    assert data.test_texts == ["fine I guess", "terrible"] and data.test_labels.tolist() == [1, 0]
    assert data.source == f"{train} (4 train) / {test} (2 test)"


def test_gzipped_jsonl_with_integer_labels(tmp_path: Path) -> None:
    rows = [{"review": "one", "stars": 0}, {"review": "two", "stars": 1}, {"review": "three", "stars": 2}]
    train = write(tmp_path, "train.jsonl.gz", jsonl(rows) + "\n")  # a trailing blank line is allowed
    test = write(tmp_path, "test.jsonl", jsonl([{"review": "four", "stars": "2"}]))
    data = load_text_dataset({"train": str(train), "test": str(test), "text_column": "review", "label_column": "stars"})
    assert data.classes == ["0", "1", "2"]
    assert data.train_texts == ["one", "two", "three"] and data.train_labels.tolist() == [0, 1, 2]
    assert data.test_texts == ["four"] and data.test_labels.tolist() == [2]


def test_seeded_split_is_deterministic_and_sized(tmp_path: Path) -> None:
    rows = [{"text": f"review {i}", "label": "pos" if i % 2 else "neg"} for i in range(20)]
    path = write(tmp_path, "all.jsonl", jsonl(rows))
    options = {"train": str(path), "test_fraction": "0.25", "split_seed": "7"}
    first, second = load_text_dataset(options), load_text_dataset(dict(options))
    assert len(first.train_texts) == 15 and len(first.test_texts) == 5
    assert first.train_texts == second.train_texts and first.test_texts == second.test_texts
    # The contract: numpy.random.default_rng(split_seed).permutation(n)[:n_test] is the test set, in file order.
    expected_test = sorted(np.random.default_rng(7).permutation(20)[:5].tolist())
    assert first.test_texts == [f"review {i}" for i in expected_test]
    assert first.test_labels.tolist() == [i % 2 for i in expected_test]
    assert sorted(first.train_texts + first.test_texts) == sorted(row["text"] for row in rows)
    assert first.source == f"{path}, 15 train / 5 test (seeded split: test_fraction=0.25, split_seed=7)"
    default = load_text_dataset({"train": str(path)})  # test_fraction 0.2, split_seed 0
    assert len(default.test_texts) == 4
    assert default.test_texts == [f"review {i}" for i in sorted(np.random.default_rng(0).permutation(20)[:4])]
    other_seed = load_text_dataset({"train": str(path), "split_seed": "1"})
    assert other_seed.test_texts != default.test_texts


# --- validation messages ------------------------------------------------------------------------------------


def test_unknown_option_lists_accepted_keys() -> None:
    with pytest.raises(
        DataError,
        match="unknown text data option.*'colour'.*accepted: train, test, text_column, "
        "label_column, test_fraction, split_seed",
    ):
        load_text_dataset({"colour": "red"})


def test_options_without_train_file() -> None:
    with pytest.raises(DataError, match="'text_column' need 'train'"):
        load_text_dataset({"text_column": "body"})


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with raises(path, "file not found"):
        load_text_dataset({"train": str(path)})


def test_unknown_file_type(tmp_path: Path) -> None:
    path = write(tmp_path, "data.txt", "text,label\n")
    with raises(path, r"unknown file type '\.txt'; accepted: \.csv\[\.gz\], \.tsv\[\.gz\], \.jsonl\[\.gz\]"):
        load_text_dataset({"train": str(path)})


def test_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl.gz"
    path.write_text('{"text": "a", "label": "b"}\n')
    with raises(path, "not a valid gzip file"):
        load_text_dataset({"train": str(path)})


@pytest.mark.parametrize(
    ("name", "content", "detail"),
    [
        ("empty.csv", "", r"no rows \(the file is empty\)"),
        ("blank.jsonl", "\n  \n", r"no rows \(the file is empty\)"),
        ("header.csv", "text,label\n", r"no rows \(no data rows after the header\)"),
    ],
)
def test_empty_file(tmp_path: Path, name: str, content: str, detail: str) -> None:
    path = write(tmp_path, name, content)
    with raises(path, detail):
        load_text_dataset({"train": str(path)})


def test_missing_csv_column_lists_columns_found(tmp_path: Path) -> None:
    path = write(tmp_path, "train.csv", "text,label\nhello,pos\n")
    with raises(path, r"line 1 \(header\): no text column 'body' \(columns found: 'text', 'label'\)"):
        load_text_dataset({"train": str(path), "text_column": "body"})


def test_missing_jsonl_column_names_line_and_columns_found(tmp_path: Path) -> None:
    path = write(tmp_path, "train.jsonl", jsonl([{"text": "a", "label": "x"}, {"text": "b", "stars": 5}]))
    with raises(path, r"line 2: no label column 'label' \(columns found: 'text', 'stars'\)"):
        load_text_dataset({"train": str(path)})


@pytest.mark.parametrize(
    ("name", "content", "detail"),
    [
        ("t.csv", 'text,label\nfine,pos\n"  ",neg\n', "line 3: empty text in column 'text'"),
        ("t.csv", "text,label\nfine,pos\nno label here\n", "line 3: empty label in column 'label'"),
        ("t.csv", 'text,label\n"two\nlines",pos\nok,\n', "line 4: empty label in column 'label'"),
        ("t.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": null}\n', "line 2: empty label"),
        ("t.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "", "label": "y"}\n', "line 3: empty text"),
    ],
)
def test_row_with_empty_text_or_label_names_the_line(tmp_path: Path, name: str, content: str, detail: str) -> None:
    path = write(tmp_path, name, content)
    with raises(path, detail):
        load_text_dataset({"train": str(path)})


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "train.csv", b"text,label\ngood,pos\ncaf\xe9 latin-1,neg\n")
    with raises(path, "line 3: not valid UTF-8"):
        load_text_dataset({"train": str(path)})


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "train.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", label: "y"}\n')
    with raises(path, "line 2: malformed JSON"):
        load_text_dataset({"train": str(path)})
    path = write(tmp_path, "list.jsonl", '["a", "x"]\n')
    with raises(path, "line 1: expected a JSON object, got list"):
        load_text_dataset({"train": str(path)})


def test_single_training_class(tmp_path: Path) -> None:
    train = write(tmp_path, "train.csv", "text,label\na,pos\nb,pos\n")
    test = write(tmp_path, "test.csv", "text,label\nc,pos\n")
    with raises(train, "every training label is 'pos'; a classifier needs at least two classes"):
        load_text_dataset({"train": str(train), "test": str(test)})


def test_test_labels_unseen_in_training(tmp_path: Path) -> None:
    train = write(tmp_path, "train.csv", "text,label\na,pos\nb,neg\n")
    test = write(tmp_path, "test.csv", "text,label\nc,pos\nd,maybe\ne,maybe\n")
    with raises(
        test,
        r"test labels never seen in training: 'maybe' \(first on line 3\); "
        "training classes: 'neg', 'pos'",
    ):
        load_text_dataset({"train": str(train), "test": str(test)})


@pytest.mark.parametrize("fraction", ["0", "1", "1.5", "-0.2", "abc", "nan"])
def test_test_fraction_outside_open_interval(tmp_path: Path, fraction: str) -> None:
    path = write(tmp_path, "train.csv", "text,label\na,pos\nb,neg\n")
    with pytest.raises(DataError, match=f"test_fraction must be a number strictly between 0 and 1, got '{fraction}'"):
        load_text_dataset({"train": str(path), "test_fraction": fraction})


def test_bad_split_seed_and_too_few_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "train.csv", "text,label\na,pos\nb,neg\n")
    with pytest.raises(DataError, match="split_seed must be a non-negative integer, got 'x'"):
        load_text_dataset({"train": str(path), "split_seed": "x"})
    with raises(path, "2 rows cannot be split with test_fraction=0.1"):
        load_text_dataset({"train": str(path), "test_fraction": "0.1"})


def test_split_options_conflict_with_a_test_file(tmp_path: Path) -> None:
    path = write(tmp_path, "train.csv", "text,label\na,pos\nb,neg\n")
    with pytest.raises(DataError, match="test_fraction and split_seed apply only without a 'test' file"):
        load_text_dataset({"train": str(path), "test": str(path), "test_fraction": "0.5"})


# --- real data gets a way on ---------------------------------------------------------------------------------------


def _rows_with_gaps(count: int, gaps: set[int]) -> str:
    """A CSV of ``count`` rows, two classes, whose rows at indices ``gaps`` have no text."""
    rows = [f"{'' if i in gaps else f'text number {i}'},{'ab'[i % 2]}" for i in range(count)]
    return "text,label\n" + "\n".join(rows) + "\n"


def test_every_bad_row_is_named_at_once_and_a_flag_leaves_them_out(tmp_path: Path) -> None:
    """Before: a CSV with 12 empty texts stopped at the first, naming one of twelve and offering no way on."""
    gaps = {3, 7, 20, 21, 22, 40, 41, 50, 60, 61, 70, 90}
    path = write(tmp_path, "reviews.csv", _rows_with_gaps(100, gaps))
    with pytest.raises(DataError) as caught:
        load_text_dataset({"train": str(path)})
    message = str(caught.value)
    assert message.startswith(f"{path}: 12 bad rows, which training cannot use:")
    named = [int(n) for n in re.findall(r"\n  line (\d+): empty text in column 'text'", message)]
    assert named == sorted(g + 2 for g in gaps)[:10] and "\n  and 2 more" in message  # line = index + 2 (header)
    assert "--data skip_bad_rows=true" in message
    data = load_text_dataset({"train": str(path), "skip_bad_rows": "true"})
    assert len(data.train_texts) + len(data.test_texts) == 88
    assert f"12 bad rows of {path} left out (skip_bad_rows; lines 5, 9, 22" in data.source


def test_rows_with_more_fields_than_the_header_are_bad_rows(tmp_path: Path) -> None:
    """Before: silently accepted, the extra field dropped (a comma in an unquoted text splits it)."""
    path = write(tmp_path, "t.csv", "text,label\nfine,a\nsplit, by a comma,b\nok,b\n")
    with raises(path, r"1 bad row.*\n  line 3: 1 field\(s\) more than the header's 2"):
        load_text_dataset({"train": str(path)})


def test_a_quote_never_closed_is_named_as_such(tmp_path: Path) -> None:
    """Before: reported as "empty label", the open quote having swallowed the rest of the file into one field."""
    path = write(tmp_path, "t.csv", 'text,label\nfine,a\n"never closed,b\nnext,a\nlast,b\n')
    with raises(path, "line 3: a quoted field opened on this line is never closed"):
        load_text_dataset({"train": str(path)})


def test_a_field_longer_than_csvs_default_limit_is_read(tmp_path: Path) -> None:
    """Before: "malformed CSV (field larger than field limit (131072))" for a valid file holding whole articles."""
    article = "word " * 40_000  # 200,000 characters
    path = write(tmp_path, "t.csv", f'text,label\n"{article}",a\nshort,b\nother,a\nmore,b\nlast,a\n')
    data = load_text_dataset({"train": str(path), "test_fraction": "0.2"})
    assert max(map(len, data.train_texts + data.test_texts)) == len(article)


def test_tsv_files_are_read_like_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "t.tsv", "text\tlabel\nhello, world\ta\nbye\tb\nagain\ta\nmore\tb\nlast\ta\n")
    data = load_text_dataset({"train": str(path)})
    assert "hello, world" in data.train_texts + data.test_texts


def test_a_missing_column_hint_names_the_real_flag(tmp_path: Path) -> None:
    """Before: "set text_column to one of them", which led to --set (refused); the flag is --data."""
    path = write(tmp_path, "t.csv", "body,label\nhello,a\n")
    with raises(path, "name the text column with --data text_column=NAME"):
        load_text_dataset({"train": str(path)})
    with pytest.raises(DataError, match="skip_bad_rows must be true or false, got 'maybe'"):
        load_text_dataset({"train": str(path), "text_column": "body", "skip_bad_rows": "maybe"})
