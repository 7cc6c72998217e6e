"""Compression codecs: round trips, the exact framings Kafka clients write, and reading theirs."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.compression import XERIAL_MAGIC, Compression, compress, decompress
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import CorruptRecordError, UnsupportedCompressionTypeError

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated since Python 3.11.
pytestmark = pytest.mark.filterwarnings(r"ignore:\w+ is deprecated. Use files\(\) instead:DeprecationWarning")

SIZES = [0, 1, 100, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024, 64 * 1024 + 1, 300_000]


def _data(size: int) -> bytes:
    """Half compressible, half not: exercises both compressed and stored lz4 blocks."""
    pattern = b"tidelog " * (size // 16 + 1)
    noise = bytes((i * 7919 + (i >> 3) * 104729) % 251 for i in range(size))
    return (pattern[: size // 2] + noise)[:size]


@settings(deadline=None)
@given(codec=st.sampled_from(list(Compression)), data=st.binary(max_size=5_000))
def test_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_round_trip_across_block_boundaries(codec: Compression, size: int) -> None:
    data = _data(size)
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data
    assert decompress(codec, bytearray(compress(codec, data))) == data


# ---- snappy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_snappy_writes_xerial_framing_like_java(size: int) -> None:
    import cramjam

    data = _data(size)
    framed = compress(Compression.SNAPPY, data)
    assert framed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(framed)
    assert [len(b) for b in blocks] == [min(32 * 1024, size - i) for i in range(0, max(size, 1), 32 * 1024)]
    assert b"".join(blocks) == data


@pytest.mark.parametrize("size", SIZES)
def test_snappy_interop_with_kafka_python_and_aiokafka(size: int) -> None:
    from aiokafka import codec as aiokafka_codec
    from kafka import codec as kafka_codec

    data = _data(size)
    ours = compress(Compression.SNAPPY, data)
    assert kafka_codec.snappy_decode(ours) == data
    assert aiokafka_codec.snappy_decode(ours) == data
    for theirs in (
        kafka_codec.snappy_encode(data),  # xerial, 32 KiB blocks
        kafka_codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=1_000),
        kafka_codec.snappy_encode(data, xerial_compatible=False),  # raw, as librdkafka writes
        aiokafka_codec.snappy_encode(data),
    ):
        assert decompress(Compression.SNAPPY, theirs) == data


def test_snappy_raw_payload_is_not_mistaken_for_xerial() -> None:
    import cramjam

    data = b"\x82SNAPPY\x00 is how the xerial framing starts" * 10
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


# ---- lz4 ---------------------------------------------------------------------------------------------


def test_lz4_frame_header_is_javas() -> None:
    """Magic, FLG 0x60 (version 1, independent blocks, no checksums), BD 0x40 (64 KiB), header checksum
    0x82: the bytes every lz4 batch from Java's KafkaLZ4BlockOutputStream starts with."""
    assert compress(Compression.LZ4, b"") == bytes.fromhex("04224d18604082") + b"\x00\x00\x00\x00"
    # 10 bytes do not shrink: stored as an uncompressed block (high bit of the block size set).
    assert compress(Compression.LZ4, b"a" * 10) == (
        bytes.fromhex("04224d18604082") + struct.pack("<I", 0x8000000A) + b"a" * 10 + b"\x00\x00\x00\x00"
    )


@pytest.mark.parametrize("size", SIZES)
def test_lz4_interop_with_python_lz4_and_clients(size: int) -> None:
    import lz4.frame
    from aiokafka import codec as aiokafka_codec
    from kafka import codec as kafka_codec

    data = _data(size)
    ours = compress(Compression.LZ4, data)
    assert lz4.frame.decompress(ours) == data  # checks the header checksum
    assert kafka_codec.lz4_decode(ours) == data
    assert aiokafka_codec.lz4_decode(ours) == data
    info = lz4.frame.get_frame_info(ours)
    assert (info["block_linked"], info["content_checksum"], info["block_checksum"]) == (False, False, False)
    assert (info["block_size"], info["content_size"]) == (64 * 1024, 0)
    for theirs in (
        kafka_codec.lz4_encode(data),
        aiokafka_codec.lz4_encode(data),
        lz4.frame.compress(data),
        lz4.frame.compress(data, block_linked=True, content_checksum=True, block_checksum=True),
        lz4.frame.compress(data, store_size=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
    ):
        assert decompress(Compression.LZ4, theirs) == data


# ---- gzip and zstd -----------------------------------------------------------------------------------


def test_gzip_reads_several_members_and_stdlib_output() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"
    assert gzip.decompress(compress(Compression.GZIP, b"xyz" * 1000)) == b"xyz" * 1000


@pytest.mark.parametrize("size", SIZES)
def test_zstd_interop_with_zstandard_and_clients(size: int) -> None:
    import zstandard
    from aiokafka import codec as aiokafka_codec
    from kafka import codec as kafka_codec

    data = _data(size)
    ours = compress(Compression.ZSTD, data)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(ours) == data
    assert kafka_codec.zstd_decode(ours) == data
    assert aiokafka_codec.zstd_decode(ours) == data
    for theirs in (
        kafka_codec.zstd_encode(data),
        aiokafka_codec.zstd_encode(data),
        zstandard.ZstdCompressor(level=19).compress(data),
    ):
        assert decompress(Compression.ZSTD, theirs) == data


def test_zstd_reads_a_stream_without_content_size() -> None:
    import zstandard

    data = _data(200_000)
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = compressor.compress(data) + compressor.flush()
    assert decompress(Compression.ZSTD, frame) == data


# ---- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "codec", [c for c in Compression if c != Compression.NONE], ids=lambda c: c.name.lower()
)
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"not compressed at all, just some bytes" * 3, b"\xff" * 64]
)
def test_garbage_raises_corrupt_record_error(codec: Compression, garbage: bytes) -> None:
    if codec == Compression.SNAPPY and garbage == b"\x00":
        assert decompress(codec, garbage) == b""  # a raw snappy block of length 0
        return
    with pytest.raises(CorruptRecordError) as info:
        decompress(codec, garbage)
    assert info.value.error_code is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(
    "codec", [c for c in Compression if c != Compression.NONE], ids=lambda c: c.name.lower()
)
def test_truncated_payload_raises_corrupt_record_error(codec: Compression) -> None:
    compressed = compress(codec, _data(100_000))
    for cut in (1, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, compressed[:cut])


def test_xerial_block_overrunning_the_payload_is_corrupt() -> None:
    framed = compress(Compression.SNAPPY, b"x" * 100)
    with pytest.raises(CorruptRecordError, match="overruns"):
        decompress(Compression.SNAPPY, framed[:16] + struct.pack(">i", 1_000) + framed[20:])
    with pytest.raises(CorruptRecordError, match="truncated block length"):
        decompress(Compression.SNAPPY, framed + b"\x00\x00")


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_ids(codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError) as info:
        Compression.of(codec_id)
    assert info.value.error_code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec_id, b"x")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec_id, b"x")  # type: ignore[arg-type]
