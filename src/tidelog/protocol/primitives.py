"""Kafka's primitive wire types, and the errors that blame one side of the wire.

Invariants:

- Every ``read_*`` takes ``(buf, pos)`` and returns ``(value, new_pos)``; ``buf`` is any bytes-like
  object. Malformed or truncated input raises :class:`RemoteProtocolError`, never ``IndexError``,
  ``struct.error`` or ``UnicodeDecodeError``.
- Every ``write_*`` returns the encoding as ``bytes``; a value that cannot be encoded (out of range,
  too long, ``None`` where null is not allowed) raises :class:`LocalProtocolError`.
- Big-endian fixed-width integers; varints are protobuf-style base-128 (an unsigned varint is at
  most 5 bytes, a varlong at most 10); signed varints are zigzag-encoded.
- Classic strings carry an int16 length (-1 = null), bytes and arrays an int32 length (-1 = null);
  compact forms carry ``length + 1`` as an unsigned varint (0 = null).
- A tagged-field section is an unsigned-varint count, then ``(tag, size, bytes)`` triples in
  ascending tag order.

The codec (``tidelog.protocol.codec``) inlines these encodings in generated code for speed; these
functions are the readable reference and the building blocks for everything else.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias, TypeVar
from uuid import UUID

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = [
    "BOOLEAN",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT16",
    "UINT32",
    "Buffer",
    "LocalProtocolError",
    "RemoteProtocolError",
    "read_array",
    "read_bool",
    "read_bytes",
    "read_compact_array",
    "read_compact_bytes",
    "read_compact_nullable_bytes",
    "read_compact_nullable_string",
    "read_compact_string",
    "read_float64",
    "read_int8",
    "read_int16",
    "read_int32",
    "read_int64",
    "read_nullable_bytes",
    "read_nullable_string",
    "read_string",
    "read_tagged_fields",
    "read_uint16",
    "read_uint32",
    "read_uuid",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "write_array",
    "write_bool",
    "write_bytes",
    "write_compact_array",
    "write_compact_bytes",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_string",
    "write_float64",
    "write_int8",
    "write_int16",
    "write_int32",
    "write_int64",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_string",
    "write_tagged_fields",
    "write_uint16",
    "write_uint32",
    "write_uuid",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]

Buffer: TypeAlias = bytes | bytearray | memoryview
T = TypeVar("T")


class RemoteProtocolError(KafkaProtocolError):
    """The peer sent bytes that do not parse: a malformed frame, header or body.

    The server answers by closing the connection (Kafka's behaviour for unparsable requests).
    """

    error_code = ErrorCode.INVALID_REQUEST


class LocalProtocolError(KafkaProtocolError):
    """We were asked to encode something the protocol cannot carry (a bug on our side)."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOLEAN = struct.Struct(">?")
_UUID = struct.Struct(">16s")

MAX_STRING_LENGTH = 0x7FFF
"""Kafka rejects strings longer than this (int16 length) in classic and compact forms alike."""


def _truncated(what: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"truncated {what}")


# -- fixed width -------------------------------------------------------------------------------


def _reader(fmt: struct.Struct, what: str) -> Callable[[Buffer, int], tuple[int, int]]:
    size = fmt.size

    def read(buf: Buffer, pos: int) -> tuple[int, int]:
        if pos < 0 or pos + size > len(buf):
            raise _truncated(what)
        return fmt.unpack_from(buf, pos)[0], pos + size

    read.__name__ = f"read_{what}"
    read.__doc__ = f"Read a big-endian {what}."
    return read


def _writer(fmt: struct.Struct, what: str) -> Callable[[int], bytes]:
    def write(value: int) -> bytes:
        try:
            return fmt.pack(value)
        except struct.error as exc:
            raise LocalProtocolError(f"cannot encode {value!r} as {what}: {exc}") from None

    write.__name__ = f"write_{what}"
    write.__doc__ = f"Encode a big-endian {what}."
    return write


read_int8 = _reader(INT8, "int8")
read_int16 = _reader(INT16, "int16")
read_int32 = _reader(INT32, "int32")
read_int64 = _reader(INT64, "int64")
read_uint16 = _reader(UINT16, "uint16")
read_uint32 = _reader(UINT32, "uint32")
write_int8 = _writer(INT8, "int8")
write_int16 = _writer(INT16, "int16")
write_int32 = _writer(INT32, "int32")
write_int64 = _writer(INT64, "int64")
write_uint16 = _writer(UINT16, "uint16")
write_uint32 = _writer(UINT32, "uint32")


def read_bool(buf: Buffer, pos: int) -> tuple[bool, int]:
    """Read a boolean byte; any non-zero value is true (as Kafka's ``readByte() != 0``)."""
    if pos < 0 or pos >= len(buf):
        raise _truncated("bool")
    return buf[pos] != 0, pos + 1


def write_bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def read_float64(buf: Buffer, pos: int) -> tuple[float, int]:
    if pos < 0 or pos + 8 > len(buf):
        raise _truncated("float64")
    value: float = FLOAT64.unpack_from(buf, pos)[0]
    return value, pos + 8


def write_float64(value: float) -> bytes:
    try:
        return FLOAT64.pack(value)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode {value!r} as float64: {exc}") from None


def read_uuid(buf: Buffer, pos: int) -> tuple[UUID, int]:
    if pos < 0 or pos + 16 > len(buf):
        raise _truncated("uuid")
    return UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def write_uuid(value: UUID) -> bytes:
    return value.bytes


# -- varints -----------------------------------------------------------------------------------

_UVARINT_1 = tuple(bytes((i,)) for i in range(128))


def read_uvarint(buf: Buffer, pos: int, *, max_bytes: int = 5) -> tuple[int, int]:
    """Read an unsigned varint (at most ``max_bytes`` long: 5 for 32-bit, 10 for 64-bit values)."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end or pos < 0:
            raise _truncated("varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise RemoteProtocolError("varint is too long")


def write_uvarint(value: int) -> bytes:
    """Encode an unsigned varint."""
    if 0 <= value < 128:
        return _UVARINT_1[value]
    if value < 0:
        raise LocalProtocolError(f"cannot encode {value} as an unsigned varint")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed 32-bit varint."""
    n, pos = read_uvarint(buf, pos, max_bytes=5)
    if n > 0xFFFFFFFF:
        raise RemoteProtocolError("varint out of int32 range")
    return (n >> 1) ^ -(n & 1), pos


def write_varint(value: int) -> bytes:
    if not -(2**31) <= value < 2**31:
        raise LocalProtocolError(f"cannot encode {value} as a varint (int32)")
    return write_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed 64-bit varint."""
    n, pos = read_uvarint(buf, pos, max_bytes=10)
    if n > 0xFFFFFFFFFFFFFFFF:
        raise RemoteProtocolError("varlong out of int64 range")
    return (n >> 1) ^ -(n & 1), pos


def write_varlong(value: int) -> bytes:
    if not -(2**63) <= value < 2**63:
        raise LocalProtocolError(f"cannot encode {value} as a varlong (int64)")
    return write_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# -- strings and bytes -------------------------------------------------------------------------


def _slice(buf: Buffer, pos: int, length: int, what: str) -> tuple[memoryview, int]:
    end = pos + length
    if end > len(buf):
        raise _truncated(what)
    return memoryview(buf)[pos:end], end


def _utf8(view: memoryview) -> str:
    try:
        return str(view, "utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"string is not valid UTF-8: {exc.reason}") from None


def _check_string_length(length: int) -> None:
    if length > MAX_STRING_LENGTH:
        raise RemoteProtocolError(f"string length {length} exceeds {MAX_STRING_LENGTH}")


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    length, pos = read_int16(buf, pos)
    if length < 0:
        return None, pos
    view, pos = _slice(buf, pos, length, "string")
    return _utf8(view), pos


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, pos = read_nullable_string(buf, pos)
    if value is None:
        raise RemoteProtocolError("non-nullable string was null")
    return value, pos


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    _check_string_length(n - 1)
    view, pos = _slice(buf, pos, n - 1, "compact string")
    return _utf8(view), pos


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, pos = read_compact_nullable_string(buf, pos)
    if value is None:
        raise RemoteProtocolError("non-nullable compact string was null")
    return value, pos


def _encode_utf8(value: str) -> bytes:
    try:
        data = value.encode("utf-8")
    except (AttributeError, UnicodeEncodeError) as exc:
        raise LocalProtocolError(f"cannot encode {value!r} as a string: {exc}") from None
    if len(data) > MAX_STRING_LENGTH:
        raise LocalProtocolError(f"string of {len(data)} bytes exceeds {MAX_STRING_LENGTH}")
    return data


def write_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    data = _encode_utf8(value)
    return INT16.pack(len(data)) + data


def write_string(value: str) -> bytes:
    if value is None:
        raise LocalProtocolError("non-nullable string is None")
    return write_nullable_string(value)


def write_compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = _encode_utf8(value)
    return write_uvarint(len(data) + 1) + data


def write_compact_string(value: str) -> bytes:
    if value is None:
        raise LocalProtocolError("non-nullable compact string is None")
    return write_compact_nullable_string(value)


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_int32(buf, pos)
    if length < 0:
        return None, pos
    view, pos = _slice(buf, pos, length, "bytes")
    return bytes(view), pos


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, pos = read_nullable_bytes(buf, pos)
    if value is None:
        raise RemoteProtocolError("non-nullable bytes were null")
    return value, pos


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    view, pos = _slice(buf, pos, n - 1, "compact bytes")
    return bytes(view), pos


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, pos = read_compact_nullable_bytes(buf, pos)
    if value is None:
        raise RemoteProtocolError("non-nullable compact bytes were null")
    return value, pos


def write_nullable_bytes(value: Buffer | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    data = bytes(value)
    return INT32.pack(len(data)) + data


def write_bytes(value: Buffer) -> bytes:
    if value is None:
        raise LocalProtocolError("non-nullable bytes are None")
    return write_nullable_bytes(value)


def write_compact_nullable_bytes(value: Buffer | None) -> bytes:
    if value is None:
        return b"\x00"
    data = bytes(value)
    return write_uvarint(len(data) + 1) + data


def write_compact_bytes(value: Buffer) -> bytes:
    if value is None:
        raise LocalProtocolError("non-nullable compact bytes are None")
    return write_compact_nullable_bytes(value)


# -- arrays ------------------------------------------------------------------------------------


def _read_elements(
    buf: Buffer, pos: int, count: int, read_element: Callable[[Buffer, int], tuple[T, int]]
) -> tuple[list[T], int]:
    # Kafka's rule: a count larger than the remaining bytes is malformed (each element takes >= 1 byte).
    if count > len(buf) - pos:
        raise RemoteProtocolError(f"array of {count} elements with {len(buf) - pos} bytes left")
    items: list[T] = []
    for _ in range(count):
        item, pos = read_element(buf, pos)
        items.append(item)
    return items, pos


def read_array(
    buf: Buffer, pos: int, read_element: Callable[[Buffer, int], tuple[T, int]]
) -> tuple[list[T] | None, int]:
    """Read a classic array (int32 count, -1 = null)."""
    count, pos = read_int32(buf, pos)
    if count < 0:
        return None, pos
    return _read_elements(buf, pos, count, read_element)


def read_compact_array(
    buf: Buffer, pos: int, read_element: Callable[[Buffer, int], tuple[T, int]]
) -> tuple[list[T] | None, int]:
    """Read a compact array (unsigned varint count + 1, 0 = null)."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return _read_elements(buf, pos, n - 1, read_element)


def write_array(items: Sequence[T] | None, write_element: Callable[[T], bytes]) -> bytes:
    if items is None:
        return b"\xff\xff\xff\xff"
    return INT32.pack(len(items)) + b"".join(write_element(item) for item in items)


def write_compact_array(items: Sequence[T] | None, write_element: Callable[[T], bytes]) -> bytes:
    if items is None:
        return b"\x00"
    return write_uvarint(len(items) + 1) + b"".join(write_element(item) for item in items)


# -- tagged fields -----------------------------------------------------------------------------


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, bytes], int]:
    """Read a tagged-field section as ``{tag: raw value bytes}``."""
    count, pos = read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise RemoteProtocolError(f"{count} tagged fields with {len(buf) - pos} bytes left")
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        view, pos = _slice(buf, pos, size, "tagged field")
        fields[tag] = bytes(view)
    return fields, pos


def write_tagged_fields(fields: Mapping[int, Buffer] | None) -> bytes:
    """Encode a tagged-field section; tags are written in ascending order."""
    if not fields:
        return b"\x00"
    parts = [write_uvarint(len(fields))]
    for tag in sorted(fields):
        value = fields[tag]
        parts.append(write_uvarint(tag))
        parts.append(write_uvarint(len(value)))
        parts.append(bytes(value))
    return b"".join(parts)
