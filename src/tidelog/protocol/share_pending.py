"""tidelog's pending-records extension of DescribeShareGroupOffsets (90): Redis's XPENDING for share groups.

A request group carrying the tagged field :data:`PENDING_TAG` (any value) asks for the acquired records of
each share-partition; each response partition then carries :data:`PENDING_TAG` holding
:func:`encode_pending` of its acquired ranges (member, offsets, delivery count, time left on the lock).
Tagged fields are the protocol's room for exactly this: Kafka's clients skip a tag they do not know, and a
broker that does not know it answers without it. The tag is far above any Kafka assigns.

Layout of the value: int32 count, then per range: int16 length + UTF-8 member id, int64 first offset,
int64 last offset, int32 delivery count, int64 lock milliseconds left.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["PENDING_TAG", "PendingRange", "decode_pending", "encode_pending"]

PENDING_TAG = 0x7469
"""tidelog's private tag (``ti``) on DescribeShareGroupOffsets groups (asking) and partitions (answering)."""

_RANGE = struct.Struct(">qqiq")
_COUNT = struct.Struct(">i")
_LEN = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class PendingRange:
    member_id: str
    first_offset: int
    last_offset: int
    delivery_count: int
    lock_remaining_ms: int


def encode_pending(ranges: list[PendingRange]) -> bytes:
    out = [_COUNT.pack(len(ranges))]
    for r in ranges:
        member = r.member_id.encode("utf-8")
        out.append(_LEN.pack(len(member)) + member)
        out.append(_RANGE.pack(r.first_offset, r.last_offset, r.delivery_count, r.lock_remaining_ms))
    return b"".join(out)


def decode_pending(data: bytes) -> list[PendingRange]:
    """The ranges in ``data``; ValueError when it is not :func:`encode_pending`'s layout."""
    try:
        (count,) = _COUNT.unpack_from(data, 0)
        pos = _COUNT.size
        ranges = []
        for _ in range(count):
            (n,) = _LEN.unpack_from(data, pos)
            member = data[pos + 2 : pos + 2 + n].decode("utf-8")
            pos += 2 + n
            first, last, count_, left = _RANGE.unpack_from(data, pos)
            pos += _RANGE.size
            ranges.append(PendingRange(member, first, last, count_, left))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a pending-records value: {exc}") from None
    if pos != len(data):
        raise ValueError("not a pending-records value: trailing bytes")
    return ranges
