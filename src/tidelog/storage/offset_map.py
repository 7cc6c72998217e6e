"""The cleaner's key -> last offset map of a log's dirty section (Kafka's ``SkimpyOffsetMap``).

Invariants:

* Keys are stored as their 16-byte MD5 digest, as Kafka does: two distinct keys collide with probability
  about 2^-128 per pair, which Kafka accepts as "never".
* The capacity follows Kafka's accounting of ``log.cleaner.dedupe.buffer.size``: 24 bytes a slot (digest
  plus offset), filled to at most ``load_factor`` (Kafka's 0.9) of the slots. The bound is on entries, so a
  cleaning maps exactly the keys Kafka's would; Python's own per-entry overhead is several times 24 bytes.
* :attr:`OffsetMap.latest_offset` only grows (until :meth:`OffsetMap.clear`): every offset at or below it
  in the mapped range has been seen, so a record there whose key maps to a larger offset is obsolete.
* Not thread-safe: one cleaning at a time uses a map.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["DEFAULT_LOAD_FACTOR", "SLOT_BYTES", "OffsetMap"]

SLOT_BYTES: Final = 24
"""Bytes a slot takes in Kafka's accounting: a 16-byte MD5 digest and an 8-byte offset."""
DEFAULT_LOAD_FACTOR: Final = 0.9
"""Kafka's ``log.cleaner.io.buffer.load.factor``."""


def key_digest(key: bytes) -> bytes:
    """The 16 bytes a key is stored as."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Digest of a record key -> offset of the last record with that key seen so far."""

    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.slots = max(memory_bytes // SLOT_BYTES, 1)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def __repr__(self) -> str:
        return f"OffsetMap({len(self)}/{self.max_entries} entries, latest offset {self.latest_offset})"

    def room_for(self, entries: int) -> bool:
        """Whether ``entries`` more keys surely fit (a key already present takes no new slot)."""
        return len(self._offsets) + entries <= self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key_digest(key)] = offset

    def get(self, key: bytes) -> int:
        """The offset mapped for ``key``, -1 if none."""
        return self._offsets.get(key_digest(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    @property
    def utilization(self) -> float:
        """Used fraction of the slots (Kafka's "buffer utilization")."""
        return len(self._offsets) / self.slots

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
