"""Records inside a magic-v2 batch: encode a batch from records, decode a batch into records, and the
control records of transactions.

Record layout (varints are zigzag, as in protobuf's sint)::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
    key_length varint | key | value_length varint | value | header_count varint
    [header_key_length varint | header_key utf-8 | header_value_length varint | header_value]*

A length of -1 is null (key, value, header value). ``length`` counts the bytes after itself.

Invariants:

* ``decode_batch(encode_batch(records, ...))`` gives back every key, value, header and timestamp
  byte-for-byte, with offsets ``base_offset + offset_delta``, for every compression codec.
* Decoded records carry absolute offsets and timestamps. In a log-append-time batch every record's
  timestamp is the batch's max_timestamp (what Kafka's readers report).
* Header keys are text; bytes that are not UTF-8 survive a decode/encode round trip (surrogateescape).
* A control record's key is ``version int16 (0) + type int16``; a transaction marker's value is
  ``version int16 (0) + coordinator_epoch int32``.
* A compressed batch is inflated to at most ``max_uncompressed_bytes`` (default
  :data:`MAX_UNCOMPRESSED_BATCH_BYTES`) and refused with :class:`CorruptRecordError` beyond it, holding no
  more than that: a decompression bomb costs bounded memory. Callers decoding untrusted batches pass the
  tighter :func:`uncompressed_batch_limit` of the log's ``max.message.bytes``.
* Malformed record bytes raise :class:`CorruptRecordError`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Protocol

import crc32c

from tidelog.protocol.compression import Compression, compress, decompress_bounded
from tidelog.protocol.records_errors import CorruptRecordError, InvalidRecordError
from tidelog.protocol.records_header import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RECORD_BATCH_HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    RecordBatchHeader,
    TimestampType,
    read_batch_header,
)

__all__ = [
    "MAX_UNCOMPRESSED_BATCH_BYTES",
    "UNCOMPRESSED_RATIO_LIMIT",
    "ControlRecordType",
    "Record",
    "RecordLike",
    "SimpleRecord",
    "decode_batch",
    "decode_control_record",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "uncompressed_batch_limit",
]

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]


class ControlRecordType(IntEnum):
    """The type in a control record's key: transaction markers."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp; key, value, header values None when null."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to write (Kafka's ``SimpleRecord``): the batch assigns its offset."""

    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int = NO_TIMESTAMP


class RecordLike(Protocol):
    """What :func:`encode_batch` reads from each record (:class:`SimpleRecord` and :class:`Record` fit)."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...
    @property
    def timestamp(self) -> int: ...


_HEADER_STRUCT: Final = struct.Struct(">qiibIhiqqqhii")
_CRC_STRUCT: Final = struct.Struct(">I")
_CONTROL_KEY: Final = struct.Struct(">hh")
_TXN_MARKER_VALUE: Final = struct.Struct(">hi")
_CONTROL_KEY_SIZE: Final = 4
_TXN_MARKER_VALUE_SIZE: Final = 6

# zigzag varints of -64..63 fit one byte; most lengths and deltas of small records live there.
_SMALL_VARINTS: Final = {v: bytes((((v << 1) ^ (v >> 63)) & 0xFF,)) for v in range(-64, 64)}
_NULL_LENGTH: Final = b"\x01"  # zigzag(-1)


def _varint(value: int) -> bytes:
    """Zigzag varint (Kafka's ``ByteUtils.writeVarlong``) of a signed 64-bit ``value``."""
    small = _SMALL_VARINTS.get(value)
    if small is not None:
        return small
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _encode_records(
    records: Sequence[RecordLike], offset_deltas: Sequence[int], base_timestamp: int
) -> bytearray:
    out = bytearray()
    varint = _varint
    for record, offset_delta in zip(records, offset_deltas, strict=True):
        body = bytearray(b"\x00")  # record attributes: unused, always 0
        body += varint(record.timestamp - base_timestamp)
        body += varint(offset_delta)
        key = record.key
        if key is None:
            body += _NULL_LENGTH
        else:
            body += varint(len(key))
            body += key
        value = record.value
        if value is None:
            body += _NULL_LENGTH
        else:
            body += varint(len(value))
            body += value
        headers = record.headers
        body += varint(len(headers))
        for header_key, header_value in headers:
            raw_key = header_key.encode("utf-8", "surrogateescape")
            body += varint(len(raw_key))
            body += raw_key
            if header_value is None:
                body += _NULL_LENGTH
            else:
                body += varint(len(header_value))
                body += header_value
        out += varint(len(body))
        out += body
    return out


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` in order, CRC computed, compressed with ``compression``.

    Offsets are ``base_offset + i`` unless ``offset_deltas`` gives each record's delta (the cleaner keeps
    original offsets). ``last_offset_delta`` defaults to the last delta (required for an empty batch).
    base_timestamp defaults to the first record's timestamp, max_timestamp to the largest one (for a
    log-append-time batch pass the append time). ``delete_horizon_ms`` sets attributes bit 6 and becomes
    the base timestamp, as Kafka's cleaner does.
    """
    count = len(records)
    if offset_deltas is None:
        offset_deltas = range(count)
    elif len(offset_deltas) != count:
        raise ValueError(f"{len(offset_deltas)} offset deltas for {count} records")
    if last_offset_delta is None:
        if count == 0:
            raise ValueError("an empty batch needs an explicit last_offset_delta")
        last_offset_delta = offset_deltas[-1]
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif base_timestamp is None:
        base_timestamp = records[0].timestamp if count else max_timestamp
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    payload: bytes | bytearray = _encode_records(records, offset_deltas, base_timestamp)
    if compression != Compression.NONE:
        payload = compress(compression, payload)
    fields = [
        base_offset,
        RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ]
    header = _HEADER_STRUCT.pack(*fields)
    fields[4] = crc32c.crc32c(payload, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    return b"".join((_HEADER_STRUCT.pack(*fields), payload))


def decode_records(
    data: Buffer, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """The ``count`` records that exactly fill ``data`` (an uncompressed records section)."""
    records: list[Record] = []
    append = records.append
    end = len(data)
    pos = 0

    def read_varint(pos: int) -> tuple[int, int]:
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = data[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result >> 1) ^ -(result & 1), pos + 1
            shift += 7
            if shift > 63:
                raise CorruptRecordError(f"varint longer than 10 bytes at {pos}")

    try:
        for _ in range(count):
            length, pos = read_varint(pos)
            record_end = pos + length
            if length < 6 or record_end > end:
                raise CorruptRecordError(
                    f"record length {length} at {pos} does not fit the {end}-byte records section"
                )
            attributes = data[pos]
            timestamp_delta, pos = read_varint(pos + 1)
            offset_delta, pos = read_varint(pos)
            key_length, pos = read_varint(pos)
            if key_length < 0:
                key = None
            else:
                key = bytes(data[pos : pos + key_length])
                pos += key_length
            value_length, pos = read_varint(pos)
            if value_length < 0:
                value = None
            else:
                value = bytes(data[pos : pos + value_length])
                pos += value_length
            header_count, pos = read_varint(pos)
            headers: tuple[Header, ...] = ()
            if header_count:
                if header_count < 0:
                    raise CorruptRecordError(f"negative header count {header_count}")
                header_list: list[Header] = []
                for _ in range(header_count):
                    header_key_length, pos = read_varint(pos)
                    if header_key_length < 0:
                        raise CorruptRecordError(f"null header key at {pos}")
                    header_key = bytes(data[pos : pos + header_key_length]).decode("utf-8", "surrogateescape")
                    pos += header_key_length
                    header_value_length, pos = read_varint(pos)
                    if header_value_length < 0:
                        header_list.append((header_key, None))
                    else:
                        header_list.append((header_key, bytes(data[pos : pos + header_value_length])))
                        pos += header_value_length
                headers = tuple(header_list)
            if pos != record_end:
                raise CorruptRecordError(f"record ends at {pos}, its length says {record_end}")
            append(
                Record(
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta if log_append_time is None else log_append_time,
                    key,
                    value,
                    headers,
                    attributes,
                )
            )
    except IndexError:
        raise CorruptRecordError(
            f"records section truncated: {count} records do not fit {end} bytes"
        ) from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last of {count} records")
    return records


MAX_UNCOMPRESSED_BATCH_BYTES: Final = 1 << 30
"""The most a batch read back from a log may inflate to (its producer's batch passed a tighter limit)."""

UNCOMPRESSED_RATIO_LIMIT: Final = 32
"""A batch from a producer may inflate to at most this many times ``max.message.bytes``."""


def uncompressed_batch_limit(max_message_bytes: int) -> int:
    """The most a producer's batch may inflate to under ``max.message.bytes`` (32 MiB at Kafka's default)."""
    return UNCOMPRESSED_RATIO_LIMIT * max(max_message_bytes, 1)


def decode_batch(
    buf: Buffer, pos: int = 0, *, max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BATCH_BYTES
) -> tuple[RecordBatchHeader, list[Record]]:
    """The header and records (absolute offsets and timestamps) of the batch at ``pos``; decompresses,
    to at most ``max_uncompressed_bytes`` (:class:`CorruptRecordError` beyond it).

    Checks structure, not the CRC (that is :func:`~tidelog.protocol.records.validate_batch`).
    """
    header = read_batch_header(buf, pos)
    size = header.batch_length + LOG_OVERHEAD
    if header.batch_length < RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD or len(buf) - pos < size:
        raise CorruptRecordError(
            f"record batch at {pos} has batch_length {header.batch_length}, {len(buf) - pos} bytes left"
        )
    payload: Buffer = memoryview(buf)[pos + RECORD_BATCH_HEADER_SIZE : pos + size]
    codec = header.compression
    if codec != Compression.NONE:
        payload = decompress_bounded(codec, payload, max_uncompressed_bytes)
    log_append_time = header.max_timestamp if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    records = decode_records(
        payload, header.records_count, header.base_offset, header.base_timestamp, log_append_time
    )
    return header, records


def encode_control_batch(
    kind: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: a transactional control batch of one COMMIT or ABORT record."""
    record = SimpleRecord(
        key=_CONTROL_KEY.pack(0, kind),
        value=_TXN_MARKER_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp_ms,
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def decode_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """``(type, coordinator_epoch)`` of a transaction marker record; ``InvalidRecordError`` otherwise."""
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY_SIZE:
        raise InvalidRecordError(f"control record at offset {record.offset} has key {key!r}")
    _version, kind = _CONTROL_KEY.unpack_from(key)
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(
            f"control record at offset {record.offset} has type {kind}, not a transaction marker"
        )
    if value is None or len(value) < _TXN_MARKER_VALUE_SIZE:
        raise InvalidRecordError(f"transaction marker at offset {record.offset} has value {value!r}")
    _version, coordinator_epoch = _TXN_MARKER_VALUE.unpack_from(value)
    return ControlRecordType(kind), coordinator_epoch
