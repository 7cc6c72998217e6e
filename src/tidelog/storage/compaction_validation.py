"""What a compacted topic refuses at produce time: records without a key (Kafka's ``LogValidator``).

Invariant: only called for logs whose ``cleanup.policy`` has ``compact`` (it decodes every record, which
the produce path of other topics never does); a payload with a keyless record is refused whole, with
``INVALID_RECORD``, before anything is written. Decoding is bounded: a compressed batch inflating past
:func:`~tidelog.protocol.records.uncompressed_batch_limit` of the log's ``max.message.bytes`` (a
decompression bomb) is refused with ``CORRUPT_MESSAGE`` having held no more than that limit.
"""

from __future__ import annotations

from tidelog.protocol.records import (
    InvalidRecordError,
    decode_batch,
    iter_batch_headers,
    uncompressed_batch_limit,
)

__all__ = ["require_record_keys"]


def require_record_keys(
    records: bytes | bytearray | memoryview, topic_partition: str, *, max_message_bytes: int
) -> None:
    """Raise :class:`InvalidRecordError` (INVALID_RECORD) if a record of the (validated) batches in
    ``records`` has no key; :class:`CorruptRecordError` if a batch inflates past the bound."""
    limit = uncompressed_batch_limit(max_message_bytes)
    for position, header in iter_batch_headers(records):
        if header.is_control:
            continue
        for record in decode_batch(records, position, max_uncompressed_bytes=limit)[1]:
            if record.key is None:
                raise InvalidRecordError(
                    f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
                )
