"""Producer-state snapshot files (``<20-digit offset>.snapshot``): Kafka's ``ProducerSnapshot`` v1 layout.

Byte layout (big-endian, as Kafka's ``ProducerStateManager.writeSnapshot`` writes it)::

    version int16 (= 1) | crc uint32 (CRC32C of every byte after this field) | count int32
    count x (producer_id int64 | producer_epoch int16 | last_sequence int32 | last_offset int64 |
             offset_delta int32 | timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64)

Invariants:

* A snapshot named ``N.snapshot`` describes the producers of the log's offsets below ``N`` (the state
  after appending everything before ``N``); ``N`` is a segment base offset (taken at roll) or the log end
  offset (taken at clean shutdown).
* Only the *last* batch of each producer is stored (Kafka's format): after loading a snapshot, duplicates
  are detected only for that batch plus whatever batches are replayed from the log after ``N``.
* Files are written by temp file + fsync + rename (:func:`~tidelog.storage.checkpoint.atomic_write`);
  a file whose CRC, version or length is wrong raises :class:`CorruptSnapshotError` and is never half-used.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

from tidelog.storage import layout
from tidelog.storage.errors import StorageError

__all__ = [
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_file",
    "snapshot_offsets",
]

SNAPSHOT_VERSION: Final = 1

_HEADER: Final = struct.Struct(">hI")
_COUNT: Final = struct.Struct(">i")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
_CRC_END: Final = _HEADER.size


class CorruptSnapshotError(StorageError):
    """A ``.snapshot`` file that is truncated, of an unknown version, or fails its CRC32C."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer in a snapshot: its epoch and its last batch (offsets absolute, -1 when none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def encode_snapshot(entries: Sequence[SnapshotEntry]) -> bytes:
    body = bytearray(_COUNT.pack(len(entries)))
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes is shorter than its header")
    version, crc = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot version {version} is not {SNAPSHOT_VERSION}")
    body = memoryview(data)[_CRC_END:]
    actual = crc32c.crc32c(body)
    if actual != crc:
        raise CorruptSnapshotError(f"producer snapshot CRC32C {actual:#010x} does not match {crc:#010x}")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"producer snapshot with {count} entries has {len(body)} body bytes")
    return [SnapshotEntry(*_ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size)) for i in range(count)]


def snapshot_file(directory: Path, offset: int) -> Path:
    """``<dir>/00000000000000000042.snapshot`` for offset 42."""
    return directory / layout.file_name(offset, layout.PRODUCER_SNAPSHOT_FILE_SUFFIX)


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the ``.snapshot`` files in ``directory``, ascending (temp and other files ignored)."""
    offsets: list[int] = []
    try:
        names = [path.name for path in directory.iterdir()]
    except FileNotFoundError:
        return offsets
    for name in names:
        offset = layout.offset_from_file_name(name)
        if offset is not None and name == layout.file_name(offset, layout.PRODUCER_SNAPSHOT_FILE_SUFFIX):
            offsets.append(offset)
    return sorted(offsets)
