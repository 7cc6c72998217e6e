"""The cleaner's key -> last offset map of a log's dirty section (Kafka's ``SkimpyOffsetMap``).

Invariants:

* Keys are stored as their 16-byte MD5 digest, as Kafka does: two distinct keys collide with probability
  about 2^-128 per pair, which Kafka accepts as "never".
* The map stays within ``log.cleaner.dedupe.buffer.size``: a slot is what one entry really costs in CPython
  (:data:`SLOT_BYTES`: the digest as a bytes object, the offset as an int, the dict's share), and at most
  ``load_factor`` (Kafka's 0.9) of the slots are filled. Kafka packs an entry into 24 bytes, so the same
  setting maps about six times fewer keys per cleaning here; a dirty section with more keys is cleaned in
  several rounds, as in Kafka.
* :attr:`OffsetMap.latest_offset` only grows (until :meth:`OffsetMap.clear`): every offset at or below it
  in the mapped range has been seen, so a record there whose key maps to a larger offset is obsolete.
* Not thread-safe: one cleaning at a time uses a map.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["DEFAULT_LOAD_FACTOR", "SLOT_BYTES", "OffsetMap"]

SLOT_BYTES: Final = 160
"""Memory of one entry in CPython, measured (about 135 bytes: a 16-byte bytes object, an int, the dict's
slot and index) with room for the dict's growth steps."""
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
