"""The checks and rewrites an append's batches get before they reach a segment (Kafka's ``LogValidator`` and
``UnifiedLog.analyzeAndValidateRecords``).

The batches were validated one by one already (``records.validate_batches``: CRC32C, sizes, counts); what
is checked here depends on the log: that the payload is whole batches, the timestamps against the
broker's time, the offsets a follower brings against the log end. A leader's batches then get their
offsets, leader epoch and LogAppendTime.

Invariants:

* Batches, not records: a rewrite touches the 61-byte headers in the append's own buffer (base offset and
  partition leader epoch lie outside the CRC32C; LogAppendTime recomputes it); nothing is copied. The
  only records decoded are the first of each control batch (its COMMIT/ABORT marker).
* Every check raises before anything is written, with the typed error Kafka answers for it.
* Pure: no I/O; time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.protocol.records import (
    LOG_OVERHEAD,
    InvalidTimestampError,
    RecordBatchHeader,
    RecordError,
    assign_offsets,
    decode_batch,
    decode_control_record,
    iter_batch_headers,
    read_batch_header,
    set_log_append_time,
    validate_batch,
)
from tidelog.protocol.records_header import TIMESTAMP_TYPE_BIT
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import UnexpectedAppendOffsetError
from tidelog.storage.producer_state import EndTxnMarker

__all__ = [
    "Batches",
    "assign_offsets_and_epoch",
    "check_assigned_offsets",
    "check_follower_offsets",
    "check_timestamps",
    "end_txn_markers",
    "positioned",
    "validate_whole",
    "whole_batches",
]

Batches = list[tuple[int, RecordBatchHeader]]
"""``(position, header)`` of each batch of an append, in order."""


def whole_batches(buf: bytearray | memoryview) -> Batches:
    """The batches of ``buf``; :class:`UnexpectedAppendOffsetError` unless it is one or more whole batches."""
    batches = list(iter_batch_headers(buf))
    consumed = batches[-1][0] + batches[-1][1].size_in_bytes if batches else 0
    if not batches or consumed != len(buf):
        raise UnexpectedAppendOffsetError(f"append of {len(buf)} bytes is not a sequence of whole batches")
    return batches


def positioned(headers: Sequence[RecordBatchHeader]) -> Batches:
    """``(position, header)`` of consecutive batches starting at 0 (the headers ``records.validate_batches``
    returned for a buffer it found to be exactly these batches)."""
    batches = []
    position = 0
    for header in headers:
        batches.append((position, header))
        position += header.batch_length + LOG_OVERHEAD
    return batches


def check_timestamps(
    config: LogConfig, batches: Sequence[tuple[int, RecordBatchHeader]], now_ms: int
) -> None:
    """Kafka's ``message.timestamp.before.max.ms`` / ``after.max.ms`` for create-time topics
    (:class:`InvalidTimestampError`)."""
    if config.log_append_time:
        return
    for _, header in batches:
        if header.attributes & TIMESTAMP_TYPE_BIT:  # LogAppendTime (``timestamp_type``, without the enum)
            continue
        low = header.base_timestamp if header.base_timestamp >= 0 else header.max_timestamp
        if 0 <= low < now_ms - config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"timestamp {low} is more than message.timestamp.before.max.ms="
                f"{config.message_timestamp_before_max_ms} before the broker's time {now_ms}"
            )
        if header.max_timestamp > now_ms + config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} is more than message.timestamp.after.max.ms="
                f"{config.message_timestamp_after_max_ms} after the broker's time {now_ms}"
            )


def assign_offsets_and_epoch(
    buf: bytearray | memoryview,
    batches: Sequence[tuple[int, RecordBatchHeader]],
    *,
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> Batches:
    """A leader's rewrite: consecutive offsets from ``first_offset``, ``leader_epoch`` as every batch's
    partition leader epoch and, with ``log_append_time_ms``, LogAppendTime. Returns the headers of the
    rewritten batches.

    The headers of ``batches`` are this append's own (parsed from ``buf`` for it): without LogAppendTime
    they are updated in place with the two fields rewritten (base offset, partition leader epoch), so they
    go on describing ``buf`` without being parsed again; with it (attributes, max timestamp and CRC change
    too) they are read again from the rewritten bytes."""
    next_offset = first_offset
    if log_append_time_ms is None:
        for position, header in batches:
            assign_offsets(buf, position, next_offset, leader_epoch)
            header.base_offset = next_offset
            header.partition_leader_epoch = leader_epoch
            next_offset += header.last_offset_delta + 1
        return list(batches)
    for position, header in batches:
        assign_offsets(buf, position, next_offset, leader_epoch)
        set_log_append_time(buf, position, log_append_time_ms)
        next_offset += header.last_offset_delta + 1
    return [(position, read_batch_header(buf, position)) for position, _ in batches]


def check_assigned_offsets(batches: Sequence[tuple[int, RecordBatchHeader]], log_end: int) -> None:
    """Offsets that came with the batches: each batch at or above the end of the one before, the first at
    or above ``log_end`` (:class:`UnexpectedAppendOffsetError`)."""
    expected = log_end
    for _, header in batches:
        if header.base_offset < expected:
            raise UnexpectedAppendOffsetError(
                f"batch base offset {header.base_offset} is below the expected {expected} "
                f"(log end {log_end})",
                first_offset=batches[0][1].base_offset,
                last_offset=batches[-1][1].last_offset,
                log_end_offset=log_end,
            )
        expected = header.next_offset


def check_follower_offsets(
    batches: Sequence[tuple[int, RecordBatchHeader]], log_end: int, *, gaps_allowed: bool
) -> None:
    """A follower's append of the leader's batches (Kafka's ``appendAsFollower``): the first batch starts at
    ``log_end`` (with ``gaps_allowed``, a compacted log, at or above it: the leader's cleaner may have
    removed whole batches after it), and every batch at or above the next offset of the one before
    (:class:`UnexpectedAppendOffsetError`, carrying the append's first and last offsets)."""
    first = batches[0][1].base_offset
    if first < log_end or (first > log_end and not gaps_allowed):
        raise UnexpectedAppendOffsetError(
            f"follower append starts at offset {first}, the log ends at {log_end}",
            first_offset=first,
            last_offset=batches[-1][1].last_offset,
            log_end_offset=log_end,
        )
    check_assigned_offsets(batches, log_end)


def validate_whole(buf: bytearray | memoryview, batches: Sequence[tuple[int, RecordBatchHeader]]) -> None:
    """Check each batch as a whole (length, magic, CRC32C, counts, timestamps: ``validate_batch`` as for a
    batch read back from a log); its :class:`RecordError` otherwise (a corrupt record: Kafka's
    ``CorruptRecordException`` on a follower)."""
    for position, _ in batches:
        validate_batch(buf, position)


def end_txn_markers(
    buf: bytearray | memoryview, batches: Sequence[tuple[int, RecordBatchHeader]]
) -> list[EndTxnMarker | None] | None:
    """The end marker of each control batch (None elsewhere, and for a control batch holding no marker);
    None when there is no control batch."""
    for _, header in batches:  # a loop, not any(genexpr): asked of every produce
        if header.is_control:
            break
    else:
        return None
    markers: list[EndTxnMarker | None] = []
    for position, header in batches:
        marker = None
        if header.is_control and header.records_count > 0:
            _, records = decode_batch(buf, position)
            if records:
                try:
                    marker = EndTxnMarker(*decode_control_record(records[0]))
                except RecordError:
                    marker = None
        markers.append(marker)
    return markers
