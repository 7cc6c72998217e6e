"""validate_batch / validate_batches: every way a batch is refused, and the typed error for each."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
    SimpleRecord,
    UnsupportedCompressionTypeError,
    compute_crc,
    decode_batch,
    encode_batch,
    validate_batch,
    validate_batches,
)
from tidelog.protocol.records_codec import MAX_UNCOMPRESSED_BATCH_BYTES

# Header fields: (name, offset, struct format).
FIELDS = {
    "base_offset": (0, ">q"),
    "batch_length": (8, ">i"),
    "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"),
    "crc": (17, ">I"),
    "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"),
    "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"),
    "base_sequence": (53, ">i"),
    "records_count": (57, ">i"),
}


def _batch(n: int = 3, codec: Compression = Compression.NONE, **kwargs: object) -> bytes:
    records = [SimpleRecord(b"key-%d" % i, b"value-%d" % i, (("h", b"x"),), 1_000 + i) for i in range(n)]
    return encode_batch(records, compression=codec, **kwargs)  # type: ignore[arg-type]


def _with(batch: bytes, *, fix_crc: bool = True, **fields: int) -> bytearray:
    """``batch`` with header fields replaced, the CRC recomputed unless told otherwise."""
    buf = bytearray(batch)
    for name, value in fields.items():
        offset, fmt = FIELDS[name]
        struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, compute_crc(buf))
    return buf


def _refused(buf: bytes | bytearray, error: type[RecordError], **kwargs: bool) -> RecordError:
    with pytest.raises(error) as info:
        validate_batch(buf, **kwargs)
    assert type(info.value) is error
    return info.value


# ---- flipped bytes ------------------------------------------------------------------------------------

OUTSIDE_CRC = set(range(8)) | set(range(12, 16))  # base_offset, partition_leader_epoch


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_flipping_any_byte_is_detected_except_outside_the_crc(codec: Compression) -> None:
    batch = _batch(3, codec)
    for pos in range(len(batch)):
        for flip in (0x01, 0x80, 0xFF):
            buf = bytearray(batch)
            buf[pos] ^= flip
            if pos in OUTSIDE_CRC:
                header = validate_batch(buf, from_client=True)
                assert header.records_count == 3
                continue
            with pytest.raises(CorruptRecordError) as info:
                validate_batch(buf, from_client=True)
            assert info.value.error_code is ErrorCode.CORRUPT_MESSAGE, (pos, flip)
            with pytest.raises(CorruptRecordError):
                validate_batches(buf, max_batch_bytes=1 << 20)


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    buf = _with(_batch(), fix_crc=False, base_offset=123, partition_leader_epoch=9)
    header = validate_batch(buf, from_client=True)
    assert (header.base_offset, header.partition_leader_epoch) == (123, 9)


# ---- length and magic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name.lower())
def test_every_truncation_is_corrupt(codec: Compression) -> None:
    batch = _batch(3, codec)
    for cut in range(len(batch)):
        _refused(batch[:cut], CorruptRecordError)
        with pytest.raises(CorruptRecordError):
            validate_batches(batch[:cut] or b"\x00", max_batch_bytes=1 << 20)


@pytest.mark.parametrize("batch_length", [-1, -(2**31), 0, 48])
def test_batch_length_below_the_header_is_corrupt(batch_length: int) -> None:
    err = _refused(_with(_batch(), fix_crc=False, batch_length=batch_length), CorruptRecordError)
    assert "batch_length" in str(err)


def test_batch_length_shorter_than_the_records_fails_the_crc() -> None:
    batch = _batch()
    buf = _with(batch, fix_crc=False, batch_length=len(batch) - LOG_OVERHEAD - 1)
    assert "CRC" in str(_refused(buf, CorruptRecordError))


def test_batch_length_shorter_than_the_records_with_fixed_crc_fails_decoding() -> None:
    batch = _batch()
    buf = _with(batch, batch_length=len(batch) - LOG_OVERHEAD - 1)
    validate_batch(buf[:-1])  # the header alone cannot tell
    with pytest.raises(CorruptRecordError):
        decode_batch(buf[:-1])


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_magic_other_than_2_is_corrupt(magic: int) -> None:
    err = _refused(_with(_batch(), fix_crc=False, magic=magic), CorruptRecordError)
    assert f"magic {magic}" in str(err)


# ---- fields that the CRC covers, with the CRC recomputed ------------------------------------------------


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_compression_codec(codec_id: int) -> None:
    err = _refused(_with(_batch(), attributes=codec_id), UnsupportedCompressionTypeError)
    assert err.error_code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_unused_attribute_bits_are_ignored() -> None:
    header = validate_batch(_with(_batch(), attributes=0x7F80 | 0x01), from_client=False)
    assert header.compression is Compression.GZIP  # the payload is not decompressed by validation


@pytest.mark.parametrize(
    ("count", "last_offset_delta", "from_client", "error"),
    [
        (3, 2, True, None),
        (3, 2, False, None),
        (2, 2, True, InvalidRecordError),  # Kafka's validator: count must equal last_offset_delta + 1
        (2, 2, False, None),  # a compacted batch keeps its last offset with fewer records
        (4, 2, True, InvalidRecordError),
        (4, 2, False, InvalidRecordError),
        (0, 2, True, InvalidRecordError),
        (-1, 2, False, InvalidRecordError),
        (3, -1, False, InvalidRecordError),
        (3, -(2**31), True, InvalidRecordError),
        (2**31 - 1, 2**31 - 2, True, CorruptRecordError),  # cannot fit in the payload
    ],
)
def test_records_count_against_last_offset_delta(
    count: int, last_offset_delta: int, from_client: bool, error: type[RecordError] | None
) -> None:
    buf = _with(_batch(3), records_count=count, last_offset_delta=last_offset_delta)
    if error is None:
        header = validate_batch(buf, from_client=from_client)
        assert (header.records_count, header.last_offset_delta) == (count, last_offset_delta)
    else:
        err = _refused(buf, error, from_client=from_client)
        assert err.error_code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)


def test_compressed_batches_are_not_held_to_the_uncompressed_size_bound() -> None:
    records = [SimpleRecord(None, b"", (), 0)] * 1_000
    batch = encode_batch(records, compression=Compression.ZSTD)
    assert len(batch) - RECORD_BATCH_HEADER_SIZE < 7 * 1_000
    assert validate_batch(batch, from_client=True).records_count == 1_000


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"base_timestamp": -1, "max_timestamp": -1}, None),
        ({"base_timestamp": -1, "max_timestamp": 5}, None),
        ({"base_timestamp": 0, "max_timestamp": 0}, None),
        ({"base_timestamp": -2}, InvalidTimestampError),
        ({"base_timestamp": -(2**63)}, InvalidTimestampError),
        ({"max_timestamp": -2}, InvalidTimestampError),
        ({"base_timestamp": 2_000, "max_timestamp": 1_999}, InvalidTimestampError),
        ({"base_timestamp": 2_000, "max_timestamp": -1}, InvalidTimestampError),
        # LogAppendTime: max_timestamp is the broker's clock, base stays the producer's.
        ({"attributes": 0x08, "base_timestamp": 2_000, "max_timestamp": 1_999}, None),
        # Delete horizon: base_timestamp is the horizon, after every record.
        ({"attributes": 0x40, "base_timestamp": 9_000, "max_timestamp": 1_002}, None),
        ({"attributes": 0x08, "max_timestamp": -2}, InvalidTimestampError),
    ],
)
def test_timestamps(fields: dict[str, int], error: type[RecordError] | None) -> None:
    buf = _with(_batch(), **fields)
    if error is None:
        validate_batch(buf, from_client=True)
    else:
        assert _refused(buf, error, from_client=True).error_code is ErrorCode.INVALID_TIMESTAMP


def test_control_batches_only_from_a_log() -> None:
    buf = _with(_batch(1), attributes=0x30)
    assert validate_batch(buf).is_control
    err = _refused(buf, InvalidRecordError, from_client=True)
    assert "control" in str(err)


@pytest.mark.parametrize(
    ("producer_id", "base_sequence", "error"),
    [(-1, -1, None), (-1, 0, None), (5, 0, None), (5, -1, InvalidRecordError), (5, -7, InvalidRecordError)],
)
def test_producer_id_needs_a_sequence_from_clients(
    producer_id: int, base_sequence: int, error: type[RecordError] | None
) -> None:
    buf = _with(_batch(), producer_id=producer_id, producer_epoch=0, base_sequence=base_sequence)
    validate_batch(buf)
    if error is None:
        validate_batch(buf, from_client=True)
    else:
        _refused(buf, error, from_client=True)


# ---- validate_batches ---------------------------------------------------------------------------------


def test_validate_batches_returns_every_header_in_order() -> None:
    a, b, c = _batch(1), _batch(2, Compression.GZIP), _batch(3, Compression.SNAPPY)
    headers = validate_batches(a + b + c, max_batch_bytes=1 << 20)
    assert [h.records_count for h in headers] == [1, 2, 3]
    assert [h.size_in_bytes for h in headers] == [len(a), len(b), len(c)]
    assert validate_batches(memoryview(a + b), max_batch_bytes=1 << 20)[1].compression is Compression.GZIP


def test_validate_batches_refuses_empty_and_trailing_bytes() -> None:
    batch = _batch()
    assert _refused_batches(b"", InvalidRecordError).error_code is ErrorCode.INVALID_RECORD
    for junk in (b"\x00", b"\x00" * 11, b"\x00" * 12, b"\x00" * 61, batch[:-1]):
        _refused_batches(batch + junk, CorruptRecordError)


def _refused_batches(buf: bytes, error: type[RecordError], max_batch_bytes: int = 1 << 20) -> RecordError:
    with pytest.raises(error) as info:
        validate_batches(buf, max_batch_bytes=max_batch_bytes)
    assert type(info.value) is error
    return info.value


def test_validate_batches_size_limit_includes_the_log_overhead() -> None:
    small, big = _batch(1), _batch(50)
    assert validate_batches(small + big, max_batch_bytes=len(big))
    err = _refused_batches(small + big, RecordTooLargeError, max_batch_bytes=len(big) - 1)
    assert err.error_code is ErrorCode.MESSAGE_TOO_LARGE
    assert f"is {len(big)} bytes" in str(err)


def test_validate_batches_applies_client_rules_unless_told() -> None:
    control = _with(_batch(1), attributes=0x30)
    _refused_batches(bytes(control), InvalidRecordError)
    assert validate_batches(control, max_batch_bytes=1 << 20, from_client=False)[0].is_control


# ---- fuzz: arbitrary damage never escapes as anything but a RecordError ---------------------------------


# A corrupt compressed payload is retried into ever larger buffers up to the decode limit before it is
# refused, so at the default limit (1 GiB) many examples each zero-fill a gigabyte: CI decodes under a
# 1 MiB limit (the same code paths, limit errors included), the soak under the default one.
@pytest.mark.parametrize(
    "max_uncompressed_bytes", [1 << 20, pytest.param(MAX_UNCOMPRESSED_BATCH_BYTES, marks=pytest.mark.soak)]
)
@settings(deadline=None)
@given(
    codec=st.sampled_from(list(Compression)),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
)
def test_damaged_batches_raise_record_errors_only(
    max_uncompressed_bytes: int, codec: Compression, edits: list[tuple[int, int]], cut: int | None
) -> None:
    """Validate, then decode with the CRC recomputed (so damage reaches the record parser)."""
    buf = bytearray(_batch(5, codec))
    for pos, value in edits:
        buf[pos % len(buf)] = value
    if cut is not None:
        del buf[cut % len(buf) :]
    with contextlib.suppress(RecordError):
        validate_batches(buf, max_batch_bytes=1 << 20, from_client=False)
    if len(buf) >= RECORD_BATCH_HEADER_SIZE:
        struct.pack_into(">I", buf, 17, compute_crc(buf))
    with contextlib.suppress(RecordError):
        decode_batch(buf, max_uncompressed_bytes=max_uncompressed_bytes)
