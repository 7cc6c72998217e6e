"""The aborted-transaction index of one segment (``<base offset>.txnindex``): Kafka's ``TransactionIndex``.

Byte layout (big-endian, Kafka's ``AbortedTxn``), one 34-byte entry per aborted transaction::

    version int16 (= 0) | producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64

``first_offset`` is the transaction's first offset in the partition, ``last_offset`` the offset of its ABORT
marker, ``last_stable_offset`` the partition's last stable offset when the marker was written (Kafka's
``completeTxn``: the first offset of the oldest transaction of another producer still open then, else
``last_offset + 1``).

Invariants:

* A segment's index holds the transactions whose ABORT *marker* lies in that segment; a transaction may
  start in an earlier one. Entries are in marker order: ``last_offset`` strictly increases.
* The file exists only once an entry was written (Kafka creates it lazily too); :meth:`reset` removes it.
  A torn trailing partial entry is ignored, as Kafka's iterator does.
* The index is derived data: the log rebuilds it from the markers (a replay of the producer state) after
  recovery or truncation, so it is only fsynced with its segment (:meth:`flush`, or off the owner's thread
  through :meth:`open_for_fsync` and :meth:`mark_synced`). Every change to the file counts as a write; the
  index is clean when the writes up to the latest were fsynced.
* Entries are read once and cached; :meth:`release` drops a non-empty cache (the open-segment limiter).
  Not thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.storage.errors import CorruptIndexError, KafkaStorageError

__all__ = ["ABORTED_TXN_SIZE", "AbortedTransaction", "AbortedTxn", "TransactionIndex"]

_ENTRY: Final = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE: Final = _ENTRY.size
"""34 bytes."""
_VERSION: Final = 0


class AbortedTransaction(NamedTuple):
    """What a read_committed fetch answers per aborted transaction (Fetch's ``AbortedTransaction``)."""

    producer_id: int
    first_offset: int


class AbortedTxn(NamedTuple):
    """One entry of the index."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @property
    def aborted_transaction(self) -> AbortedTransaction:
        return AbortedTransaction(self.producer_id, self.first_offset)


class TransactionIndex:
    """The ``.txnindex`` of the segment starting at ``base_offset``."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self._path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._writes = 0
        self._synced_writes = 0

    def __repr__(self) -> str:
        return f"TransactionIndex({self._path.name})"

    @property
    def path(self) -> Path:
        return self._path

    # ---- reading ----------------------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is not None:
            return entries
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            data = b""
        entries = []
        for pos in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != _VERSION:
                raise CorruptIndexError(
                    f"{self._path}: aborted transaction version {version} at position {pos}, expected {_VERSION}"
                )
            entries.append(AbortedTxn(*fields))
        self._entries = entries
        return entries

    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order (a copy)."""
        return list(self._load())

    @property
    def last_offset(self) -> int | None:
        """Marker offset of the last entry, None if there is none."""
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (marker at or after
        the fetch offset, first offset before the upper bound), and whether the search is complete: an entry
        whose last stable offset reaches the upper bound means no later marker can overlap the range."""
        found = []
        for entry in self._load():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self, next_offset: int) -> None:
        """Raise :class:`CorruptIndexError` for an unknown version, markers outside ``[base_offset,
        next_offset)``, markers out of order, a first offset after its marker, or a last stable offset past
        it (Kafka's is the first offset of another transaction still open then, else the marker's + 1)."""
        previous = None
        for entry in self._load():
            if not self.base_offset <= entry.last_offset < next_offset:
                raise CorruptIndexError(
                    f"{self._path}: marker offset {entry.last_offset} of {entry} is outside the segment "
                    f"[{self.base_offset}, {next_offset})"
                )
            if (
                not 0 <= entry.first_offset <= entry.last_offset
                or not 0 <= entry.last_stable_offset <= entry.last_offset + 1
                or (previous is not None and entry.last_offset <= previous)
            ):
                raise CorruptIndexError(f"{self._path}: entry {entry} is out of order")
            previous = entry.last_offset

    # ---- writing ----------------------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry; its marker must follow the last one (``ValueError`` otherwise)."""
        entries = self._load()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self._path}: aborted transaction marker {entry.last_offset} does not follow "
                f"{entries[-1].last_offset}"
            )
        data = entry.encode()
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                # Write after the whole entries: a torn partial entry from a crash is overwritten.
                position = len(entries) * ABORTED_TXN_SIZE
                os.ftruncate(fd, position)
                written = 0
                while written < len(data):
                    written += os.pwrite(fd, data[written:], position + written)
            finally:
                os.close(fd)
        except OSError as exc:
            raise KafkaStorageError(f"write to {self._path} failed: {exc}") from exc
        entries.append(entry)
        self._writes += 1

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``."""
        entries = self._load()
        keep = sum(1 for entry in entries if entry.last_offset < offset)
        if keep == len(entries):
            return
        del entries[keep:]
        if keep == 0:
            self._path.unlink(missing_ok=True)
            return
        with open(self._path, "r+b") as handle:
            handle.truncate(keep * ABORTED_TXN_SIZE)
        self._writes += 1

    def reset(self) -> None:
        """Remove every entry (and the file): the segment is being recovered."""
        self._path.unlink(missing_ok=True)
        self._entries = []
        self._synced_writes = self._writes

    def flush(self) -> None:
        """fsync the file if entries were written since the last flush."""
        if self._writes == self._synced_writes:
            return
        writes = self._writes
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.mark_synced(writes)

    def open_for_fsync(self) -> tuple[int, int] | None:
        """For an fsync on another thread: a new read-only descriptor of the file (the caller closes it) and
        the writes it covers, to pass to :meth:`mark_synced` once fsynced; None if the index is clean."""
        if self._writes == self._synced_writes:
            return None
        writes = self._writes
        try:
            return os.open(self._path, os.O_RDONLY), writes
        except FileNotFoundError:
            self.mark_synced(writes)  # no file (truncated away): nothing to make durable
            return None

    def mark_synced(self, writes: int) -> None:
        """The writes up to ``writes`` (from :meth:`open_for_fsync`) are durable; later ones are not."""
        self._synced_writes = max(self._synced_writes, writes)

    # ---- lifecycle --------------------------------------------------------------------------------

    def release(self) -> None:
        """Forget cached entries (kept when there are none: that costs nothing and spares a stat)."""
        if self._entries:
            self._entries = None

    def rename_to(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(self._path, path)
        self._path = path

    def delete_file(self) -> None:
        self._path.unlink(missing_ok=True)
        self._entries = []
        self._synced_writes = self._writes
