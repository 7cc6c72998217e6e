"""decompress_bounded: every codec's payload comes back whole up to the cap, and one byte over it, a bomb
or a lying length is refused with CorruptRecordError naming the codec and the limit."""

from __future__ import annotations

import pytest
from tests.support.abuse import bomb

from tidelog.protocol.compression import Compression, compress, decompress_bounded
from tidelog.protocol.records import CorruptRecordError

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
DATA = bytes(range(256)) * 1000 + b"\x00" * 300_000  # grows the output buffer past its first guess


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_round_trip_up_to_the_cap(codec: Compression) -> None:
    assert decompress_bounded(codec, compress(codec, DATA), len(DATA)) == DATA
    assert decompress_bounded(codec, compress(codec, b""), 0) == b""


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_one_byte_over_the_cap_is_refused(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=f"limit of {len(DATA) - 1}"):
        decompress_bounded(codec, compress(codec, DATA), len(DATA) - 1)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name.lower())
def test_a_bomb_is_refused(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=rf"^{codec.name} payload of \d+ bytes .*limit of 1048576"):
        decompress_bounded(codec, bomb(codec, 64 << 20), 1 << 20)


def test_corrupt_payload_is_refused() -> None:
    with pytest.raises(CorruptRecordError, match="GZIP payload of 10 bytes does not decompress"):
        decompress_bounded(Compression.GZIP, b"garbage!!!", 1 << 20)


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD], ids=lambda c: c.name.lower()
)
def test_a_malformed_payload_fails_at_the_first_attempt(
    codec: Compression, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed payload is refused at once, not retried into ever larger buffers up to the cap (1 GiB of
    zero-filling per read of such a batch with the default limit)."""
    import tidelog.protocol.compression as compression

    damaged = bytes(compress(codec, DATA))[:12] + b"\xff" * 200  # its header, then garbage
    sizes: list[int] = []
    real = compression._INTO[codec]

    def counting(data: object, out: bytearray) -> int:
        sizes.append(len(out))
        return int(real(data, out))  # type: ignore[arg-type]

    monkeypatch.setitem(compression._INTO, codec, counting)
    with pytest.raises(CorruptRecordError, match=f"^{codec.name} payload of .* does not decompress"):
        decompress_bounded(codec, damaged, 1 << 30)
    assert len(sizes) == 1
