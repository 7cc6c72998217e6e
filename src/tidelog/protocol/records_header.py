"""The 61-byte header of a magic-v2 record batch, and everything a broker does to a batch without
decoding its records: parse, validate as a whole, assign offsets, stamp the leader epoch, LogAppendTime.

Layout (big-endian; offsets from the batch start)::

    0 base_offset int64 | 8 batch_length int32 | 12 partition_leader_epoch int32 | 16 magic int8
    17 crc uint32 | 21 attributes int16 | 23 last_offset_delta int32 | 27 base_timestamp int64
    35 max_timestamp int64 | 43 producer_id int64 | 51 producer_epoch int16 | 53 base_sequence int32
    57 records_count int32 | 61 records...

Invariants:

* ``batch_length`` counts the bytes after itself, so a batch occupies ``batch_length + LOG_OVERHEAD`` bytes.
* The CRC32C covers bytes ``[21, size)``: base_offset, batch_length, partition_leader_epoch and magic lie
  outside it, which is why :func:`assign_offsets` rewrites them in place without touching the CRC;
  :func:`set_log_append_time` changes covered bytes and so recomputes the CRC.
* Nothing here decompresses or loops over records: one ``struct.unpack_from`` per header, one C-level
  CRC over a memoryview per batch, no copy of the payload.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

import crc32c

from tidelog.protocol.compression import Compression
from tidelog.protocol.records_errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "CRC_OFFSET",
    "DELETE_HORIZON_BIT",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "RECORD_BATCH_HEADER_SIZE",
    "RECORDS_COUNT_OFFSET",
    "RecordBatchHeader",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "TimestampType",
    "assign_offsets",
    "compute_crc",
    "iter_batch_headers",
    "read_batch_header",
    "set_log_append_time",
    "single_batch_producer",
    "validate_batch",
    "validate_batches",
]

Buffer = bytes | bytearray | memoryview

LOG_OVERHEAD: Final = 12
"""base_offset int64 + batch_length int32: the bytes not counted by batch_length."""
RECORD_BATCH_HEADER_SIZE: Final = 61
MAGIC: Final = 2

BASE_OFFSET_OFFSET: Final = 0
BATCH_LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
BASE_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
RECORDS_COUNT_OFFSET: Final = 57

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1

_MIN_BATCH_LENGTH: Final = RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
_MIN_RECORD_BYTES: Final = 7  # length, attributes, ts delta, offset delta, key len, value len, header count
_INT32_MAX: Final = 2**31 - 1

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_LENGTH: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")
assert _HEADER.size == RECORD_BATCH_HEADER_SIZE
_PRODUCER_FIELDS: Final = struct.Struct(">8xi4xb4xh20xqh")
"""batch_length, magic, attributes, producer_id, producer_epoch: the fields :func:`single_batch_producer`
reads."""
assert _PRODUCER_FIELDS.size == PRODUCER_ID_OFFSET + 10


class TimestampType(IntEnum):
    """Attributes bit 3: who set the batch's timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def _increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap from INT32_MAX to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(slots=True)
class RecordBatchHeader:
    """The fixed fields of one batch, as read from the wire (nothing normalised).

    Treat it as a description of the bytes it was read from: the one thing that assigns to it is a
    leader's rewrite of those bytes (``storage.log_validator.assign_offsets_and_epoch``: base offset and
    partition leader epoch, in the append's own headers), so it keeps describing them. Not ``frozen``: a
    frozen dataclass sets each of the 13 fields through ``object.__setattr__``, which made building one
    cost ten times as much, and the produce path reads several headers per request (issue 17)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> Compression:
        """The codec; :class:`UnsupportedCompressionTypeError` for ids 5-7."""
        return Compression.of(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_BIT
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """Whether base_timestamp holds the compaction delete horizon (attributes bit 6)."""
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping past INT32_MAX), or -1 when the batch has none."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return _increment_sequence(self.base_sequence, self.last_offset_delta)


def read_batch_header(buf: Buffer, pos: int = 0) -> RecordBatchHeader:
    """The header of the batch at ``pos``; :class:`CorruptRecordError` if under 61 bytes or magic != 2."""
    if len(buf) - pos < RECORD_BATCH_HEADER_SIZE or pos < 0:
        raise CorruptRecordError(
            f"record batch header at {pos} needs {RECORD_BATCH_HEADER_SIZE} bytes, {len(buf) - pos} available"
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise CorruptRecordError(
            f"record batch at {pos} has magic {fields[3]}, only magic {MAGIC} is supported"
        )
    return RecordBatchHeader(*fields)


def iter_batch_headers(
    buf: Buffer, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, RecordBatchHeader]]:
    """``(position, header)`` of each complete batch in ``buf[pos:end]``, in order.

    Stops silently before an incomplete tail (fewer than 12 bytes, or a batch running past ``end``);
    raises :class:`CorruptRecordError` for a batch_length below the header size or a bad magic.
    Checks no CRC (see :func:`validate_batch`).
    """
    if end is None:
        end = len(buf)
    unpack_length = _LENGTH.unpack_from
    while end - pos >= LOG_OVERHEAD:
        (batch_length,) = unpack_length(buf, pos + BATCH_LENGTH_OFFSET)
        if batch_length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at {pos} has batch_length {batch_length} < minimum {_MIN_BATCH_LENGTH}"
            )
        next_pos = pos + LOG_OVERHEAD + batch_length
        if next_pos > end:
            return
        yield pos, read_batch_header(buf, pos)
        pos = next_pos


def single_batch_producer(buf: Buffer) -> tuple[int, int, int] | None:
    """``(attributes, producer_id, producer_epoch)`` of ``buf`` when it is exactly one whole batch (its
    length field covers the rest of ``buf``, magic 2), else None: what a produce request asks of each
    partition's payload before the append validates it (Kafka's one-batch rule, and whether the batch is a
    transactional producer's), read without building a :class:`RecordBatchHeader` (that is the append's,
    :func:`validate_batches`)."""
    if len(buf) < RECORD_BATCH_HEADER_SIZE:
        return None
    batch_length, magic, attributes, producer_id, producer_epoch = _PRODUCER_FIELDS.unpack_from(buf, 0)
    if batch_length + LOG_OVERHEAD != len(buf) or magic != MAGIC:
        return None
    return attributes, producer_id, producer_epoch


def compute_crc(buf: Buffer, pos: int = 0) -> int:
    """CRC32C of the batch at ``pos`` over attributes..end, as stored in its crc field."""
    (batch_length,) = _LENGTH.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
    view = memoryview(buf)
    return int(crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + batch_length]))


def validate_batch(buf: Buffer, pos: int = 0, *, from_client: bool = False) -> RecordBatchHeader:
    """Check the batch at ``pos`` as a whole, without decoding records; return its header.

    Always: length within bounds (>= 49, inside ``buf``) and magic 2 (else ``CorruptRecordError``), CRC32C
    (``CorruptRecordError``), compression id known (``UnsupportedCompressionTypeError``),
    0 <= records_count <= last_offset_delta + 1 and room for that many records when uncompressed
    (``InvalidRecordError`` / ``CorruptRecordError``), timestamps not negative except -1 and, for
    create-time batches without a delete horizon, max_timestamp >= base_timestamp (``InvalidTimestampError``).

    ``from_client=True`` adds Kafka's ``LogValidator`` rules for batches a producer sends: at least one
    record, records_count == last_offset_delta + 1, no control batch, a base_sequence with a producer id
    (all ``InvalidRecordError``). Batches read back from a log (compacted, empty, control) pass without it.
    """
    return _validate_batch(buf, pos, from_client, None)


def _validate_batch(
    buf: Buffer, pos: int, from_client: bool, max_batch_bytes: int | None
) -> RecordBatchHeader:
    """:func:`validate_batch`, and with ``max_batch_bytes`` first :func:`validate_batches`' size rule for a
    whole batch. One function, the fields read once into locals: every produce request runs it."""
    available = len(buf) - pos
    if available < LOG_OVERHEAD or pos < 0:
        raise CorruptRecordError(f"record batch at {pos} truncated: {available} bytes, need {LOG_OVERHEAD}")
    (batch_length,) = _LENGTH.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
    size = batch_length + LOG_OVERHEAD
    if max_batch_bytes is not None and max_batch_bytes < size <= available:
        raise RecordTooLargeError(
            f"record batch at {pos} is {size} bytes, more than the maximum {max_batch_bytes}"
        )
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at {pos} has batch_length {batch_length} < minimum {_MIN_BATCH_LENGTH}"
        )
    if size > available:
        raise CorruptRecordError(
            f"record batch at {pos} truncated: batch_length {batch_length}, {available} bytes left"
        )
    fields = _HEADER.unpack_from(buf, pos)
    (
        _,
        _,
        _,
        magic,
        stored_crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        _,
        base_sequence,
        count,
    ) = fields
    if magic != MAGIC:
        raise CorruptRecordError(f"record batch at {pos} has magic {magic}, only magic {MAGIC} is supported")
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    if crc != stored_crc:
        raise CorruptRecordError(
            f"record batch at {pos} fails its CRC32C: stored {stored_crc:#010x}, computed {crc:#010x}"
        )
    compression = attributes & COMPRESSION_MASK
    if compression > Compression.ZSTD:
        raise UnsupportedCompressionTypeError(
            f"record batch at {pos} has unknown compression codec id {compression}"
        )
    if last_offset_delta < 0 or count < 0 or count > last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch at {pos} has records_count {count} for last_offset_delta {last_offset_delta}"
        )
    if not compression and count * _MIN_RECORD_BYTES > batch_length - _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at {pos} claims {count} records in {batch_length - _MIN_BATCH_LENGTH} bytes"
        )
    if base_timestamp < NO_TIMESTAMP or max_timestamp < NO_TIMESTAMP:
        raise InvalidTimestampError(
            f"record batch at {pos} has negative timestamps: base {base_timestamp}, max {max_timestamp}"
        )
    if max_timestamp < base_timestamp and not attributes & (TIMESTAMP_TYPE_BIT | DELETE_HORIZON_BIT):
        raise InvalidTimestampError(
            f"record batch at {pos} has max_timestamp {max_timestamp} < base_timestamp {base_timestamp}"
        )
    if from_client:
        if count == 0 or count != last_offset_delta + 1:
            raise InvalidRecordError(
                f"record batch at {pos} has records_count {count}, expected last_offset_delta + 1 = "
                f"{last_offset_delta + 1} (and at least 1)"
            )
        if attributes & CONTROL_BIT:
            raise InvalidRecordError(
                f"record batch at {pos}: clients are not allowed to write control records"
            )
        if producer_id > NO_PRODUCER_ID and base_sequence < 0:
            raise InvalidRecordError(
                f"record batch at {pos} has invalid base_sequence {base_sequence} for producer_id {producer_id}"
            )
    return RecordBatchHeader(*fields)


def validate_batches(
    buf: Buffer, *, max_batch_bytes: int, from_client: bool = True
) -> list[RecordBatchHeader]:
    """Validate a produce payload: one or more whole batches filling ``buf`` exactly.

    Each batch is checked as by :func:`validate_batch` (``from_client`` defaults to True here) and must
    not exceed ``max_batch_bytes`` including its 12-byte log overhead (``RecordTooLargeError``, Kafka's
    ``max.message.bytes``). An empty payload is ``InvalidRecordError``; trailing bytes that are not a
    whole batch are ``CorruptRecordError``.
    """
    end = len(buf)
    if end == 0:
        raise InvalidRecordError("produce payload holds no record batch")
    header = _validate_batch(buf, 0, from_client, max_batch_bytes)
    headers = [header]
    pos = header.batch_length + LOG_OVERHEAD
    while pos < end:
        header = _validate_batch(buf, pos, from_client, max_batch_bytes)
        headers.append(header)
        pos += header.batch_length + LOG_OVERHEAD
    return headers


def assign_offsets(
    buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Rewrite base_offset and partition_leader_epoch of the batch at ``pos`` in place (outside the CRC)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Kafka's LogAppendTime: set the timestamp-type bit and max_timestamp, then recompute the CRC.

    Records keep their own timestamp deltas; readers report ``max_timestamp`` for every record of a
    log-append-time batch. Other attribute bits are preserved. No decompression.
    """
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos))
