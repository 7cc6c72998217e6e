"""Kafka primitive types: exact encodings, hypothesis round trips, typed errors on bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol import primitives as p
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.primitives import LocalProtocolError, RemoteProtocolError

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[Any], bytes]

INT_CODECS: list[tuple[str, Writer, Reader, int, int, int]] = [
    ("int8", p.write_int8, p.read_int8, -(2**7), 2**7 - 1, 1),
    ("int16", p.write_int16, p.read_int16, -(2**15), 2**15 - 1, 2),
    ("int32", p.write_int32, p.read_int32, -(2**31), 2**31 - 1, 4),
    ("int64", p.write_int64, p.read_int64, -(2**63), 2**63 - 1, 8),
    ("uint16", p.write_uint16, p.read_uint16, 0, 2**16 - 1, 2),
    ("uint32", p.write_uint32, p.read_uint32, 0, 2**32 - 1, 4),
]


def _round_trip(write: Writer, read: Reader, value: Any) -> None:
    encoded = write(value)
    prefix = b"\xaa\xbb"
    decoded, pos = read(prefix + encoded + b"\xcc", len(prefix))
    assert decoded == value
    assert pos == len(prefix) + len(encoded)
    # every strict prefix of the encoding is truncated input
    for cut in range(len(encoded)):
        with pytest.raises(RemoteProtocolError):
            read(encoded[:cut], 0)


@pytest.mark.parametrize(
    ("name", "write", "read", "lo", "hi", "size"), INT_CODECS, ids=[c[0] for c in INT_CODECS]
)
@given(data=st.data())
def test_fixed_width_ints_round_trip(
    name: str, write: Writer, read: Reader, lo: int, hi: int, size: int, data: st.DataObject
) -> None:
    value = data.draw(st.integers(lo, hi))
    assert len(write(value)) == size
    _round_trip(write, read, value)


@pytest.mark.parametrize(
    ("name", "write", "read", "lo", "hi", "size"), INT_CODECS, ids=[c[0] for c in INT_CODECS]
)
def test_fixed_width_ints_out_of_range_are_local_errors(
    name: str, write: Writer, read: Reader, lo: int, hi: int, size: int
) -> None:
    for value in (lo - 1, hi + 1):
        with pytest.raises(LocalProtocolError):
            write(value)


def test_fixed_width_ints_are_big_endian() -> None:
    assert p.write_int16(1) == b"\x00\x01"
    assert p.write_int32(-2) == b"\xff\xff\xff\xfe"
    assert p.write_int64(0x0102030405060708) == bytes(range(1, 9))
    assert p.write_uint16(0xFFFE) == b"\xff\xfe"
    assert p.write_uint32(0x80000000) == b"\x80\x00\x00\x00"
    assert p.read_int8(b"\xff", 0) == (-1, 1)


@given(st.booleans())
def test_bool_round_trip(value: bool) -> None:
    _round_trip(p.write_bool, p.read_bool, value)


def test_bool_reads_any_nonzero_byte_as_true() -> None:
    assert p.read_bool(b"\x02", 0) == (True, 1)
    assert p.read_bool(b"\x00", 0) == (False, 1)


@given(st.floats(allow_nan=False))
def test_float64_round_trip(value: float) -> None:
    _round_trip(p.write_float64, p.read_float64, value)


def test_float64_is_ieee754_big_endian() -> None:
    assert p.write_float64(1.0) == b"\x3f\xf0\x00\x00\x00\x00\x00\x00"


@given(st.uuids())
def test_uuid_round_trip(value: UUID) -> None:
    _round_trip(p.write_uuid, p.read_uuid, value)
    assert p.write_uuid(value) == value.bytes


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_known_encodings(value: int, encoded: bytes) -> None:
    assert p.write_uvarint(value) == encoded
    assert p.read_uvarint(encoded, 0) == (value, len(encoded))


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(value: int) -> None:
    _round_trip(p.write_uvarint, p.read_uvarint, value)


def test_uvarint_longer_than_five_bytes_is_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="too long"):
        p.read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)


def test_negative_uvarint_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        p.write_uvarint(-1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
    ],
)
def test_zigzag_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert p.write_varint(value) == encoded
    assert p.read_varint(encoded, 0) == (value, len(encoded))
    assert p.write_varlong(value) == encoded
    assert p.read_varlong(encoded, 0) == (value, len(encoded))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    _round_trip(p.write_varint, p.read_varint, value)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    _round_trip(p.write_varlong, p.read_varlong, value)


def test_varint_extremes() -> None:
    assert p.write_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"
    assert p.write_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    with pytest.raises(LocalProtocolError):
        p.write_varint(2**31)
    with pytest.raises(LocalProtocolError):
        p.write_varlong(2**63)


STRING_CODECS: list[tuple[str, Writer, Reader, bool]] = [
    ("string", p.write_string, p.read_string, False),
    ("nullable_string", p.write_nullable_string, p.read_nullable_string, True),
    ("compact_string", p.write_compact_string, p.read_compact_string, False),
    ("compact_nullable_string", p.write_compact_nullable_string, p.read_compact_nullable_string, True),
]


@pytest.mark.parametrize(
    ("name", "write", "read", "nullable"), STRING_CODECS, ids=[c[0] for c in STRING_CODECS]
)
@given(data=st.data())
def test_strings_round_trip(
    name: str, write: Writer, read: Reader, nullable: bool, data: st.DataObject
) -> None:
    strategy = st.text(max_size=300)
    value = data.draw(st.none() | strategy if nullable else strategy)
    _round_trip(write, read, value)


def test_string_encodings() -> None:
    assert p.write_string("ab") == b"\x00\x02ab"
    assert p.write_nullable_string(None) == b"\xff\xff"
    assert p.write_compact_string("ab") == b"\x03ab"
    assert p.write_compact_nullable_string(None) == b"\x00"
    assert p.write_compact_string("") == b"\x01"
    assert p.write_string("é") == b"\x00\x02\xc3\xa9"


def test_null_where_not_nullable() -> None:
    with pytest.raises(RemoteProtocolError, match="null"):
        p.read_string(b"\xff\xff", 0)
    with pytest.raises(RemoteProtocolError, match="null"):
        p.read_compact_string(b"\x00", 0)
    with pytest.raises(RemoteProtocolError, match="null"):
        p.read_bytes(b"\xff\xff\xff\xff", 0)
    with pytest.raises(RemoteProtocolError, match="null"):
        p.read_compact_bytes(b"\x00", 0)
    with pytest.raises(LocalProtocolError):
        p.write_string(None)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        p.write_compact_bytes(None)  # type: ignore[arg-type]


def test_invalid_utf8_is_a_remote_error() -> None:
    with pytest.raises(RemoteProtocolError, match="UTF-8"):
        p.read_string(b"\x00\x02\xff\xfe", 0)
    with pytest.raises(RemoteProtocolError, match="UTF-8"):
        p.read_compact_string(b"\x03\xc3\x28", 0)


def test_string_length_limit() -> None:
    with pytest.raises(LocalProtocolError):
        p.write_string("x" * 0x8000)
    assert len(p.write_compact_string("x" * 0x7FFF)) == 0x7FFF + 3
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        p.read_compact_string(p.write_uvarint(0x8001) + b"x" * 0x8000, 0)


BYTES_CODECS: list[tuple[str, Writer, Reader, bool]] = [
    ("bytes", p.write_bytes, p.read_bytes, False),
    ("nullable_bytes", p.write_nullable_bytes, p.read_nullable_bytes, True),
    ("compact_bytes", p.write_compact_bytes, p.read_compact_bytes, False),
    ("compact_nullable_bytes", p.write_compact_nullable_bytes, p.read_compact_nullable_bytes, True),
]


@pytest.mark.parametrize(
    ("name", "write", "read", "nullable"), BYTES_CODECS, ids=[c[0] for c in BYTES_CODECS]
)
@given(data=st.data())
def test_bytes_round_trip(
    name: str, write: Writer, read: Reader, nullable: bool, data: st.DataObject
) -> None:
    value = data.draw(st.none() | st.binary(max_size=300) if nullable else st.binary(max_size=300))
    _round_trip(write, read, value)


def test_bytes_encodings() -> None:
    assert p.write_bytes(b"\x01") == b"\x00\x00\x00\x01\x01"
    assert p.write_nullable_bytes(None) == b"\xff\xff\xff\xff"
    assert p.write_compact_bytes(b"\x01") == b"\x02\x01"
    assert p.write_compact_nullable_bytes(None) == b"\x00"
    assert p.write_bytes(memoryview(b"ab")) == b"\x00\x00\x00\x02ab"


@given(st.none() | st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20))
def test_array_round_trip(items: list[int] | None) -> None:
    def write(value: list[int] | None) -> bytes:
        return p.write_array(value, p.write_int32)

    def read(buf: Any, pos: int) -> tuple[list[int] | None, int]:
        return p.read_array(buf, pos, p.read_int32)

    _round_trip(write, read, items)


@given(st.none() | st.lists(st.text(max_size=5), max_size=20))
def test_compact_array_round_trip(items: list[str] | None) -> None:
    def write(value: list[str] | None) -> bytes:
        return p.write_compact_array(value, p.write_compact_string)

    def read(buf: Any, pos: int) -> tuple[list[str] | None, int]:
        return p.read_compact_array(buf, pos, p.read_compact_string)

    _round_trip(write, read, items)


def test_array_encodings() -> None:
    assert p.write_array([1, 2], p.write_int16) == b"\x00\x00\x00\x02\x00\x01\x00\x02"
    assert p.write_array(None, p.write_int16) == b"\xff\xff\xff\xff"
    assert p.write_compact_array([1], p.write_int8) == b"\x02\x01"
    assert p.write_compact_array(None, p.write_int8) == b"\x00"


def test_array_count_larger_than_remaining_bytes_is_rejected_before_allocating() -> None:
    with pytest.raises(RemoteProtocolError, match="2147483647 elements"):
        p.read_array(b"\x7f\xff\xff\xff\x00", 0, p.read_int8)
    with pytest.raises(RemoteProtocolError, match="elements"):
        p.read_compact_array(p.write_uvarint(2**32 - 1), 0, p.read_int8)


@given(st.dictionaries(st.integers(0, 2**31 - 1), st.binary(max_size=20), max_size=6))
def test_tagged_fields_round_trip(fields: dict[int, bytes]) -> None:
    _round_trip(p.write_tagged_fields, p.read_tagged_fields, fields)


def test_tagged_fields_are_written_in_ascending_tag_order() -> None:
    assert p.write_tagged_fields({5: b"\x01", 0: b""}) == b"\x02\x00\x00\x05\x01\x01"
    assert p.write_tagged_fields({}) == b"\x00"
    assert p.write_tagged_fields(None) == b"\x00"


def test_errors_carry_kafka_error_codes() -> None:
    assert issubclass(RemoteProtocolError, KafkaProtocolError)
    assert RemoteProtocolError("x").error_code is ErrorCode.INVALID_REQUEST
    assert issubclass(LocalProtocolError, KafkaProtocolError)


@given(st.binary(max_size=40), st.integers(0, 45))
def test_readers_raise_only_remote_protocol_errors_on_arbitrary_bytes(data: bytes, pos: int) -> None:
    readers: list[Reader] = [
        p.read_int8, p.read_int16, p.read_int32, p.read_int64, p.read_uint16, p.read_uint32,
        p.read_bool, p.read_float64, p.read_uuid, p.read_uvarint, p.read_varint, p.read_varlong,
        p.read_string, p.read_nullable_string, p.read_compact_string, p.read_compact_nullable_string,
        p.read_bytes, p.read_nullable_bytes, p.read_compact_bytes, p.read_compact_nullable_bytes,
        p.read_tagged_fields,
    ]  # fmt: skip
    for read in readers:
        try:
            _, new_pos = read(data, pos)
        except RemoteProtocolError:
            continue
        assert pos < new_pos <= len(data)
