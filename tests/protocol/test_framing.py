"""FrameDecoder: frames fed whole, byte by byte, split anywhere, with trailing bytes; size limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.framing import NEED_DATA, FrameDecoder, FrameSizeError, encode_frame
from tidelog.protocol.primitives import RemoteProtocolError

PAYLOADS = [b"first", b"", b"\x00" * 300, b"last frame"]
STREAM = b"".join(encode_frame(p) for p in PAYLOADS)


def test_encode_frame() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(memoryview(b"")) == b"\x00\x00\x00\x00"


def test_whole_stream_at_once() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    assert decoder.feed(STREAM) == PAYLOADS
    assert decoder.buffered_bytes == 0
    assert decoder.next_frame() is NEED_DATA


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    frames: list[bytes] = []
    for i in range(len(STREAM)):
        frames.extend(decoder.feed(STREAM[i : i + 1]))
    assert frames == PAYLOADS
    assert decoder.buffered_bytes == 0


def test_trailing_partial_frame_is_kept_until_complete() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    assert decoder.feed(STREAM + b"\x00\x00\x00\x05ab") == PAYLOADS
    assert decoder.buffered_bytes == 6
    assert decoder.next_frame() is NEED_DATA
    assert decoder.feed(b"c") == []
    assert decoder.feed(b"de\x00") == [b"abcde"]
    assert decoder.buffered_bytes == 1


def test_receive_data_and_next_frame() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    decoder.receive_data(bytearray(STREAM))
    assert [decoder.next_frame() for _ in range(5)] == [*PAYLOADS, NEED_DATA]


def test_memoryview_input() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    assert decoder.feed(memoryview(STREAM)[:7]) == []
    assert decoder.feed(memoryview(STREAM)[7:]) == PAYLOADS


@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
def test_any_split_yields_the_same_frames(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder(max_frame_bytes=50)
    frames: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        frames.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert frames == payloads
    assert decoder.buffered_bytes == 0


def test_size_above_the_maximum_is_rejected_as_soon_as_the_prefix_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameSizeError) as info:
        decoder.feed(b"\x00\x65")  # 101: nothing of the body has arrived
    assert info.value.size == 101
    assert info.value.max_frame_bytes == 100
    assert info.value.error_code is ErrorCode.INVALID_REQUEST
    assert isinstance(info.value, RemoteProtocolError)
    with pytest.raises(FrameSizeError):
        decoder.feed(b"more")


def test_huge_size_is_rejected_without_allocating() -> None:
    decoder = FrameDecoder(max_frame_bytes=100 * 1024 * 1024)
    with pytest.raises(FrameSizeError, match="larger than the maximum"):
        decoder.feed(b"\x7f\xff\xff\xff")


def test_negative_size_is_rejected() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameSizeError, match="invalid frame size -1"):
        decoder.feed(b"\xff\xff\xff\xff")


def test_frames_before_a_bad_size_are_handed_out_first() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(b"\x00\x00\x00\x01x\x00\x00\x00\x01y\xff\xff\xff\xff") == [b"x", b"y"]
    with pytest.raises(FrameSizeError, match="-1"):
        decoder.feed(b"")
    with pytest.raises(FrameSizeError, match="-1"):
        decoder.next_frame()


def test_frames_before_a_bad_size_in_the_same_chunk_are_not_lost_on_the_slow_path() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.feed(b"\x00")
    decoder.receive_data(b"\x00\x00\x01x\x00\x00\x00\x0b")
    assert decoder.next_frame() == b"x"
    with pytest.raises(FrameSizeError):
        decoder.next_frame()


def test_exactly_the_maximum_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=3)
    assert decoder.feed(b"\x00\x00\x00\x03abc") == [b"abc"]


def test_large_frame_in_many_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_frame(payload) + encode_frame(b"next")
    decoder = FrameDecoder(max_frame_bytes=len(payload))
    frames: list[bytes] = []
    for start in range(0, len(stream), 65536):
        frames.extend(decoder.feed(stream[start : start + 65536]))
    assert frames == [payload, b"next"]


def test_negative_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        FrameDecoder(max_frame_bytes=-1)


@settings(max_examples=300)
@given(st.binary(max_size=64), st.integers(1, 8))
def test_arbitrary_bytes_yield_frames_or_a_frame_size_error(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=16)
    try:
        for start in range(0, len(data), chunk):
            for frame in decoder.feed(data[start : start + chunk]):
                assert len(frame) <= 16
    except FrameSizeError:
        pass


def test_writable_frames_are_bytearrays() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000, writable_frames=True)
    frames = decoder.feed(STREAM[:3]) + decoder.feed(STREAM[3:])
    assert frames == PAYLOADS
    assert all(type(frame) is bytearray for frame in frames)
    fast = FrameDecoder(max_frame_bytes=1000, writable_frames=True).feed(STREAM)
    assert all(type(frame) is bytearray for frame in fast)


def test_a_chunk_completing_a_buffered_frame_hands_out_the_frames_after_it_in_order() -> None:
    """A read that finishes a frame begun in the previous one: that frame, then the whole frames after it
    (sliced from the read itself), then a new partial one kept; as frames, as bytes: the same stream."""
    decoder = FrameDecoder(max_frame_bytes=1000, writable_frames=True)
    stream = b"".join(encode_frame(p) for p in [b"a" * 10, b"b" * 20, b"", b"c" * 5, b"d" * 30])
    first_cut = 4 + 10 + 4 + 7  # frame "a" whole, frame "b" begun (its prefix and 7 bytes)
    assert decoder.feed(stream[:first_cut]) == [b"a" * 10]
    assert decoder.buffered_bytes == 11
    second_cut = len(stream) - 12  # "b"'s rest, "", "c"*5 and "d"'s prefix and 18 bytes
    decoder.receive_data(bytearray(stream[first_cut:second_cut]))
    assert decoder.buffered_bytes == 4 + 20 + 4 + 4 + 5 + 4 + 18
    frames = [decoder.next_frame() for _ in range(4)]
    assert frames == [b"b" * 20, b"", b"c" * 5, NEED_DATA]
    assert all(type(frame) is bytearray for frame in frames[:3])
    assert decoder.buffered_bytes == 22
    assert decoder.feed(memoryview(stream)[second_cut:]) == [b"d" * 30]
    assert decoder.buffered_bytes == 0


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=10), st.data())
def test_frames_come_out_in_order_whatever_is_received_before_they_are_taken(
    payloads: list[bytes], data: st.DataObject
) -> None:
    """Reads and takes interleaved arbitrarily (a paused connection receives more before it takes what it
    has): every frame comes out once, in stream order, and the buffered count is what is left."""
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = FrameDecoder(max_frame_bytes=40, writable_frames=data.draw(st.booleans()))
    frames: list[bytes | bytearray] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        chunk = stream[start:cut]
        decoder.receive_data(data.draw(st.sampled_from([bytes, bytearray, memoryview]))(chunk))
        start = cut
        for _ in range(data.draw(st.integers(0, 3))):
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                break
            frames.append(frame)
        taken = sum(len(f) + 4 for f in frames)
        assert decoder.buffered_bytes == start - taken
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    assert frames == payloads
    assert decoder.buffered_bytes == 0
