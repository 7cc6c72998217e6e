"""Size-prefixed Kafka frames out of a byte stream: bytes in, whole frames (or NEED_DATA) out.

Invariants:

- A frame on the wire is a big-endian int32 size followed by that many bytes; the frames this
  module returns are the bytes *after* the size prefix (what ``codec.decode_request`` takes).
- A size below zero or above ``max_frame_bytes`` raises :class:`FrameSizeError` as soon as the four
  size bytes have arrived, before anything is allocated for the frame; frames that preceded the
  bad size are handed out first. After that error every call raises it again (the stream is out
  of sync); the caller closes the connection.
- Work is linear in the bytes fed: data is appended to one buffer and consumed through a read
  offset, which is compacted only when more than half the buffer is consumed. Whole frames found
  in a chunk fed to an empty decoder are sliced out of that chunk directly, and so are those that follow
  the rest of a frame begun in an earlier chunk (that frame is completed in the buffer first); frames
  come out in stream order whatever path each took.
- Frames are ``bytes``, or ``bytearray`` with ``writable_frames=True``: then the ``records``
  memoryviews that ``codec.decode_request`` slices out of a frame are writable, so record batches
  can have their offsets assigned in place without a copy.
- No I/O, no clock, no threads.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from typing import Final, Literal

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.primitives import Buffer, RemoteProtocolError

__all__ = ["NEED_DATA", "FrameDecoder", "FrameSizeError", "NeedData", "encode_frame"]

_SIZE = struct.Struct(">i")


class NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned by :meth:`FrameDecoder.next_frame` when no whole frame is buffered yet."""


class FrameSizeError(RemoteProtocolError):
    """A frame's size prefix is negative or above the limit (Kafka's ``InvalidReceiveException``)."""

    error_code = ErrorCode.INVALID_REQUEST

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        if size < 0:
            message = f"invalid frame size {size}"
        else:
            message = f"frame size {size} is larger than the maximum {max_frame_bytes}"
        super().__init__(message)
        self.size = size
        self.max_frame_bytes = max_frame_bytes


def encode_frame(payload: Buffer) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into size-prefixed frames.

    >>> decoder = FrameDecoder(max_frame_bytes=100)
    >>> decoder.feed(b"\\x00\\x00\\x00\\x02hi\\x00\\x00")
    [b'hi']
    >>> decoder.next_frame()
    <NeedData.NEED_DATA: 'NEED_DATA'>
    """

    __slots__ = ("_buffer", "_error", "_frame_type", "_max", "_offset", "_ready", "_size")

    def __init__(self, max_frame_bytes: int, *, writable_frames: bool = False) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self._max = max_frame_bytes
        self._frame_type: type[bytes] | type[bytearray] = bytearray if writable_frames else bytes
        self._buffer = bytearray()
        self._offset = 0
        self._size = -1  # size of the frame being assembled, -1 while its prefix is incomplete
        self._error: FrameSizeError | None = None  # once set, every later call raises it
        self._ready: deque[bytes | bytearray] = deque()  # frames found by the fast path, not yet returned

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        """Change the limit for frames not yet sized (a SASL listener raises it once authenticated)."""
        if value < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self._max = value

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames (size prefixes included)."""
        pending_prefix = 4 if self._size >= 0 else 0
        ready = sum(len(frame) + 4 for frame in self._ready)
        return len(self._buffer) - self._offset + pending_prefix + ready

    def feed(self, data: Buffer) -> list[bytes | bytearray]:
        """Add received bytes and return every frame now complete (possibly none)."""
        self.receive_data(data)
        frames: list[bytes | bytearray] = []
        while True:
            try:
                frame = self.next_frame()
            except FrameSizeError as exc:
                if not frames:
                    raise
                # Hand out the frames that preceded the bad size first; raise on the next call.
                self._error = exc
                return frames
            if frame is NEED_DATA:
                return frames
            frames.append(frame)

    def receive_data(self, data: Buffer) -> None:
        """Add received bytes; take frames out with :meth:`next_frame`."""
        self._raise_if_failed()
        if not data:
            return
        if self._buffer or self._size >= 0:
            if self._size < 0 or len(self._buffer) - self._offset + len(data) < self._size:
                self._buffer += data  # the frame begun in the buffer is not whole yet (or not even sized)
                return
            data = self._complete_buffered(data)
            if not data:
                return
        data = self._take_whole_frames(data)
        if data:
            self._buffer += data

    def _complete_buffered(self, data: Buffer) -> Buffer:
        """The buffer holds the start of one sized frame (its prefix read by :meth:`next_frame`, which
        found it not whole: nothing follows it there) and ``data`` holds the rest of it: the frame goes
        to the ready frames, the buffer is emptied and what follows the frame in ``data`` is returned,
        for the fast path (the frames of a read that began in an earlier one are not copied into the
        buffer first: issue 17, many pipelined produces per read)."""
        view = memoryview(data).cast("B")  # slices without copies (a bytes slice is a copy)
        buffer = self._buffer
        start = self._offset
        missing = start + self._size - len(buffer)
        buffer += view[:missing]
        with memoryview(buffer) as whole:
            self._ready.append(self._frame_type(whole[start:]))
        buffer.clear()
        self._offset = 0
        self._size = -1
        return view[missing:]

    def _take_whole_frames(self, data: Buffer) -> Buffer:
        # Fast path for an empty decoder: whole frames are sliced straight out of ``data``. A frame is one
        # copy of its bytes: sliced from bytes when frames are bytes, else taken from a memoryview's slice
        # (a bytes slice would be a second copy before the bytearray's).
        view = data if isinstance(data, bytes) and self._frame_type is bytes else memoryview(data).cast("B")
        pos = 0
        end = len(view)
        ready = self._ready
        while end - pos >= 4:
            size = _SIZE.unpack_from(view, pos)[0]
            if size < 0 or size > self._max or end - pos - 4 < size:
                break  # a bad size is reported by next_frame, after the frames before it
            ready.append(self._frame_type(view[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return view[pos:] if pos else view

    def next_frame(self) -> bytes | bytearray | Literal[NeedData.NEED_DATA]:
        """The next whole frame, or :data:`NEED_DATA`."""
        if self._ready:
            return self._ready.popleft()
        self._raise_if_failed()
        buffer = self._buffer
        if self._size < 0:
            if len(buffer) - self._offset < 4:
                return NEED_DATA
            size = _SIZE.unpack_from(buffer, self._offset)[0]
            self._check(size)
            self._size = size
            self._offset += 4
        start = self._offset
        stop = start + self._size
        if stop > len(buffer):
            return NEED_DATA
        with memoryview(buffer) as view:
            frame = self._frame_type(view[start:stop])
        self._size = -1
        self._offset = stop
        self._compact()
        return frame

    def _check(self, size: int) -> None:
        if size < 0 or size > self._max:
            self._error = FrameSizeError(size, self._max)
            raise self._error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _compact(self) -> None:
        buffer = self._buffer
        if self._offset == len(buffer):
            buffer.clear()
            self._offset = 0
        elif self._offset > len(buffer) // 2:
            del buffer[: self._offset]
            self._offset = 0
