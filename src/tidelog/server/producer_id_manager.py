"""Producer ids unique across broker restarts (Kafka's ``ProducerIdManager``): blocks of ids reserved durably.

The reserved block lives in ``<first log dir>/producer-id-block`` as Kafka's ZooKeeper node
``/latest_producer_id_block`` holds it, plus a CRC32C of the rest of the record (format version 2):
``{"version":2,"broker":<node id>,"block_start":"<first>","block_end":"<last>","crc32c":<checksum>}``.
A version-1 file (written before, no checksum) is still read, and the next block is written as version 2.

Invariants:

* An id is handed out only from a block whose end is already on disk (temp file, fsync, rename, fsync of
  the directory) *before* the first id of the block is returned; so after any crash or restart the next
  block starts above every id ever handed out, and ids never repeat.
* Ids increase strictly within a process; blocks are ``block_size`` ids (Kafka's 1000) and contiguous,
  except after a jump over the floor (below).
* A file that cannot be read whole (not UTF-8 or JSON, a field missing, not a range, an unknown format
  version, a checksum that does not match) raises :class:`ProducerIdBlockError` naming the file, which
  stops the broker: the file is replaced atomically, so it was damaged on disk, and a damaged end could
  hand out ids again, which breaks idempotence (a new producer would inherit another's epoch and
  sequences). The checksum is what catches a flipped digit that lowers the end but leaves it above the
  floor (below), which the floor alone cannot tell from a good end. A file with a ``crc32c`` field is
  checked whatever its version says, so a digit flipped in the version cannot skip the check either.
* **The floor.** Kafka's controller keeps blocks monotonic; here one file does, and a file that was lost,
  damaged so that its end went down, or restored from an old copy would hand out ids again: a new producer
  would inherit another's epoch and sequences (its batches refused or dropped as duplicates) or fence it.
  So no id at or below the *floor*, the highest producer id the broker can see in use, is handed out.
  The broker raises it (:meth:`ProducerIdManager.raise_floor`, sources in :mod:`.producer_id_floor`):

  - at start-up, after every partition log is loaded and before the listener binds, with every partition
    log's producer state (stray logs included);
  - with each ``__transaction_state`` partition's transactional ids (their producer id and previous
    one) once the transaction coordinator has loaded it. Those partitions load in the background after the
    listener binds, so the transaction runtime :meth:`~ProducerIdManager.hold`\\ s each one before any
    request is read and :meth:`~ProducerIdManager.release`\\ s it with its ids when its load ends; while a
    hold is open no id is handed out (:class:`ProducerIdsNotReadyError`, which InitProducerId answers with
    the retriable COORDINATOR_LOAD_IN_PROGRESS). A load that fails releases with the ids it replayed.

  When the reserved end is below the floor, a warning names the file and a block starting ``block_size``
  ids above the floor (``[floor + block_size + 1, floor + 2 * block_size]``) is written at once, before
  any id is handed out. The skipped ids are a margin for what no log shows: ids handed out to idempotent
  producers that had not written yet. That margin is the limit of the guarantee: more than ``block_size``
  such producers, producers whose state expired (``producer.id.expiration.ms``) and expired transactional
  ids are not seen. A damaged end still above the floor is caught by the checksum (not in a version-1
  file); an intact old copy (restored from a backup) is not, and only the floor protects against it.
* Not thread-safe; the broker calls it from its event loop only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Final, Protocol

from tidelog.server.json_checksum import json_crc32c
from tidelog.storage.checkpoint import atomic_write

__all__ = [
    "PRODUCER_ID_BLOCK_FILE",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdBlockError",
    "ProducerIdManager",
    "ProducerIds",
    "ProducerIdsNotReadyError",
]

log = logging.getLogger("tidelog.producer_id")

PRODUCER_ID_BLOCK_FILE: Final = "producer-id-block"
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_MAX_PRODUCER_ID: Final = 2**63 - 1
_FORMAT_VERSION: Final = 2
_FORMAT_VERSIONS: Final = (1, 2)
"""Version 1 has no checksum."""


class ProducerIdBlockError(RuntimeError):
    """The producer id block file is unreadable or damaged (checksum), or the id space is exhausted."""


def _checksum(record: dict[str, object]) -> int:
    """CRC32C of the record without its ``crc32c`` field: the same written and read back."""
    return json_crc32c({key: value for key, value in record.items() if key != "crc32c"})


class ProducerIdsNotReadyError(OSError):
    """No id can be handed out yet: a source of the floor is still loading. An ``OSError`` because every
    caller already answers "cannot reserve ids" with the retriable COORDINATOR_LOAD_IN_PROGRESS."""


class ProducerIds(Protocol):
    """What hands out producer ids: this file-backed manager on a single node, ZooKeeper's blocks in a
    cluster (:class:`~tidelog.server.cluster.zk_producer_ids.ZkProducerIdManager`)."""

    @property
    def holds(self) -> frozenset[str]: ...

    def generate_producer_id(self) -> int: ...

    def raise_floor(self, in_use: int, where: str) -> bool: ...

    def hold(self, key: str) -> None: ...

    def release(self, key: str, in_use: int, where: str) -> None: ...


class ProducerIdManager:
    """Hands out producer ids from durably reserved blocks, above the floor of ids seen in use."""

    def __init__(self, path: Path, *, node_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block size {block_size} must be positive")
        self._path = path
        self._node_id = node_id
        self._block_size = block_size
        self._reserved_end = self._read_block_end()
        """No id up to this one is handed out again: the last block on disk (-1: none), or a jump's margin."""
        self._next = self._reserved_end + 1
        self._block_end = self._reserved_end
        """Ids in ``[_next, _block_end]`` may be handed out without touching the disk."""
        self._holds: set[str] = set()
        self._held_floor = (-1, "")
        """The highest id in use (and where) released while other holds were still open."""

    @property
    def path(self) -> Path:
        return self._path

    @property
    def holds(self) -> frozenset[str]:
        return frozenset(self._holds)

    def _read_block_end(self) -> int:
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        except (OSError, UnicodeDecodeError) as exc:
            raise ProducerIdBlockError(f"cannot read the producer id block in {self._path}: {exc}") from exc
        try:
            data = json.loads(text)
            version = data["version"]
            if version not in _FORMAT_VERSIONS:
                raise ValueError(f"unsupported format version {version!r}")
            if version >= 2 or "crc32c" in data:
                stored, actual = data["crc32c"], _checksum(data)
                if stored != actual:
                    raise ProducerIdBlockError(
                        f"the producer id block in {self._path} is damaged: CRC32C {actual} of its content,"
                        f" {stored} stored; it is replaced atomically, so it was damaged on disk, and its end"
                        " cannot be trusted (reusing producer ids would break idempotence)"
                    )
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
        record: dict[str, object] = {
            "version": _FORMAT_VERSION,
            "broker": self._node_id,
            "block_start": str(start),
            "block_end": str(end),
        }
        record["crc32c"] = _checksum(record)
        atomic_write(self._path, json.dumps(record).encode())
        self._reserved_end = end
        self._next, self._block_end = start, end

    def raise_floor(self, in_use: int, where: str) -> bool:
        """Never hand out ``in_use`` (an id seen in use, in ``where``) or any id below it. If an id not above
        it could still be handed out, warn and write a block starting ``block_size`` ids above it (raises
        ``OSError`` if the write fails: the next :meth:`generate_producer_id` writes that block then).
        Returns whether the ids jumped."""
        if in_use < self._next:
            return False
        reserved = self._reserved_end
        self._reserved_end = in_use + self._block_size
        self._next, self._block_end = self._reserved_end + 1, self._reserved_end
        log.warning(
            "producer id %d is in use (%s) but the producer id block in %s %s: the file was lost, damaged or"
            " restored from an old copy; producer ids go on from %d (%d ids above the one in use are skipped"
            " for producers that were given ids and have not written yet)",
            in_use,
            where,
            self._path,
            "is missing" if reserved < 0 else f"ends at {reserved}",
            self._next,
            self._block_size,
        )
        self._reserve_block()
        return True

    def hold(self, key: str) -> None:
        """Hand out no id until :meth:`release` of ``key``: a source of ids in use (``key`` names it) is
        still loading."""
        self._holds.add(key)

    def release(self, key: str, in_use: int, where: str) -> None:
        """The source ``key`` is loaded and ``in_use`` (in ``where``) is its highest id in use (-1: none).
        The floor is raised once the last hold is released (a key not held raises it at once)."""
        if key not in self._holds:
            self.raise_floor(in_use, where)
            return
        self._holds.discard(key)
        if in_use > self._held_floor[0]:
            self._held_floor = (in_use, where)
        if not self._holds:
            (in_use, where), self._held_floor = self._held_floor, (-1, "")
            self.raise_floor(in_use, where)

    def generate_producer_id(self) -> int:
        """A producer id never handed out before (by this broker, in any of its lives) and above every id
        seen in use; raises :class:`ProducerIdsNotReadyError` while a hold is open."""
        if self._holds:
            raise ProducerIdsNotReadyError(f"producer ids wait for {min(self._holds)} to load")
        if self._next > self._block_end:
            self._reserve_block()
        producer_id = self._next
        self._next += 1
        return producer_id
