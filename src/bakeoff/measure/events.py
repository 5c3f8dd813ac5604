"""TensorBoard event files written without any framework: scalars only, in TensorBoard's own on-disk format.

``torch.utils.tensorboard`` imports the ``tensorboard`` package, which imports TensorFlow whenever it is installed,
and ``tensorboardX`` imports PyTorch whenever that is installed: either would load a second framework into a
trial's process and charge its memory and import time to the framework under test. This writer needs only the
standard library, so the PyTorch engine (and any other that lacks a framework-free writer of its own) uses it;
TensorFlow keeps ``tf.summary``.

The format: a file named ``events.out.tfevents.<time>.<host>.<pid>`` holding TFRecords (little-endian length,
masked CRC-32C of the length, the payload, masked CRC-32C of the payload), each payload one serialised ``Event``
protocol buffer (``tensorboard/compat/proto/event.proto``); the first carries the file version.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli polynomial, reflected
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as TFRecord framing uses it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, *, file_version: str | None = None,
           tag: str | None = None, value: float = 0.0) -> bytes:
    """A serialised ``Event``: wall_time (1, double), step (2, int64), file_version (3) or summary (5)."""
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step & (2**64 - 1))
    if file_version is not None:
        out += _field(3, file_version.encode())
    if tag is not None:
        # Summary.value (1) = Value{tag (1), simple_value (2, float)}
        summary_value = _field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value)
        out += _field(5, _field(1, summary_value))
    return out


class EventWriter:
    """Scalars to a TensorBoard event file under ``logdir``; the :class:`bakeoff.engines.base.SummaryWriter` API."""

    def __init__(self, logdir: Path | str) -> None:
        directory = Path(logdir)
        directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self.path = directory / name
        self._file = self.path.open("ab")
        self._write(_event(time.time(), 0, file_version="brain.Event:2"))

    def _write(self, payload: bytes) -> None:
        header = struct.pack("<Q", len(payload))
        self._file.write(header + struct.pack("<I", _masked_crc(header)) + payload
                         + struct.pack("<I", _masked_crc(payload)))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._write(_event(time.time(), step, tag=tag, value=float(value)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
