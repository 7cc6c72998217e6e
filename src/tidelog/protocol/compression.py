"""Compression codecs of Kafka record batches (attributes bits 0-2): none, gzip, snappy, lz4, zstd.

Invariants:

* ``decompress(codec, compress(codec, data)) == data`` for every codec and every ``data``.
* What we write, every Kafka client reads: gzip is RFC 1952; snappy is the xerial framing Kafka's Java
  client writes (``\\x82SNAPPY\\x00``, version 1, compatible 1, then ``int32 length + raw block`` per 32 KiB
  of input); lz4 is the LZ4 frame format with independent 64 KiB blocks and no checksums, exactly what
  Java's ``KafkaLZ4BlockOutputStream`` writes (Java cannot read linked blocks); zstd is a standard frame.
* What any client writes, we read: snappy both raw (librdkafka) and xerial-framed (Java, kafka-python,
  aiokafka); lz4 frames with or without block/content checksums, linked or independent blocks; gzip with
  several members; zstd frames with or without a content size.
* Bounded: :func:`decompress_bounded` never holds more than ``max_size + 1`` output bytes, whatever the
  payload claims (a decompression bomb: a 1 KiB batch that inflates to 1 GiB), and refuses a payload that
  inflates to more with :class:`CorruptRecordError`. It decompresses into a preallocated buffer (cramjam's
  ``decompress_into``), growing it geometrically up to the cap; snappy's declared lengths are checked first.
* Pure: no I/O. Malformed input raises :class:`CorruptRecordError` (``CORRUPT_MESSAGE``); an unknown
  codec id raises :class:`UnsupportedCompressionTypeError`.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

import cramjam

from tidelog.protocol.records_errors import CorruptRecordError, UnsupportedCompressionTypeError

__all__ = ["Compression", "compress", "decompress", "decompress_bounded"]

Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    """The codec of a batch: the value of its attributes bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def of(cls, codec_id: int) -> Compression:
        """The codec for attribute bits ``codec_id``; :class:`UnsupportedCompressionTypeError` if none."""
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec_id}") from None


# ---- snappy: raw blocks and the xerial framing ---------------------------------------------------------

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES: Final = 32 * 1024
_INT32: Final = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    # Empty input still gets one (empty) block: the Python clients only detect the framing in payloads
    # longer than its 16-byte header.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < 16:
        return bytes(cramjam.snappy.decompress_raw(view))
    parts = []
    pos, end = 16, len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy: truncated block length at {pos}")
        (block_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_len < 0 or pos + block_len > end:
            raise CorruptRecordError(f"xerial snappy: block of {block_len} bytes at {pos} overruns {end}")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + block_len])))
        pos += block_len
    return b"".join(parts)


# ---- lz4: frame format with independent blocks ----------------------------------------------------------

_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_BYTES: Final = 64 * 1024
_LZ4_UNCOMPRESSED_BIT: Final = 0x80000000
_UINT32_LE: Final = struct.Struct("<I")


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a few bytes (only used for the 2-byte lz4 frame descriptor, computed once)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    assert len(data) < 16
    acc = (seed + p5 + len(data)) & mask
    pos = 0
    while pos + 4 <= len(data):
        (lane,) = _UINT32_LE.unpack_from(data, pos)
        acc = (rotl((acc + lane * p3) & mask, 17) * p4) & mask
        pos += 4
    for byte in data[pos:]:
        acc = (rotl((acc + byte * p5) & mask, 11) * p1) & mask
    acc ^= acc >> 15
    acc = (acc * p2) & mask
    acc ^= acc >> 13
    acc = (acc * p3) & mask
    acc ^= acc >> 16
    return acc


# FLG: version 01, block independence; BD: 64 KiB max block size. HC = second byte of xxh32(FLG, BD).
_LZ4_DESCRIPTOR: Final = bytes((0x60, 0x40))
_LZ4_FRAME_HEADER: Final = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes(((_xxh32(_LZ4_DESCRIPTOR) >> 8) & 0xFF,))
_LZ4_END_MARK: Final = b"\x00\x00\x00\x00"


def _lz4_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_LZ4_FRAME_HEADER]
    for start in range(0, len(view), _LZ4_BLOCK_BYTES):
        chunk = view[start : start + _LZ4_BLOCK_BYTES]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts.append(_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT))
            parts.append(bytes(chunk))
        else:
            parts.append(_UINT32_LE.pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data: Buffer) -> bytes:
    return bytes(cramjam.lz4.decompress(data))


# ---- registry ------------------------------------------------------------------------------------------


def compress(codec: Compression, data: Buffer) -> bytes:
    """``data`` compressed with ``codec`` in the form Kafka's Java client writes."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=6))
    if codec == Compression.SNAPPY:
        return _snappy_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


def decompress(codec: Compression, data: Buffer) -> bytes:
    """The bytes ``data`` holds compressed with ``codec``; :class:`CorruptRecordError` if malformed."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec == Compression.LZ4:
            return _lz4_decompress(data)
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"{Compression(codec).name} payload does not decompress: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


# ---- bounded decompression (untrusted payloads) ----------------------------------------------------------

_FIRST_GUESS_RATIO: Final = 4
_MIN_GUESS: Final = 64 * 1024
_GROWTH: Final = 4


def _snappy_declared_size(view: memoryview) -> int:
    """The uncompressed size snappy's own length fields declare (raw, or the sum of xerial blocks)."""
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < 16:
        return int(cramjam.snappy.decompress_raw_len(view))
    total, pos, end = 0, 16, len(view)
    while pos + 4 <= end:
        (block_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_len < 0 or pos + block_len > end:
            break  # the decompression itself reports the overrun
        total += int(cramjam.snappy.decompress_raw_len(view[pos : pos + block_len]))
        pos += block_len
    return total


def _gzip_size_hint(view: memoryview) -> int:
    """ISIZE, the last member's uncompressed size mod 2**32 (a hint only: it may lie)."""
    return _UINT32_LE.unpack_from(view, len(view) - 4)[0] if len(view) >= 18 else 0


_INTO: Final = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


def decompress_bounded(codec: Compression, data: Buffer, max_size: int) -> bytearray:
    """The bytes ``data`` holds compressed with ``codec``, if they are at most ``max_size``;
    :class:`CorruptRecordError` if malformed or larger, having held at most ``max_size + 1`` bytes."""
    view = memoryview(data)
    name = Compression(codec).name
    try:
        if codec == Compression.NONE:
            if len(view) > max_size:
                raise CorruptRecordError(f"payload of {len(view)} bytes is over the limit of {max_size}")
            return bytearray(view)
        if codec == Compression.SNAPPY:
            declared = _snappy_declared_size(view)
            if declared > max_size:
                raise CorruptRecordError(
                    f"SNAPPY payload of {len(view)} bytes declares {declared} bytes uncompressed, "
                    f"over the limit of {max_size}"
                )
            return bytearray(_snappy_decompress(view))
        into = _INTO.get(codec)
        if into is None:
            raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")
        guess = max(_MIN_GUESS, _FIRST_GUESS_RATIO * len(view))
        if codec == Compression.GZIP:
            guess = max(guess, _gzip_size_hint(view) + 1)
        size = min(guess, max_size + 1)
        while True:
            out = bytearray(size)
            try:
                written = int(into(view, out))
            except cramjam.DecompressionError as exc:
                # cramjam says "failed to write whole buffer" (all three codecs) when the output buffer
                # filled up; anything else is a malformed payload, which no larger buffer mends: fail now
                # rather than zero-fill buffers up to the limit.
                if "whole buffer" not in str(exc):
                    raise
                if size > max_size:
                    raise CorruptRecordError(
                        f"{name} payload of {len(view)} bytes inflates to more than the limit of "
                        f"{max_size} bytes"
                    ) from None
                size = min(size * _GROWTH, max_size + 1)
                continue
            if written < size:
                del out[written:]
                return out
            if size > max_size:
                raise CorruptRecordError(
                    f"{name} payload of {len(view)} bytes inflates to more than the limit of {max_size} bytes"
                )
            size = min(size * _GROWTH, max_size + 1)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"{name} payload of {len(view)} bytes does not decompress within the limit of {max_size} bytes "
            f"(corrupt, or inflating past it): {exc}"
        ) from exc
