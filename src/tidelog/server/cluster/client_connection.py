"""One inter-broker client connection: requests pipelined on it, responses matched to them by correlation id.

Invariants:

- A Kafka broker answers the requests of one connection in the order they arrived, so a response belongs
  to the oldest request in flight: ``_in_flight`` is a FIFO and a response must carry the correlation id
  at its head. A response with another correlation id, a frame with nothing in flight, a frame larger than
  ``max_response_bytes`` (refused from its size prefix, before it is buffered) or a response that does not
  decode *breaks* the connection: the stream cannot be trusted past it.
- The connection ends once (peer close, a break, or :meth:`ClientConnection.abort`): at that moment every
  request still in flight fails with :class:`DisconnectedError` and ``on_close`` is called, synchronously;
  afterwards :meth:`ClientConnection.submit` refuses and bytes that still arrive are ignored. An ended
  connection is aborted (no flushing of unsent bytes to a peer that may never read them).
- Requests are encoded and written whole, in submit order, when submitted (the transport buffers them);
  :meth:`ClientConnection.drain` waits while the transport's write buffer is above its high-water mark.
- A request whose waiter gave up (its future cancelled) keeps its place: its response is read and dropped.
- No task of its own: bytes arrive through asyncio's ``Protocol`` callbacks. TCP_NODELAY is set on connect.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import KafkaProtocolError
from tidelog.protocol.framing import FrameDecoder
from tidelog.protocol.messages import RequestHeader
from tidelog.protocol.primitives import INT32, RemoteProtocolError
from tidelog.protocol.schema import Request, Response

from .client_errors import DisconnectedError

__all__ = ["ClientConnection"]


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Response]


class ClientConnection(asyncio.Protocol):
    """A connection to one broker, made with ``loop.create_connection(lambda: connection, host, port)``."""

    def __init__(
        self,
        node_id: int,
        address: tuple[str, int],
        *,
        max_response_bytes: int,
        on_close: Callable[[ClientConnection], None],
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.api_versions: Mapping[int, tuple[int, int]] = {}
        """The peer's ApiVersions answer (api key -> (min, max)), once the owner has asked for it."""
        self._on_close = on_close
        self._decoder = FrameDecoder(max_response_bytes)
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests written (or buffered) whose responses have not arrived."""
        return len(self._in_flight)

    # -- asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport; both have its methods
        self._transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._closed:  # aborted while connecting
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            self._decoder.receive_data(data)
            while not self._closed and isinstance(frame := self._decoder.next_frame(), bytes):
                self._complete(frame)
        except KafkaProtocolError as exc:
            self._end(f"bad response stream: {exc}", exc)

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed peer will answer nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        self._end("connection closed by the peer" if exc is None else f"connection lost: {exc}", exc)
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainer()

    # -- requests ----------------------------------------------------------------------------------------

    def submit(self, header: RequestHeader, body: Request) -> asyncio.Future[Response]:
        """Write the request now; the future gets its response, or a :class:`DisconnectedError`."""
        if self._closed or self._transport is None:
            raise DisconnectedError(self.node_id, self.address, "connection is closed")
        frame = encode_request(header, body)  # a LocalProtocolError (a bug of the caller) leaves no trace
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._in_flight.append(
            _InFlight(header.correlation_id, header.request_api_key, header.request_api_version, future)
        )
        self._transport.write(frame)
        return future

    async def drain(self) -> None:
        """Wait until the write buffer is below its high-water mark (or the connection has ended)."""
        while self._write_paused and not self._closed:
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

    def abort(self, reason: str) -> None:
        """End the connection now: every request in flight fails with :class:`DisconnectedError`."""
        self._end(reason, None)

    @property
    def released(self) -> asyncio.Future[None]:
        """Done once the connection has ended and its transport has let go of the socket."""
        return self._lost

    # -- internals ---------------------------------------------------------------------------------------

    def _complete(self, frame: bytes) -> None:
        if not self._in_flight:
            raise RemoteProtocolError(f"a response of {len(frame)} bytes arrived with no request in flight")
        if len(frame) < 4:
            raise RemoteProtocolError(f"a response of {len(frame)} bytes has no correlation id")
        head = self._in_flight[0]
        correlation_id = INT32.unpack_from(frame, 0)[0]
        if correlation_id != head.correlation_id:
            raise RemoteProtocolError(
                f"response correlation id {correlation_id}, expected {head.correlation_id} "
                "(the oldest request in flight)"
            )
        _header, response = decode_response(frame, head.api_key, head.version)
        self._in_flight.popleft()
        if not head.future.done():
            head.future.set_result(response)

    def _end(self, reason: str, cause: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        in_flight, self._in_flight = self._in_flight, collections.deque()
        for request in in_flight:
            if not request.future.done():
                error = DisconnectedError(self.node_id, self.address, reason)
                error.__cause__ = cause
                request.future.set_exception(error)
                request.future.exception()  # retrieved: a waiter that gave up must not make it "never retrieved"
        self._wake_drainer()
        if self._transport is not None:
            self._transport.abort()  # connection_lost follows, from the loop
        elif not self._lost.done():
            self._lost.set_result(None)  # never connected: no socket to release
        self._on_close(self)

    def _wake_drainer(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
