"""Dead-letter copies of a share group's records (KIP-1191): what a copy holds, which dead-letter partition
it goes to, and which copies a crash may already have written.

A record a consumer REJECTs, or one that reaches the delivery-count limit, in a group whose
``errors.deadletterqueue.topic.name`` names a topic, is copied there before it is archived. The copy
carries Kafka's context headers (UTF-8 text): ``__dlq.errors.topic``, ``__dlq.errors.partition``,
``__dlq.errors.offset``, ``__dlq.errors.group``, ``__dlq.errors.delivery.count`` and
``__dlq.errors.message`` (why: :data:`REASON_REJECTED` or :data:`REASON_DELIVERY_LIMIT`). With
``errors.deadletterqueue.copy.record.enable=true`` it also carries the source record's key, value and
headers (before the context headers); otherwise key and value are null, as in Kafka.

Invariants:

- The copies of one source partition all go to one dead-letter partition,
  ``source_partition % dead-letter partitions`` (Kafka's rule), so they are in the order they were written.
- Exactly once across crashes, given the writer's order (see :mod:`tidelog.server.share_dead_letter`):
  ARCHIVING persisted, then the copies appended, then ARCHIVED persisted, with nothing appended to the
  dead-letter partition between the copies and that state write. So after a crash, the copies of the
  records still ARCHIVING that were written are the last records that partition holds for the
  share-partition: :func:`copied_offsets` walks the dead-letter partition's tail back from its end and
  takes the share-partition's copies of pending offsets until it meets one of another offset.

Pure: no I/O, no clock (the copy's timestamp comes in as ``now_ms``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tidelog.protocol.records import Record, SimpleRecord

__all__ = [
    "HEADER_DELIVERY_COUNT",
    "HEADER_GROUP",
    "HEADER_MESSAGE",
    "HEADER_OFFSET",
    "HEADER_PARTITION",
    "HEADER_TOPIC",
    "REASON_DELIVERY_LIMIT",
    "REASON_REJECTED",
    "CopyOrigin",
    "context_headers",
    "copied_offsets",
    "copy_origin",
    "dead_letter_partition",
    "dead_letter_record",
]

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"

REASON_REJECTED = "rejected by a consumer"
REASON_DELIVERY_LIMIT = "delivery count limit reached"

CopyOrigin = tuple[str, str, int, int]
"""(group, topic, partition, offset) of the record a dead-letter copy was made of."""


def dead_letter_partition(source_partition: int, num_partitions: int) -> int:
    """The dead-letter partition the copies of ``source_partition`` go to."""
    return source_partition % max(num_partitions, 1)


def context_headers(
    group_id: str, topic: str, partition: int, offset: int, delivery_count: int, rejected: bool
) -> tuple[tuple[str, bytes], ...]:
    """The headers naming a copy's source, its delivery count and why it was dead-lettered."""
    return (
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(offset).encode()),
        (HEADER_GROUP, group_id.encode()),
        (HEADER_DELIVERY_COUNT, str(delivery_count).encode()),
        (HEADER_MESSAGE, (REASON_REJECTED if rejected else REASON_DELIVERY_LIMIT).encode()),
    )


def dead_letter_record(
    source: Record | None,
    *,
    group_id: str,
    topic: str,
    partition: int,
    offset: int,
    delivery_count: int,
    rejected: bool,
    copy_record: bool,
    now_ms: int,
) -> SimpleRecord:
    """The copy of the record at ``offset`` (``source``: the record as read, None when the log no longer has
    it or the copy is headers only)."""
    context = context_headers(group_id, topic, partition, offset, delivery_count, rejected)
    if not copy_record or source is None:
        return SimpleRecord(key=None, value=None, headers=context, timestamp=now_ms)
    return SimpleRecord(
        key=source.key, value=source.value, headers=(*source.headers, *context), timestamp=now_ms
    )


def copy_origin(record: Record) -> CopyOrigin | None:
    """The source a dead-letter copy names in its context headers (the last of each key: a copy of a copy
    carries both), None for a record that is not a well-formed copy."""
    found = {k: v for k, v in record.headers if k.startswith("__dlq.errors.") and v is not None}
    try:
        return (
            found[HEADER_GROUP].decode(),
            found[HEADER_TOPIC].decode(),
            int(found[HEADER_PARTITION]),
            int(found[HEADER_OFFSET]),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def copied_offsets(
    tail: Iterable[Record], group_id: str, topic: str, partition: int, pending: Sequence[tuple[int, int]]
) -> set[int]:
    """The pending offsets (``(first, last)`` ranges) of (group, topic, partition) whose copies ``tail`` (the
    dead-letter partition's last records, in offset order) already holds: walking back from its end, the
    share-partition's copies of pending offsets up to the first copy of an offset not pending (an earlier,
    completed batch)."""
    mine: list[int] = []
    for record in tail:
        origin = copy_origin(record)
        if origin is not None and origin[:3] == (group_id, topic, partition):
            mine.append(origin[3])
    found: set[int] = set()
    for offset in reversed(mine):
        if not any(first <= offset <= last for first, last in pending):
            break
        found.add(offset)
    return found
