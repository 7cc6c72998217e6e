"""Round trips of record batches through encode_batch/decode_batch, control records, attributes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER_SIZE,
    Compression,
    ControlRecordType,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    SimpleRecord,
    TimestampType,
    decode_batch,
    decode_control_record,
    encode_batch,
    encode_control_batch,
    read_batch_header,
    validate_batch,
)

ROUND_TRIP = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

timestamps = st.one_of(st.just(-1), st.integers(min_value=0, max_value=2**50))
optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), optional_bytes), max_size=4).map(tuple)
simple_records = st.builds(
    SimpleRecord, key=optional_bytes, value=optional_bytes, headers=headers, timestamp=timestamps
)
record_lists = st.lists(simple_records, min_size=1, max_size=30)
codecs = st.sampled_from(list(Compression))


def _rows(records: list[SimpleRecord] | list[Record]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, tuple(r.headers), r.timestamp) for r in records]


@ROUND_TRIP
@given(
    records=record_lists,
    codec=codecs,
    base_offset=st.integers(min_value=0, max_value=2**62),
    partition_leader_epoch=st.integers(min_value=-1, max_value=2**31 - 1),
    producer=st.one_of(
        st.just((-1, -1, -1)),
        st.tuples(
            st.integers(min_value=0, max_value=2**63 - 1),
            st.integers(min_value=0, max_value=2**15 - 1),
            st.integers(min_value=0, max_value=2**31 - 1),
        ),
    ),
    is_transactional=st.booleans(),
)
def test_encode_decode_round_trip(
    records: list[SimpleRecord],
    codec: Compression,
    base_offset: int,
    partition_leader_epoch: int,
    producer: tuple[int, int, int],
    is_transactional: bool,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    batch = encode_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    header = validate_batch(batch, from_client=True)
    assert header.size_in_bytes == len(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.compression) == (
        base_offset,
        partition_leader_epoch,
        codec,
    )
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert (header.records_count, header.last_offset_delta) == (len(records), len(records) - 1)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.is_transactional is is_transactional
    assert header.is_control is False
    assert header.timestamp_type is TimestampType.CREATE_TIME
    decoded_header, decoded = decode_batch(batch)
    assert decoded_header == header
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    assert _rows(decoded) == _rows(records)
    assert {r.attributes for r in decoded} == {0}


@ROUND_TRIP
@given(
    records=record_lists,
    codec=codecs,
    data=st.data(),
)
def test_round_trip_with_sparse_offsets_as_after_compaction(
    records: list[SimpleRecord], codec: Compression, data: st.DataObject
) -> None:
    deltas = sorted(data.draw(st.sets(st.integers(0, 10_000), min_size=len(records), max_size=len(records))))
    last_offset_delta = deltas[-1] + data.draw(st.integers(0, 5))
    batch = encode_batch(
        records, base_offset=100, compression=codec, offset_deltas=deltas, last_offset_delta=last_offset_delta
    )
    header = validate_batch(batch)
    assert (header.records_count, header.last_offset_delta) == (len(records), last_offset_delta)
    _, decoded = decode_batch(batch)
    assert [r.offset for r in decoded] == [100 + d for d in deltas]
    assert _rows(decoded) == _rows(records)
    if len(records) != last_offset_delta + 1:
        with pytest.raises(InvalidRecordError):
            validate_batch(batch, from_client=True)


def test_empty_batch_keeps_offsets_and_is_valid_only_from_a_log() -> None:
    batch = encode_batch(
        [], base_offset=10, last_offset_delta=4, producer_id=3, producer_epoch=0, base_sequence=20
    )
    header = validate_batch(batch)
    assert (header.records_count, header.last_offset, header.last_sequence) == (0, 14, 24)
    assert header.batch_length == RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD
    assert decode_batch(batch) == (header, [])
    with pytest.raises(InvalidRecordError) as info:
        validate_batch(batch, from_client=True)
    assert info.value.error_code is ErrorCode.INVALID_RECORD
    with pytest.raises(ValueError, match="last_offset_delta"):
        encode_batch([])


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize(
    ("timestamp_type", "is_transactional", "is_control", "delete_horizon_ms"),
    [
        (TimestampType.CREATE_TIME, False, False, None),
        (TimestampType.LOG_APPEND_TIME, False, False, None),
        (TimestampType.CREATE_TIME, True, False, None),
        (TimestampType.CREATE_TIME, True, True, None),
        (TimestampType.CREATE_TIME, False, False, 5_000),
        (TimestampType.LOG_APPEND_TIME, True, True, 5_000),
    ],
)
def test_attribute_combinations(
    codec: Compression,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
    delete_horizon_ms: int | None,
) -> None:
    records = [SimpleRecord(b"k", b"v", (), 1_000), SimpleRecord(None, None, (), 1_010)]
    batch = encode_batch(
        records,
        compression=codec,
        timestamp_type=timestamp_type,
        is_transactional=is_transactional,
        is_control=is_control,
        delete_horizon_ms=delete_horizon_ms,
        max_timestamp=2_000 if timestamp_type is TimestampType.LOG_APPEND_TIME else None,
    )
    header = validate_batch(batch)
    expected_attributes = (
        int(codec)
        | (0x08 if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
        | (0x10 if is_transactional else 0)
        | (0x20 if is_control else 0)
        | (0x40 if delete_horizon_ms is not None else 0)
    )
    assert header.attributes == expected_attributes
    assert header.compression is codec
    assert header.timestamp_type is timestamp_type
    assert (header.is_transactional, header.is_control) == (is_transactional, is_control)
    assert header.has_delete_horizon is (delete_horizon_ms is not None)
    assert header.base_timestamp == (1_000 if delete_horizon_ms is None else delete_horizon_ms)
    _, decoded = decode_batch(batch)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        assert [r.timestamp for r in decoded] == [2_000, 2_000]
    else:
        assert [r.timestamp for r in decoded] == [1_000, 1_010]
    assert [(r.key, r.value) for r in decoded] == [(b"k", b"v"), (None, None)]


@settings(deadline=None)
@given(
    kind=st.sampled_from(list(ControlRecordType)),
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
    base_offset=st.integers(0, 2**62),
    timestamp_ms=st.integers(0, 2**50),
    partition_leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_control_batch_round_trip(
    kind: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int,
    timestamp_ms: int,
    partition_leader_epoch: int,
) -> None:
    batch = encode_control_batch(
        kind,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        base_offset=base_offset,
        timestamp_ms=timestamp_ms,
        partition_leader_epoch=partition_leader_epoch,
    )
    header = validate_batch(batch)
    assert (header.is_control, header.is_transactional) == (True, True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        -1,
    )
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (
        base_offset,
        partition_leader_epoch,
        1,
    )
    assert header.compression is Compression.NONE
    _, (record,) = decode_batch(batch)
    assert (record.offset, record.timestamp) == (base_offset, timestamp_ms)
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, coordinator_epoch)
    assert decode_control_record(record) == (kind, coordinator_epoch)
    with pytest.raises(InvalidRecordError, match="control records"):
        validate_batch(batch, from_client=True)


def test_control_batch_exact_bytes() -> None:
    """A COMMIT marker, field by field (Kafka's EndTransactionMarker layout)."""
    batch = encode_control_batch(
        ControlRecordType.COMMIT,
        producer_id=0x1122,
        producer_epoch=3,
        coordinator_epoch=7,
        base_offset=5,
        timestamp_ms=0x0102,
        partition_leader_epoch=2,
    )
    record = bytes(
        [
            0x20,  # length 16 (zigzag)
            0x00,  # attributes
            0x00,  # timestamp delta 0
            0x00,  # offset delta 0
            0x08,  # key length 4
            *b"\x00\x00\x00\x01",  # key: version 0, type 1 (COMMIT)
            0x0C,  # value length 6
            *b"\x00\x00\x00\x00\x00\x07",  # value: version 0, coordinator_epoch 7
            0x00,  # no headers
        ]
    )
    header = struct.pack(
        ">qiibIhiqqqhii", 5, 49 + len(record), 2, 2, 0, 0x30, 0, 0x0102, 0x0102, 0x1122, 3, -1, 1
    )
    assert batch[:17] == header[:17]
    assert batch[21:] == header[21:] + record


def test_decode_control_record_rejects_non_markers() -> None:
    for key, value in [
        (None, b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00", b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # type 2 (KRaft LeaderChange) is no marker
        (b"\x00\x00\x00\x01", b"\x00\x00"),
        (b"\x00\x00\x00\x01", None),
    ]:
        with pytest.raises(InvalidRecordError):
            decode_control_record(Record(0, 0, key, value))


def test_exact_bytes_of_a_small_batch() -> None:
    """Golden bytes, field by field, for one record with a header."""
    batch = encode_batch(
        [SimpleRecord(b"k", b"vv", (("h", None),), 1_000), SimpleRecord(None, b"", (), 990)],
        base_offset=7,
    )
    records = bytes(
        [
            0x18,  # length 12
            0x00,  # attributes
            0x00,  # timestamp delta 0
            0x00,  # offset delta 0
            0x02,  # key length 1
            *b"k",
            0x04,  # value length 2
            *b"vv",
            0x02,  # 1 header
            0x02,  # header key length 1
            *b"h",
            0x01,  # header value null (-1)
            0x0C,  # length 6
            0x00,  # attributes
            0x13,  # timestamp delta -10
            0x02,  # offset delta 1
            0x01,  # key null
            0x00,  # value length 0
            0x00,  # no headers
        ]
    )
    fields = (7, 49 + len(records), -1, 2, 0, 0, 1, 1_000, 1_000, -1, -1, -1, 2)
    expected = struct.pack(">qiibIhiqqqhii", *fields) + records
    import crc32c

    crc = crc32c.crc32c(expected[21:])
    assert batch == expected[:17] + struct.pack(">I", crc) + expected[21:]
    assert read_batch_header(batch).crc == crc


@pytest.mark.parametrize(
    ("base", "timestamp"),
    [
        (0, 0),
        (0, 63),
        (64, 0),
        (0, 64),
        (65, 0),
        (0, 2**31),
        (2**31, 0),
        (0, 2**63 - 1),
        (2**63 - 1, 0),
        (-1, 2**62),
    ],
)
def test_timestamp_deltas_use_64_bit_zigzag_varints(base: int, timestamp: int) -> None:
    batch = encode_batch([SimpleRecord(b"a", None, (), base), SimpleRecord(b"b", None, (), timestamp)])
    _, decoded = decode_batch(batch)
    assert [r.timestamp for r in decoded] == [base, timestamp]


def test_header_keys_that_are_not_utf8_survive_a_round_trip() -> None:
    raw_key = b"\xff\xfe-key"
    key = raw_key.decode("utf-8", "surrogateescape")
    batch = encode_batch([SimpleRecord(b"k", b"v", ((key, b"x"),), 0)])
    assert raw_key in batch
    _, (record,) = decode_batch(batch)
    assert record.headers == ((key, b"x"),)
    assert record.headers[0][0].encode("utf-8", "surrogateescape") == raw_key


def test_error_codes_of_record_errors() -> None:
    from tidelog.protocol.errors import KafkaProtocolError
    from tidelog.protocol.records import (
        InvalidTimestampError,
        RecordError,
        RecordTooLargeError,
        UnsupportedCompressionTypeError,
    )

    expected = {
        RecordError: ErrorCode.CORRUPT_MESSAGE,
        CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
        InvalidRecordError: ErrorCode.INVALID_RECORD,
        RecordTooLargeError: ErrorCode.MESSAGE_TOO_LARGE,
        UnsupportedCompressionTypeError: ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        InvalidTimestampError: ErrorCode.INVALID_TIMESTAMP,
    }
    for cls, code in expected.items():
        error = cls("boom")
        assert isinstance(error, KafkaProtocolError)
        assert isinstance(error, RecordError)
        assert error.error_code is code
        assert str(error) == "boom"
