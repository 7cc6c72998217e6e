"""Producer ids unique across broker restarts (Kafka's ``ProducerIdManager``): blocks of ids reserved durably.

The reserved block lives in ``<first log dir>/producer-id-block`` as Kafka's ZooKeeper node
``/latest_producer_id_block`` holds it: ``{"version":1,"broker":<node id>,"block_start":"<first>",
"block_end":"<last>"}``.

Invariants:

* An id is handed out only from a block whose end is already on disk (temp file, fsync, rename, fsync of
  the directory) *before* the first id of the block is returned; so after any crash or restart the next
  block starts above every id ever handed out, and ids never repeat.
* Ids increase strictly within a process; blocks are ``block_size`` ids (Kafka's 1000) and contiguous.
* A file that cannot be parsed stops the broker (reusing ids would break other producers' idempotence).
* Not thread-safe; the broker calls it from its event loop only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from tidelog.storage.checkpoint import atomic_write

__all__ = ["PRODUCER_ID_BLOCK_FILE", "PRODUCER_ID_BLOCK_SIZE", "ProducerIdBlockError", "ProducerIdManager"]

PRODUCER_ID_BLOCK_FILE: Final = "producer-id-block"
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_MAX_PRODUCER_ID: Final = 2**63 - 1


class ProducerIdBlockError(RuntimeError):
    """The producer id block file is unreadable, or the id space is exhausted."""


class ProducerIdManager:
    """Hands out producer ids from durably reserved blocks."""

    def __init__(self, path: Path, *, node_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block size {block_size} must be positive")
        self._path = path
        self._node_id = node_id
        self._block_size = block_size
        self._reserved_end = self._read_block_end()
        """Last id of the latest block on disk (-1: none yet)."""
        self._next = self._reserved_end + 1
        self._block_end = self._reserved_end
        """Ids in ``[_next, _block_end]`` may be handed out without touching the disk."""

    @property
    def path(self) -> Path:
        return self._path

    def _read_block_end(self) -> int:
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        except (OSError, UnicodeDecodeError) as exc:
            raise ProducerIdBlockError(f"cannot read the producer id block in {self._path}: {exc}") from exc
        try:
            data = json.loads(text)
            end = int(data["block_end"])
            start = int(data["block_start"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ProducerIdBlockError(f"cannot parse the producer id block in {self._path}: {exc}") from exc
        if not 0 <= start <= end:
            raise ProducerIdBlockError(f"producer id block [{start}, {end}] in {self._path} is not a range")
        return end

    def _reserve_block(self) -> None:
        start = self._reserved_end + 1
        end = start + self._block_size - 1
        if end > _MAX_PRODUCER_ID:
            raise ProducerIdBlockError("the producer id space is exhausted")
        record = {"version": 1, "broker": self._node_id, "block_start": str(start), "block_end": str(end)}
        atomic_write(self._path, json.dumps(record).encode())
        self._reserved_end = end
        self._next, self._block_end = start, end

    def generate_producer_id(self) -> int:
        """A producer id never handed out before (by this broker, in any of its lives)."""
        if self._next > self._block_end:
            self._reserve_block()
        producer_id = self._next
        self._next += 1
        return producer_id
