"""KIP-1206's ``share.acquire.mode``: where a share fetch's record limit ends.

``batch_optimized`` (Kafka's default) treats a fetch's MaxRecords as soft: the share-partition acquires on
to the end of the record batch holding the last record the limit allows, so a producer batch is acquired
(and sent, and decoded by the client) once rather than split over fetches. ``record_limit`` acquires at
most MaxRecords. :func:`batch_last_offsets` gives :meth:`SharePartition.acquire
<tidelog.coordinator.share.share_partition.SharePartition.acquire>` the batch boundaries it rounds to.

Invariant: the offsets returned are the batches' last offsets in the order of ``data``, which holds whole
batches in offset order (a log read), so they ascend. Pure: reads only the 61-byte batch headers.
"""

from __future__ import annotations

from tidelog.protocol.records_header import LOG_OVERHEAD, RECORD_BATCH_HEADER_SIZE, read_batch_header

__all__ = ["batch_last_offsets"]


def batch_last_offsets(data: bytes) -> list[int]:
    """The last offset of each whole record batch in ``data``."""
    ends: list[int] = []
    pos = 0
    while pos + RECORD_BATCH_HEADER_SIZE <= len(data):
        header = read_batch_header(data, pos)
        ends.append(header.base_offset + header.last_offset_delta)
        pos += header.batch_length + LOG_OVERHEAD
    return ends
