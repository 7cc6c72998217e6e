"""RecordBatchHeader parsing, iteration, offset assignment and LogAppendTime on hand-built batches."""

from __future__ import annotations

import struct

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordError,
    RecordBatchHeader,
    SimpleRecord,
    TimestampType,
    assign_offsets,
    compute_crc,
    decode_batch,
    encode_batch,
    iter_batch_headers,
    read_batch_header,
    set_log_append_time,
    validate_batch,
)


def _batch(n: int = 3, **kwargs: object) -> bytes:
    records = [SimpleRecord(key=b"k%d" % i, value=b"v%d" % i, timestamp=1_000 + i) for i in range(n)]
    return encode_batch(records, **kwargs)  # type: ignore[arg-type]


def test_header_fields_of_an_encoded_batch() -> None:
    batch = _batch(
        3,
        base_offset=42,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        partition_leader_epoch=5,
        is_transactional=True,
        compression=Compression.GZIP,
    )
    header = read_batch_header(batch)
    assert header == RecordBatchHeader(
        base_offset=42,
        batch_length=len(batch) - LOG_OVERHEAD,
        partition_leader_epoch=5,
        magic=2,
        crc=compute_crc(batch),
        attributes=0x10 | 1,
        last_offset_delta=2,
        base_timestamp=1_000,
        max_timestamp=1_002,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        records_count=3,
    )
    assert header.compression is Compression.GZIP
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional is True
    assert header.is_control is False
    assert header.has_delete_horizon is False
    assert header.last_offset == 44
    assert header.next_offset == 45
    assert header.size_in_bytes == len(batch)
    assert header.last_sequence == 12


def test_last_sequence_wraps_and_is_none_without_sequence() -> None:
    header = read_batch_header(_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert header.last_sequence == 0
    assert read_batch_header(_batch(3)).last_sequence == -1


def test_read_batch_header_rejects_short_and_bad_magic() -> None:
    batch = _batch()
    with pytest.raises(CorruptRecordError) as info:
        read_batch_header(batch[: RECORD_BATCH_HEADER_SIZE - 1])
    assert info.value.error_code is ErrorCode.CORRUPT_MESSAGE
    bad = bytearray(batch)
    bad[16] = 1
    with pytest.raises(CorruptRecordError):
        read_batch_header(bad)


def test_iter_batch_headers_stops_at_incomplete_tail() -> None:
    a, b, c = _batch(1, base_offset=0), _batch(2, base_offset=1), _batch(3, base_offset=3)
    buf = a + b + c
    for cut in range(len(a) + len(b), len(buf)):
        got = [(pos, h.base_offset) for pos, h in iter_batch_headers(buf[:cut])]
        assert got == [(0, 0), (len(a), 1)]
    assert [(pos, h.base_offset) for pos, h in iter_batch_headers(buf)] == [
        (0, 0),
        (len(a), 1),
        (len(a) + len(b), 3),
    ]
    assert [pos for pos, _ in iter_batch_headers(buf, len(a), len(a) + len(b))] == [len(a)]


def test_iter_batch_headers_raises_on_impossible_length() -> None:
    bad = bytearray(_batch())
    struct.pack_into(">i", bad, 8, 48)
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(bad))


def test_assign_offsets_rewrites_in_place_and_keeps_crc() -> None:
    buf = bytearray(b"junk" + _batch(3, compression=Compression.LZ4))
    assign_offsets(buf, 4, 1_000, 9)
    header = validate_batch(buf, 4)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset) == (1_000, 9, 1_002)
    _, records = decode_batch(buf, 4)
    assert [r.offset for r in records] == [1_000, 1_001, 1_002]


def test_set_log_append_time_keeps_batch_valid() -> None:
    buf = bytearray(_batch(3, compression=Compression.ZSTD, is_transactional=True))
    set_log_append_time(buf, 0, 99_999)
    header = validate_batch(buf)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 99_999
    assert header.is_transactional is True
    assert header.compression is Compression.ZSTD
    _, records = decode_batch(buf)
    assert [r.timestamp for r in records] == [99_999] * 3
    assert [r.value for r in records] == [b"v0", b"v1", b"v2"]


def test_public_surface_is_pinned() -> None:
    from tidelog.protocol import records

    assert records.__all__ == sorted(records.__all__, key=lambda n: (not n.isupper(), n))
    assert set(records.__all__) == {
        "LOG_OVERHEAD",
        "MAGIC",
        "NO_PRODUCER_EPOCH",
        "NO_PRODUCER_ID",
        "NO_SEQUENCE",
        "NO_TIMESTAMP",
        "RECORD_BATCH_HEADER_SIZE",
        "Compression",
        "ControlRecordType",
        "CorruptRecordError",
        "InvalidRecordError",
        "InvalidTimestampError",
        "Record",
        "RecordBatchHeader",
        "RecordError",
        "RecordLike",
        "RecordTooLargeError",
        "SimpleRecord",
        "TimestampType",
        "UnsupportedCompressionTypeError",
        "assign_offsets",
        "compute_crc",
        "decode_batch",
        "decode_control_record",
        "decode_records",
        "encode_batch",
        "encode_control_batch",
        "iter_batch_headers",
        "read_batch_header",
        "set_log_append_time",
        "uncompressed_batch_limit",
        "validate_batch",
        "validate_batches",
    }
    assert (records.LOG_OVERHEAD, records.RECORD_BATCH_HEADER_SIZE, records.MAGIC) == (12, 61, 2)
    assert [(c.name, c.value) for c in records.Compression] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]
    assert [(t.name, t.value) for t in records.TimestampType] == [("CREATE_TIME", 0), ("LOG_APPEND_TIME", 1)]
    assert [(t.name, t.value) for t in records.ControlRecordType] == [("ABORT", 0), ("COMMIT", 1)]
