"""Share fetches' admission, read ahead: what the next batches of a share-partition need before they join its
window (delivery times still ahead, ranges no consumer is to get, the batches' last offsets), worked out
between a member's fetches instead of during the next one.

A share consumer (librdkafka's ``ShareConsumer``) sends its next ShareFetch only once it has processed the
records of the last one, so the broker time of each fetch is on the consumer's critical path, and reading
the next batches into memory and scanning them for delivery-time headers was the largest part of it. After a
fetch that took records new to the window, the runtime reads and scans the batches that follow
(:class:`ReadAhead`) once the answer is on its way; the next fetch sends that read's file regions if it
would read exactly the same (:meth:`ReadAhead.same_read`), and uses the scan
(:meth:`Admission.covering`) if its read starts there and goes no further.

Invariants:

- An :class:`Admission` is used only by a read that starts at its ``first`` (the share-partition's end
  offset: records never in the window, every batch of the read new) and whose batches are among its own
  (``next_offset`` and ``upto`` no higher). It answers what :func:`admission` of that read would: records
  below the high watermark do not change, and a delivery time already passed at the scan has passed at the
  fetch (delays are filtered against the fetch's time by the share-partition).
- A read is reused only with the same start, byte and offset bounds at the same fetchable end (the high
  watermark): below it the log does not change, so the read would return the same batches.
- read_committed groups are never scanned ahead: what they skip depends on the aborted transactions known
  at the fetch's last stable offset.
- No clock and no I/O here: the caller reads the bytes and gives ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.coordinator.share.acquire_mode import batch_last_offsets
from tidelog.coordinator.share.delivery_time import deliver_at
from tidelog.protocol.compression import Compression
from tidelog.protocol.records_codec import decode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD, RECORD_BATCH_HEADER_SIZE, read_batch_header
from tidelog.storage.fetch_data import FetchDataInfo

__all__ = ["Admission", "ReadAhead", "admission", "scan"]

OffsetRanges = list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Admission:
    """:func:`admission` of the batches read from ``first`` to ``next_offset`` (records below ``upto``)."""

    first: int
    next_offset: int
    upto: int
    delays: OffsetRanges
    skip: OffsetRanges
    batch_ends: list[int]

    def covering(
        self, first: int, next_offset: int, upto: int
    ) -> tuple[OffsetRanges, OffsetRanges, list[int]] | None:
        """``(delays, skip, batch_ends)`` for a read from ``first`` to ``next_offset`` admitting the records
        below ``upto``; None unless this scan covers it (same start, no further)."""
        if first != self.first or next_offset > self.next_offset or upto > self.upto:
            return None
        if upto == self.upto:
            return self.delays, self.skip, self.batch_ends
        delays = [(offset, due) for offset, due in self.delays if offset < upto]
        skip = [(f, min(last, upto - 1)) for f, last in self.skip if f < upto]
        return delays, skip, self.batch_ends


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """A share-partition's next batches, read (``data``) and scanned (``admission``) after a fetch: a read
    from ``data.fetch_offset`` of at most ``max_bytes``, below ``max_offset`` and the fetchable ``end``."""

    end: int
    max_bytes: int
    max_offset: int
    data: FetchDataInfo
    admission: Admission

    def same_read(self, first: int, end: int, max_bytes: int, max_offset: int) -> bool:
        """Whether a read with these bounds (and ``min_one_batch``) would return ``data``: the same bounds at
        the same fetchable end (the log below it does not change)."""
        return (first, end, max_bytes, max_offset) == (
            self.admission.first,
            self.end,
            self.max_bytes,
            self.max_offset,
        )


def scan(data: bytes, first: int, next_offset: int, upto: int, now_ms: int) -> Admission:
    """The admission of ``data`` (whole batches read from ``first`` to ``next_offset``) for a
    read_uncommitted group, at ``now_ms``."""
    delays, skip = admission(data, first, upto, now_ms, [])
    return Admission(first, next_offset, upto, delays, skip, batch_last_offsets(data))


def admission(
    data: bytes, first: int, upto: int, now_ms: int, aborted: list[tuple[int, int]]
) -> tuple[OffsetRanges, OffsetRanges]:
    """What the records in ``data`` (whole batches) at ``first`` .. ``upto - 1`` need before they join a
    share-partition's window: ``(offset, deliver_at_ms)`` of those carrying a delivery time still ahead
    (see :mod:`tidelog.coordinator.share.delivery_time`), and the offset ranges no consumer is to get:
    transaction markers, and the batches of ``aborted`` transactions (``(producer_id, first_offset)``,
    given under read_committed; Kafka's consumer-side rule: from the first offset to the ABORT marker)."""
    delays: OffsetRanges = []
    skip: OffsetRanges = []
    starts = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    pos = 0
    while pos + RECORD_BATCH_HEADER_SIZE <= len(data):
        header = read_batch_header(data, pos)
        size = header.batch_length + LOG_OVERHEAD
        base, last = header.base_offset, header.base_offset + header.last_offset_delta
        while starts and starts[0][1] <= last:
            active.add(starts.pop(0)[0])
        wanted = last >= first and base < upto
        if header.is_control:
            active.discard(header.producer_id)
            if wanted:
                skip.append((max(base, first), min(last, upto - 1)))
        elif header.is_transactional and header.producer_id in active:
            if wanted:
                skip.append((max(base, first), min(last, upto - 1)))
        elif wanted and _may_carry_delivery_time(data, pos, size, header.compression):
            _, records = decode_batch(data, pos)
            for record in records:
                if first <= record.offset < upto and record.headers:
                    due = deliver_at(record.headers, record.timestamp)
                    if due is not None and due > now_ms:
                        delays.append((record.offset, due))
        pos += size
    return delays, skip


_DELIVERY_MARKER = b"tidelog.deliver."
"""The bytes both delivery-time header keys start with (see :mod:`tidelog.coordinator.share.delivery_time`)."""


def _may_carry_delivery_time(data: bytes, pos: int, size: int, compression: Compression) -> bool:
    """False when no record of the batch at ``pos`` can carry a delivery-time header: record header keys
    are stored as their UTF-8 bytes, so a records section without the marker has none. One C-speed scan
    of the batch instead of a per-record decode (the share fetch hot path: most batches carry no delay)."""
    if compression != Compression.NONE:
        return True  # the marker is only visible after decompression: decode as before
    return data.find(_DELIVERY_MARKER, pos + RECORD_BATCH_HEADER_SIZE, pos + size) >= 0
