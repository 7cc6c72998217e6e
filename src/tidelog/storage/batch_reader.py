"""Reading the record batches of a log file window by window (Kafka's ``FileLogInputStream``): the one scan
that the segment (lookups, index rebuilds, recovery) and the log cleaner (transaction scan, offset map,
cleaning) share.

A :class:`BatchScan` reads ``[start, end)`` of a file through a ``read(nbytes, position)`` callable (an
``os.pread`` bound to a descriptor: the caller decides which file, and may count or throttle each read) in
windows of ``window_bytes``, and yields ``(position, header, data)`` for each whole batch: its position in
the file, its header (the protocol's codec, :func:`~tidelog.protocol.records.read_batch_header`) and, when
asked for, its bytes.

Invariants:

* Batches, never records: nothing here decodes a record. ``data`` is a view of the window (no copy) or, for
  a batch larger than a window, the bytes of one read of exactly that batch; it is valid until the next
  item. It is ``None`` unless ``with_data`` asks for it (always, or for the batches a predicate picks).
  Without data, a batch's payload is skipped, never read, when it reaches past the window.
* Every read is one call of ``read``, of at most ``window_bytes`` (a window, refilled at the batch that
  does not fit) or exactly one batch; a window never reaches past ``end``.
* A batch is checked in Kafka's order: fewer than a header's 61 bytes left, or a file that ends before
  ``end``, is a *torn tail*; a ``batch_length`` below the header's is *damage*; a batch running past
  ``end`` is a torn tail; a bad magic (or with ``validate``, anything
  :func:`~tidelog.protocol.records.validate_batch` refuses: CRC32C, counts, timestamps) is damage.
  Each of the two either ends the scan quietly or raises :class:`LogCorruptionError` naming the file and
  position, as the caller chooses. Either way, :attr:`BatchScan.position` is then where the whole batches
  read end, and :attr:`BatchScan.stop_reason` says why the scan ended early (None: it reached ``end``).
* Pure apart from ``read``: no clock, no state shared between scans.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Final

from tidelog.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER_SIZE,
    CorruptRecordError,
    RecordBatchHeader,
    RecordError,
    read_batch_header,
    validate_batch,
)
from tidelog.protocol.records_header import BATCH_LENGTH_OFFSET
from tidelog.storage.errors import LogCorruptionError

__all__ = ["BatchScan", "ReadAt", "ScannedBatch"]

ReadAt = Callable[[int, int], bytes]
"""``read(nbytes, position)``: up to ``nbytes`` bytes of the file from ``position`` (``os.pread``)."""

ScannedBatch = tuple[int, RecordBatchHeader, memoryview | None]
"""``(position, header, data)`` of one whole batch."""

_MIN_BATCH_LENGTH: Final = RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD
_BATCH_LENGTH: Final = struct.Struct(">i")


class BatchScan:
    """One scan of the batches of ``[start, end)``; iterate it once (module docstring).

    ``with_data``: whether each batch comes with its bytes (True), none does (False), or those for which
    the predicate, given the header, says so. ``validate``: check every batch whole (implies its bytes).
    ``raise_on_damage`` / ``raise_on_torn_tail``: raise :class:`LogCorruptionError` instead of ending
    quietly.
    """

    __slots__ = (
        "_raise_on_damage",
        "_raise_on_torn_tail",
        "_read",
        "_validate",
        "_window_bytes",
        "_with_data",
        "end",
        "name",
        "position",
        "start",
        "stop_reason",
    )

    def __init__(
        self,
        read: ReadAt,
        *,
        name: str,
        start: int,
        end: int,
        window_bytes: int,
        with_data: bool | Callable[[RecordBatchHeader], bool] = False,
        validate: bool = False,
        raise_on_damage: bool = True,
        raise_on_torn_tail: bool = False,
    ) -> None:
        if window_bytes < RECORD_BATCH_HEADER_SIZE:
            raise ValueError(f"a window of {window_bytes} bytes cannot hold a batch header")
        self._read = read
        self.name = name
        self.start = start
        self.end = end
        self._window_bytes = window_bytes
        self._with_data = with_data
        self._validate = validate
        self._raise_on_damage = raise_on_damage
        self._raise_on_torn_tail = raise_on_torn_tail
        self.position = start
        """Where the whole batches yielded so far end (the next batch's position)."""
        self.stop_reason: str | None = None
        """Why the scan ended before ``end`` (damage or a torn tail), None if it did not."""

    def __repr__(self) -> str:
        return f"BatchScan({self.name}, [{self.start}, {self.end}), at {self.position})"

    def __iter__(self) -> Iterator[ScannedBatch]:
        return self._batches()

    def _stop(self, position: int, reason: str, *, damage: bool) -> None:
        """End the scan at ``position``: record why, and raise if the caller asked for that."""
        self.stop_reason = reason
        if self._raise_on_damage if damage else self._raise_on_torn_tail:
            raise LogCorruptionError(f"{self.name} at {position}: {reason}")

    def _batches(self) -> Iterator[ScannedBatch]:
        read = self._read
        end = self.end
        window_bytes = self._window_bytes
        validate = self._validate
        every_data = validate or self._with_data is True
        pick = self._with_data if callable(self._with_data) else None
        window = memoryview(b"")
        window_start = position = self.start
        while position < end:
            remaining = end - position
            offset = position - window_start
            if offset + RECORD_BATCH_HEADER_SIZE > len(window):  # windows never reach past ``end``
                if remaining < RECORD_BATCH_HEADER_SIZE:
                    self._stop(position, f"{remaining} bytes left, fewer than a batch header", damage=False)
                    return
                window = memoryview(read(min(window_bytes, remaining), position))
                window_start, offset = position, 0
                if len(window) < RECORD_BATCH_HEADER_SIZE:
                    self._stop(position, f"the file ends {len(window)} bytes on, before {end}", damage=False)
                    return
            bad_magic = ""
            header: RecordBatchHeader | None
            try:
                header = read_batch_header(window, offset)
                batch_length = header.batch_length
            except CorruptRecordError as exc:  # checked after the length and the bound, as Kafka does
                header, bad_magic = None, str(exc)
                (batch_length,) = _BATCH_LENGTH.unpack_from(window, offset + BATCH_LENGTH_OFFSET)
            if batch_length < _MIN_BATCH_LENGTH:
                self._stop(position, f"batch_length {batch_length}", damage=True)
                return
            size = batch_length + LOG_OVERHEAD
            if size > remaining:
                self._stop(position, f"a batch of {size} bytes with {remaining} bytes left", damage=False)
                return
            if header is None:
                self._stop(position, bad_magic, damage=True)
                return
            data: memoryview | None = None
            if every_data or (pick is not None and pick(header)):
                if offset + size <= len(window):
                    data = window[offset : offset + size]
                elif size <= window_bytes:
                    window = memoryview(read(min(window_bytes, remaining), position))
                    window_start = position
                    data = window[:size]
                else:
                    data = memoryview(read(size, position))
                if len(data) < size:
                    self._stop(position, f"the file ends before the batch's {size} bytes", damage=False)
                    return
                if validate:
                    try:
                        header = validate_batch(data)
                    except RecordError as exc:
                        self._stop(position, str(exc), damage=True)
                        return
            yield position, header, data
            position += size
            self.position = position
