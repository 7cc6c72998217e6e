"""What a compacted topic refuses at produce time: records without a key (Kafka's ``LogValidator``).

Invariant: only called for logs whose ``cleanup.policy`` has ``compact`` (it decodes every record, which
the produce path of other topics never does); a payload with a keyless record is refused whole, with
``INVALID_RECORD``, before anything is written.
"""

from __future__ import annotations

from tidelog.protocol.records import (
    InvalidRecordError,
    decode_batch,
    iter_batch_headers,
)

__all__ = ["require_record_keys"]


def require_record_keys(records: bytes | bytearray | memoryview, topic_partition: str) -> None:
    """Raise :class:`InvalidRecordError` (INVALID_RECORD) if a record of the (validated) batches in
    ``records`` has no key."""
    for position, header in iter_batch_headers(records):
        if header.is_control:
            continue
        for record in decode_batch(records, position)[1]:
            if record.key is None:
                raise InvalidRecordError(
                    f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
                )
