"""Reading a text-classification data set's files (:mod:`bakeoff.data.text` loads and splits them): JSON lines, CSV
or TSV, gzipped or not, into texts and labels with the line each row starts on, every fault named with its file and
line, and bad rows either refused together or left out and counted (``skip_bad_rows``)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bakeoff.data import DataError

_DELIMITERS = {".csv": ",", ".tsv": "\t", ".jsonl": None, ".ndjson": None}  # None: JSON lines


@dataclass
class Rows:
    """Texts and string labels read from one file, with the line each row starts on (for messages)."""

    name: str
    texts: list[str]
    labels: list[str]
    lines: list[int]
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of the bad rows left out

    def take(self, index: np.ndarray) -> Rows:
        return Rows(
            self.name, [self.texts[i] for i in index], [self.labels[i] for i in index], [self.lines[i] for i in index]
        )

    def skipped_note(self) -> str:
        """``""``, or how many bad rows of this file were left out and which: for the data's description."""
        if not self.skipped:
            return ""
        lines = ", ".join(str(line) for line, _ in self.skipped[:BAD_ROWS_SHOWN])
        more = ", …" if len(self.skipped) > BAD_ROWS_SHOWN else ""
        return f"; {len(self.skipped)} bad row{'s' if len(self.skipped) > 1 else ''} of {self.name} left out " \
               f"(skip_bad_rows; line{'s' if len(self.skipped) > 1 else ''} {lines}{more})"


class _BadRow(ValueError):
    """A row training cannot use (no text, no label, fields beyond the header): collected, named together."""


BAD_ROWS_SHOWN = 10
"""Bad rows named in a message (each with its line and why); the rest are counted."""


def read_file(path: Path, text_column: str, label_column: str, skip_bad_rows: bool = False) -> Rows:
    name = str(path)
    if not path.exists():
        raise DataError(f"{name}: file not found")
    if not path.is_file():
        raise DataError(f"{name}: not a regular file, expected a .csv or .jsonl file")
    suffixes = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if suffixes.removesuffix(".gz").lower() not in _DELIMITERS:
        accepted = ", ".join(f"{s}[.gz]" for s in _DELIMITERS)
        raise DataError(f"{name}: unknown file type {suffixes!r}; accepted: {accepted}")
    return parse_rows(name, path.read_bytes(), suffixes.lower(), text_column, label_column, skip_bad_rows)


def parse_rows(name: str, raw: bytes, suffixes: str, text_column: str, label_column: str,
           skip_bad_rows: bool = False) -> Rows:
    if suffixes.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(f"{name}: not a valid gzip file ({exc})") from None
    delimiter = _DELIMITERS[suffixes.removesuffix(".gz")]
    lines = _decode_lines(name, raw)
    columns = {"text": text_column, "label": label_column}
    if delimiter is None:
        records: Iterable[tuple[int, dict]] = list(_json_records(name, lines))
        _check_keys(name, records, columns)
    else:
        records = _csv_records(name, lines, delimiter, columns)
    rows = Rows(name, [], [], [])
    for line, record in records:
        try:
            if None in record:  # csv: fields beyond the header's
                raise _BadRow(f"{len(record[None])} field(s) more than the header's {len(record) - 1}")
            text = _field(name, line, record, text_column, "text")
            label = _field(name, line, record, label_column, "label").strip()
            if not text.strip():
                raise _BadRow(f"empty text in column {text_column!r}")
            if not label:
                raise _BadRow(f"empty label in column {label_column!r}")
        except _BadRow as bad:
            rows.skipped.append((line, str(bad)))
            continue
        rows.texts.append(text)
        rows.labels.append(label)
        rows.lines.append(line)
    if rows.skipped and not skip_bad_rows:
        shown = "".join(f"\n  line {line}: {why}" for line, why in rows.skipped[:BAD_ROWS_SHOWN])
        more = f"\n  and {len(rows.skipped) - BAD_ROWS_SHOWN} more" if len(rows.skipped) > BAD_ROWS_SHOWN else ""
        raise DataError(f"{name}: {len(rows.skipped)} bad row{'s' if len(rows.skipped) > 1 else ''}, which "
                        f"training cannot use:{shown}{more}\nFix them, or add --data skip_bad_rows=true to leave "
                        "them out (the report's data line says how many were left out)")
    if not rows.texts and rows.skipped:  # skip_bad_rows left every row out
        line, why = rows.skipped[0]
        raise DataError(f"{name}: no usable rows: all {len(rows.skipped)} are bad and skip_bad_rows left them all "
                        f"out (the first, line {line}: {why})")
    if not rows.texts:
        kind = "no JSON objects" if delimiter is None else "no data rows after the header"
        raise DataError(f"{name}: no rows ({kind}); expected at least one row with text and label")
    return rows


def _check_keys(name: str, records: Sequence[tuple[int, dict]], columns: dict[str, str]) -> None:
    """A JSON-lines file none of whose objects has the text or label key: one error naming the keys it has (not
    one bad row per line, which ``skip_bad_rows`` would then leave out to nothing)."""
    missing = {what: column for what, column in columns.items() if not any(column in r for _, r in records)}
    if not missing or not records:
        return
    found = Counter(key for _, record in records for key in record)
    keys = ", ".join(f"{key!r} (in {count} of them)" for key, count in found.items()) or "none, every object is {}"
    wanted = " and ".join(f"the {what} key {column!r}" for what, column in missing.items())
    options = " ".join(f"--data {what}_column=KEY" for what in missing)
    raise DataError(f"{name}: {wanted} {'are' if len(missing) > 1 else 'is'} in none of its {len(records)} JSON "
                    f"objects; keys found: {keys}. Name "
                    f"the key{'s' if len(missing) > 1 else ''} to read with {options}")


def _decode_lines(name: str, raw: bytes) -> list[str]:
    """Decode line by line so an invalid byte is reported with its line number; keeps line endings for csv."""
    lines = []
    for number, line in enumerate(io.BytesIO(raw), start=1):
        try:
            lines.append(line.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{name}, line {number}: not valid UTF-8 (byte {line[exc.start]:#04x} at "
                f"position {exc.start}); save the file as UTF-8"
            ) from None
    if not any(line.strip() for line in lines):
        raise DataError(f"{name}: no rows (the file is empty)")
    return lines


def _json_records(name: str, lines: list[str]) -> Iterator[tuple[int, dict]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{name}, line {number}: malformed JSON ({exc.msg} at column {exc.colno}); "
                f"expected one JSON object per line"
            ) from None
        if not isinstance(record, dict):
            raise DataError(f"{name}, line {number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def _csv_records(name: str, lines: list[str], delimiter: str, columns: dict[str, str]) -> Iterator[tuple[int, dict]]:
    """Rows as ``{column: value}``; a short row's missing fields are None, a long row's extra fields are under the
    key None (a bad row). Strict: a quote never closed is an error naming the line it opened on, not a field that
    swallows the rest of the file. Fields of any length (whole articles) are read."""
    csv.field_size_limit(2**31 - 1)  # the default, 131,072 characters, is smaller than some real texts
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    header: list[str] | None = None
    start = 1  # a quoted field may span lines; report the line its row starts on
    try:
        for row in reader:
            number, start = start, reader.line_num + 1
            if not row:  # blank line
                continue
            if header is None:
                header = [column.strip() for column in row]
                _check_header(name, number, header, columns)
                continue
            record: dict = dict(zip(header, row + [None] * (len(header) - len(row)), strict=False))
            if len(row) > len(header):
                record[None] = row[len(header):]
            yield number, record
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise DataError(f"{name}, line {start}: a quoted field opened on this line is never closed (malformed "
                            "quoting: a quote inside a quoted field must be doubled, \"\")") from None
        raise DataError(f"{name}, line {reader.line_num}: malformed CSV ({exc}; a quote inside a quoted field must "
                        "be doubled, \"\")") from None


def _check_header(name: str, line: int, header: list[str], columns: dict[str, str]) -> None:
    for what, column in columns.items():
        if column not in header:
            found = ", ".join(map(repr, header))
            raise DataError(
                f"{name}, line {line} (header): no {what} column {column!r} (columns found: {found}); "
                f"name the {what} column with --data {what}_column=NAME"
            )


def _field(name: str, line: int, record: dict, column: str, what: str) -> str:
    if column not in record:
        found = ", ".join(map(repr, record)) or "none"
        raise _BadRow(f"no {what} column {column!r} (columns found: {found}); name the {what} column with --data "
                      f"{what}_column=NAME")
    value = record[column]
    if value is None:
        return ""
    if isinstance(value, list | dict):
        raise _BadRow(f"column {column!r} holds a JSON {type(value).__name__}, expected a string or number")
    # json.dumps turns JSON numbers and booleans back into their literal spelling: 1 -> "1", true -> "true".
    return value if isinstance(value, str) else json.dumps(value)
