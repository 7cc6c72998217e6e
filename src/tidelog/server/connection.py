"""One client connection: frames in, requests dispatched, responses out in request order.

Invariants:
- Responses leave in the order their requests arrived (Kafka's rule), even when a later request
  finishes first: each request takes a slot in ``_pending`` as it is read, and the writer sends slots
  strictly in order, waiting on a slot whose response is still being computed.
- Requests are *handled* in arrival order too: a handler runs (or starts its delayed operation) before the
  next frame is decoded, so two produces on one connection are appended in the order they were sent.
- A frame larger than ``socket.request.max.bytes`` or one that fails to parse closes this connection and
  only this one; an ApiVersions request at a version we do not speak is answered with UNSUPPORTED_VERSION
  in the v0 layout listing key 18 and the connection stays open.
- Bytes go through a :class:`~tidelog.server.transport.Transport`: record data of Fetch responses is
  written with ``os.sendfile`` from the segment files on a plain socket (zero copy), copied on others.
- Every request carries the connection's listener name and authenticated principal (``User:ANONYMOUS``
  until a listener authenticates; on an SSL listener with client certificates, the mapped subject DN).
  ``security_protocol`` is the listener's; the transport is already TLS for SSL and SASL_SSL.
- On a SASL listener every request first passes the connection's :class:`SaslSession` (security/
  sasl_session.py), which answers the SASL requests itself, lets ApiVersions through and closes the
  connection on anything else until the client has authenticated; until then frames are limited to
  ``sasl.server.max.receive.size``.
- Bounded memory per connection (:meth:`_await_capacity`, checked before every request is handled, not
  only before every read): at most ``max_in_flight`` (``queued.max.requests``) requests are in flight;
  beyond that no further frame is handled and the socket is not read (back-pressure through TCP) until
  the writer catches up. And while the writer waits on a full socket (a client that does not read its
  responses), the connection is muted the same way, as Kafka mutes a channel whose response is still
  being sent: unsent output is one response plus the kernel's send buffer, never a growing queue.
- A response the handler returns at once, with no response ahead of it and the writer idle, is encoded and
  sent by the reader itself on a plain socket (issue 17: no writer wake-up per request); what the socket
  does not take at once goes to the writer as the next slot, so order and the writer's back-pressure are
  unchanged. Likewise a delayed answer (a long poll's future) is sent by its done callback when it is at
  the head of the queue and the writer idle (:meth:`Connection._flush`): the writer task is woken only for
  what needs it (the rest of a partial send, file regions, a failed answer, the closing drain, TLS), never
  merely because a request was parked or its answer came. The answers the reader sends for the frames of
  one read (a client that pipelines) are corked and leave in one ``send`` (:meth:`Connection._uncork`),
  before the reader waits for anything (the next read, capacity, a mute) and before anything is queued
  behind them.
- :meth:`Connection.mute_for` (a client over its quota, KIP-219) holds the next request, read or not,
  until the throttle time has passed; responses keep leaving meanwhile. Stopping cuts the wait short.
- Two ways to read, one rule set. A transport with ``start_receiving`` (a plain socket) hands each read to
  :meth:`Connection.data_received` from the loop's reader callback and the frames are handled right there
  (issue 17: no coroutine, future or task switch per read; a read that is exactly one whole frame, with
  nothing buffered before it, room for it and no mute, is handled without passing through the decoder,
  and any other read through it); when a frame must wait (capacity, a mute) or
  there is no capacity for the next one, reading pauses (``pause_receiving``: TCP pushes back), a task waits
  exactly as the read loop would (:meth:`Connection._unblock`), takes the frames in turn and resumes reading.
  Any other transport (TLS streams) is read by the coroutine :meth:`Connection._read_loop`. Either way the
  connection ends on end of stream, a failed read, a bad frame, ``stop_reading`` or ``close``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidelog.protocol.codec import UnsupportedVersionError, constructor, decode_request, encode_response
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.framing import NEED_DATA, FrameDecoder
from tidelog.protocol.messages import ApiKey, RequestHeader
from tidelog.protocol.schema import Response

from .dispatch import ANONYMOUS, Answer, Dispatcher, KafkaPrincipal, NoResponse, RequestContext
from .metrics.request_metrics import RequestMetrics
from .request_log_context import current_request
from .security.sasl_session import SaslSession, SaslStateError
from .transport import Receiver, Transport

__all__ = ["Connection"]

log = logging.getLogger("tidelog.connection")

_RECV_BYTES = 1 << 18
_CORK_BYTES = 1 << 16
"""At most this much of the reader's answers waits for the end of its read (then it is sent at once)."""

_Bytes = bytes | bytearray | memoryview
_SIZE = struct.Struct(">i")


@dataclass(slots=True)
class _Encoded:
    """A pending slot whose response is encoded already: the rest of what the reader began to send."""

    chunks: list[object]
    response: Response


_new_context = constructor(
    RequestContext,
    "api_key",
    "api_version",
    "correlation_id",
    "client_id",
    "client_host",
    "connection_id",
    "listener_name",
    "principal",
    "request_size",
)
"""A RequestContext from these fields in this order, without the keyword ``__init__`` (once per request)."""
_ANSWERED = (Response, asyncio.Future, _Encoded)
"""What a pending slot holds as it is (a tuple: ``A | B`` in ``isinstance`` builds a union per call)."""


def _ready(result: object) -> bool:
    """Whether a pending slot's answer is there to be sent."""
    return not isinstance(result, asyncio.Future) or result.done()


class Connection:
    """Serves one accepted socket until the peer closes it, it misbehaves, or the broker stops."""

    def __init__(
        self,
        transport: Transport,
        peer: str,
        connection_id: int,
        dispatcher: Dispatcher,
        *,
        max_request_bytes: int,
        max_in_flight: int = 100,
        listener_name: str | None = None,
        principal: KafkaPrincipal = ANONYMOUS,
        request_metrics: RequestMetrics | None = None,
        security_protocol: str = "PLAINTEXT",
        sasl: SaslSession | None = None,
    ) -> None:
        self._transport = transport
        self._send_now: Callable[[_Bytes], _Bytes] | None = getattr(transport, "send_now", None)
        self.security_protocol = security_protocol
        """The listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL): SASL_* must authenticate."""
        self._sasl = sasl
        self._max_request_bytes = max_request_bytes
        self._listener_name = listener_name
        self.principal = principal
        self._peer = peer
        self._host = peer.rsplit(":", 1)[0]
        self._id = connection_id
        self._dispatcher = dispatcher
        self._routes = dispatcher.routes
        unauthenticated_max = (
            max_request_bytes if sasl is None else min(max_request_bytes, sasl.max_frame_bytes)
        )
        self._decoder = FrameDecoder(unauthenticated_max, writable_frames=True)
        self._max_frame_bytes = unauthenticated_max
        """The decoder's limit, for :meth:`data_received`'s one-frame path."""
        self._decoder_empty = True
        """Nothing is buffered in the decoder (known after a read it handled all of): :meth:`data_received`
        may take a read that is exactly one frame without it."""
        self._pending: collections.deque[tuple[RequestHeader, Answer | _Encoded]] = collections.deque()
        self._has_pending = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._output_flowing = asyncio.Event()  # clear while the writer waits on a full socket
        self._output_flowing.set()
        self._flowing = True
        """``_output_flowing.is_set()`` as a plain attribute, for the checks made once per request."""
        self._max_in_flight = max_in_flight
        self._closing = False
        self._muted_until = 0.0
        self._unmuted = asyncio.Event()
        self.last_active = time.monotonic()
        # issue 14 hook: request metrics; per pending slot (api key, version, queue ms, local ms, local end)
        self._metrics = request_metrics
        self._timings: collections.deque[tuple[int, int, float, float, float] | None] = collections.deque()
        self._received = 0.0
        self._corked: list[bytes] = []
        """Answers the reader encoded for the frames of the current read, sent together by :meth:`_uncork`."""
        self._corked_bytes = 0
        self._corked_last: tuple[RequestHeader, Response] | None = None
        self._corked_timings: list[tuple[tuple[int, int, float, float, float] | None, Response]] = []
        self._answered = self._flush
        """A delayed answer's done callback (bound once, not per request)."""
        self._writer_active = False
        """The writer task is at work (not parked waiting for a ready answer): :meth:`_flush` leaves it the queue."""
        self._received_all: asyncio.Future[None] | None = None
        """While reads come through :meth:`data_received`: resolved when reading ends (its exception: why)."""
        self._held: _Bytes | None = None
        """A frame taken from the decoder that waits for a mute to pass (:meth:`_take_frames`)."""
        self._unblocker: asyncio.Task[None] | None = None
        """The task that waits for capacity or a mute while reading is paused (None: not blocked)."""

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def listener_name(self) -> str | None:
        return self._listener_name

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write_loop())
        start_receiving: Callable[[Receiver, int], None] | None = getattr(
            self._transport, "start_receiving", None
        )
        try:
            if start_receiving is None:
                await self._read_loop()
            else:
                await self._receive(loop, start_receiving)
        except (ConnectionError, OSError) as exc:
            log.debug("connection %s from %s: %s", self._id, self._peer, exc)
        except KafkaProtocolError as exc:
            log.info("closing connection %s from %s: %s", self._id, self._peer, exc)
        finally:
            self._closing = True
            self._has_pending.set()
            if not self._pending or writer.done():
                writer.cancel()
            try:
                await asyncio.wait_for(writer, timeout=30)
            except (asyncio.CancelledError, TimeoutError, ConnectionError, OSError):
                pass
            except Exception:
                log.exception("connection %s writer failed", self._id)
            self.close()

    @property
    def busy(self) -> bool:
        """Whether requests are in flight (an idle-timeout must not cut a long poll)."""
        return bool(self._pending)

    def mute_for(self, throttle_time_ms: int) -> None:
        """Take no further request from this client for ``throttle_time_ms`` (quota throttling)."""
        until = time.monotonic() + throttle_time_ms / 1000
        if until > self._muted_until:
            self._muted_until = until
            self._unmuted.clear()

    async def _wait_unmuted(self) -> None:
        while not self._closing and (delay := self._muted_until - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._unmuted.wait(), delay)
        self._muted_until = 0.0

    def stop_reading(self) -> None:
        """Stop taking new requests; those in flight still get their responses (graceful shutdown)."""
        self._closing = True
        self._unmuted.set()
        self._output_flowing.set()
        self._flowing = True
        self._has_pending.set()
        self._room.set()
        self._transport.shutdown_read()
        self._end_receiving()

    def close(self) -> None:
        self._closing = True
        self._unmuted.set()
        self._output_flowing.set()
        self._flowing = True
        self._transport.close()
        self._end_receiving()

    # ---- reads handed over by the transport's reader callback (issue 17) ----

    async def _receive(self, loop: asyncio.AbstractEventLoop, start: Callable[[Receiver, int], None]) -> None:
        """Serve the reads :meth:`data_received` gets until reading ends (the read loop's counterpart)."""
        received_all = self._received_all = loop.create_future()
        try:
            if not self._closing:
                start(self, _RECV_BYTES)
                await received_all
        finally:
            self._received_all = None
            pause = getattr(self._transport, "pause_receiving", None)
            if pause is not None:
                pause()
            if self._unblocker is not None:
                self._unblocker.cancel()
                self._unblocker = None
            self._uncork()

    def _end_receiving(self, exc: BaseException | None = None) -> None:
        received_all = self._received_all
        if received_all is not None and not received_all.done():
            if exc is None:
                received_all.set_result(None)
            else:
                received_all.set_exception(exc)

    def data_received(self, data: bytes) -> None:
        """The transport's reader callback: the bytes of one read (``b""``: end of stream). The frames are
        handled here, in order, as the read loop would."""
        received_all = self._received_all
        if received_all is None or received_all.done() or self._closing:
            return
        if not data:
            self._end_receiving()
            return
        self.last_active = time.monotonic()
        if self._metrics is not None:
            self._received = time.perf_counter()
        try:
            if (
                self._decoder_empty
                and self._unblocker is None
                and len(data) > 4
                and _SIZE.unpack_from(data)[0] == len(data) - 4 <= self._max_frame_bytes
                and not self._muted_until
                and len(self._pending) < self._max_in_flight  # _room is set
                and self._flowing
            ):
                # the common case (issue 17): exactly one whole frame, nothing buffered before it, room for
                # it: handled as _take_frames would, without passing through the decoder
                frame = bytearray(data)
                del frame[:4]  # O(1): a bytearray drops its head by moving its start
                self._handle_frame(frame)
                if self._corked:
                    self._uncork()
                return
            self._decoder_empty = False
            self._decoder.receive_data(data)
            if self._unblocker is None:  # else reading was paused, and the waiting task takes the frames
                self._take_frames()
                self._decoder_empty = self._unblocker is None and self._decoder.buffered_bytes == 0
        except Exception as exc:  # noqa: BLE001 - serve() handles it as the read loop's
            self._uncork()
            self._end_receiving(exc)

    def receive_failed(self, exc: OSError) -> None:
        """The transport's read failed."""
        self._end_receiving(exc)

    def _take_frames(self) -> None:
        """Handle the buffered frames in order while there is capacity and no mute; when there is none (even
        for a frame not yet whole: the read loop would not read then), pause reading and let
        :meth:`_unblock` wait."""
        decoder = self._decoder
        while not self._closing:
            if not (self._room.is_set() and self._output_flowing.is_set()):
                self._block()
                return
            frame: _Bytes
            if self._held is not None:
                frame = self._held
            else:
                taken = decoder.next_frame()
                if taken is NEED_DATA:
                    break
                frame = taken
            if self._muted_until:
                self._held = frame
                self._block()
                return
            self._held = None
            self._handle_frame(frame)
        self._uncork()

    def _block(self) -> None:
        self._uncork()
        pause = getattr(self._transport, "pause_receiving", None)
        if pause is not None:
            pause()
        self._unblocker = asyncio.get_running_loop().create_task(self._unblock())

    async def _unblock(self) -> None:
        """While reading is paused: wait for capacity and for a mute to pass (as the read loop does), then
        take the buffered frames and read again."""
        try:
            while not self._closing:
                if not (self._room.is_set() and self._output_flowing.is_set()):
                    await self._await_capacity()
                elif self._held is not None and self._muted_until:
                    await self._wait_unmuted()
                else:
                    break
            self._unblocker = None
            if self._closing:
                self._end_receiving()
                return
            self._take_frames()
            if self._unblocker is None and not self._closing:
                resume = getattr(self._transport, "resume_receiving", None)
                if resume is not None:
                    resume()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - serve() handles it as the read loop's
            self._uncork()
            self._end_receiving(exc)

    async def _read_loop(self) -> None:
        decoder = self._decoder
        try:
            while not self._closing:
                await self._await_capacity()
                data = await self._transport.recv(_RECV_BYTES)
                if not data:
                    return
                self.last_active = time.monotonic()
                if self._metrics is not None:
                    self._received = time.perf_counter()
                # Frame by frame: a bad size prefix raises right after the frames before it were handled,
                # not on the next recv (which may never come: the peer could wait for those answers).
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    if not (self._room.is_set() and self._output_flowing.is_set()):  # no coroutine per frame
                        self._uncork()
                        await self._await_capacity()
                        if self._closing:
                            return
                    if self._muted_until:
                        self._uncork()
                        await self._wait_unmuted()
                        if self._closing:
                            return
                    self._handle_frame(frame)
                    if self._closing:
                        return
                self._uncork()
        finally:
            self._uncork()

    async def _await_capacity(self) -> None:
        """Hook (bounded memory): wait while ``max_in_flight`` requests are in flight or the writer waits
        on a full socket. Returns at once, without yielding, when neither holds."""
        while not self._closing and not (self._room.is_set() and self._output_flowing.is_set()):
            if not self._room.is_set():
                await self._room.wait()
            else:
                await self._output_flowing.wait()

    def _handle_frame(self, frame: bytes | bytearray | memoryview) -> None:
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as exc:
            header = exc.header
            if header is not None and header.request_api_key == ApiKey.API_VERSIONS:
                # Clients retry at a version we advertise; the body goes out in the v0 layout.
                header.request_api_version = 0
                self._enqueue(header, self._dispatcher.api_versions(ErrorCode.UNSUPPORTED_VERSION))
                return
            raise KafkaProtocolError(f"unsupported request {exc}", ErrorCode.UNSUPPORTED_VERSION) from exc
        api_key = header.request_api_key
        api_version = header.request_api_version
        route = self._routes.get(api_key)  # Dispatcher.route_for, inline (once per request)
        if route is None or not route.min_version <= api_version <= route.max_version:
            if api_key == ApiKey.API_VERSIONS:
                header.request_api_version = 0
                self._enqueue(header, self._dispatcher.api_versions(ErrorCode.UNSUPPORTED_VERSION))
                return
            raise KafkaProtocolError(
                f"api key {header.request_api_key} version {header.request_api_version} is not supported",
                ErrorCode.UNSUPPORTED_VERSION,
            )
        if self._sasl is not None and self._sasl_answered(header, body):
            return
        ctx = _new_context(
            api_key,
            api_version,
            header.correlation_id,
            header.client_id,
            self._host,
            self._id,
            self._listener_name,
            self.principal,
            len(frame),
        )
        token = current_request.set(ctx)
        try:
            if self._metrics is None:
                result = route.handler(ctx, body)
            else:
                started = time.perf_counter()
                result = route.handler(ctx, body)
                ended = time.perf_counter()
                queue_ms = (started - self._received) * 1000
                local_ms = (ended - started) * 1000
                if isinstance(result, NoResponse):
                    self._metrics.observe(ctx.api_key, ctx.api_version, queue_ms, local_ms, 0.0, 0.0)
                    return
                timing = (ctx.api_key, ctx.api_version, queue_ms, local_ms, ended)
                if isinstance(result, Response) and self._sent_now(header, result, timing):
                    return
                self._enqueue(
                    header, result, timing
                )  # a delayed operation's task, created here, inherits ctx
                return
            if isinstance(result, NoResponse):
                return
            if isinstance(result, Response) and self._sent_now(header, result, None):
                return
            self._enqueue(header, result)
        finally:
            current_request.reset(token)

    def _sent_now(
        self, header: RequestHeader, response: Response, timing: tuple[int, int, float, float, float] | None
    ) -> bool:
        """Hook (issue 17): send ``response`` from the reader when nothing is ahead of it and the writer is
        idle; what the socket does not take goes to the writer as the next slot. False: not sent here (the
        caller enqueues it)."""
        send_now = self._send_now
        if send_now is None or self._pending or not self._flowing:
            return False
        try:
            chunks = encode_response(header, response)
        except Exception:  # noqa: BLE001 - the writer encodes it again, fails the same way, logs and closes
            return False
        if len(chunks) == 1 and type(chunks[0]) is bytes and self._corked_bytes < _CORK_BYTES:
            # the answers to the frames of one read leave in one send (see _uncork)
            self._corked.append(chunks[0])
            self._corked_bytes += len(chunks[0])
            self._corked_last = (header, response)
            if self._metrics is not None:
                self._corked_timings.append((timing, response))
            return True
        self._uncork()
        rest: list[object] = list(chunks)
        if type(rest[0]) is bytes:
            rest[0] = send_now(rest[0])
            if not rest[0]:
                del rest[0]
        if rest:
            self._enqueue(header, _Encoded(rest, response), timing)
            return True
        self.last_active = time.monotonic()
        if timing is not None and self._metrics is not None:
            api_key, api_version, queue_ms, local_ms, local_end = timing
            sent = time.perf_counter()
            self._metrics.observe(api_key, api_version, queue_ms, local_ms, 0.0, (sent - local_end) * 1000)
            self._metrics.responded(api_key, response)
        return True

    def _uncork(self) -> None:
        """Hook (issue 17): send the answers the reader corked while it handled the frames of one read, in one
        ``send``: a client that pipelines small requests gets its answers in one segment instead of one
        syscall and one segment each. Called before the reader waits for anything, before anything is queued
        behind them, and when the reader stops; what the socket does not take goes to the writer first."""
        corked = self._corked
        if not corked:
            return
        data = corked[0] if len(corked) == 1 else b"".join(corked)
        corked.clear()
        self._corked_bytes = 0
        last = self._corked_last
        self._corked_last = None
        assert last is not None
        assert self._send_now is not None
        try:
            rest = self._send_now(data)
        except OSError as exc:
            log.debug("connection %s from %s: %s", self._id, self._peer, exc)
            self.close()
            return
        if rest:
            header, response = last
            self._enqueue(header, _Encoded([rest], response))
        self.last_active = time.monotonic()
        if self._metrics is not None:
            sent = time.perf_counter()
            for timing, response in self._corked_timings:
                if timing is not None:
                    api_key, api_version, queue_ms, local_ms, local_end = timing
                    self._metrics.observe(
                        api_key, api_version, queue_ms, local_ms, 0.0, (sent - local_end) * 1000
                    )
                    self._metrics.responded(api_key, response)
            self._corked_timings.clear()

    def _sasl_answered(self, header: RequestHeader, body: object) -> bool:
        """Pass the request through the SASL session: True when the session answered it."""
        assert self._sasl is not None
        try:
            reply = self._sasl.receive(header.request_api_key, body, int(time.monotonic() * 1000))
        except SaslStateError as exc:
            raise KafkaProtocolError(str(exc), ErrorCode.ILLEGAL_SASL_STATE) from exc
        if reply is None:
            return False
        self._enqueue(header, reply.response)
        if self._sasl.principal is not None:
            self.principal = self._sasl.principal
            self._decoder.max_frame_bytes = self._max_frame_bytes = self._max_request_bytes
        if reply.close:
            log.info("connection %s from %s: failed SASL authentication, closing", self._id, self._peer)
            self.stop_reading()
        return True

    def _request_fields(self, header: RequestHeader) -> dict[str, object]:
        """The request fields of a log record about ``header``'s request (structured logs)."""
        from .metrics.request_metrics import api_name

        return {
            "client_id": header.client_id,
            "api": api_name(header.request_api_key),
            "api_version": header.request_api_version,
            "correlation_id": header.correlation_id,
            "client_host": self._host,
            "listener": self._listener_name,
        }

    def _enqueue(
        self,
        header: RequestHeader,
        result: Answer | _Encoded,
        timing: tuple[int, int, float, float, float] | None = None,
    ) -> None:
        if not isinstance(result, _ANSWERED) and inspect.isawaitable(result):
            result = asyncio.ensure_future(result)
        if self._corked:
            self._uncork()  # the answers sent from the reader so far go first
        if self._metrics is not None:
            self._timings.append(timing)  # one per pending slot (None: not measured)
        self._pending.append((header, result))
        if len(self._pending) >= self._max_in_flight:
            self._room.clear()
        if isinstance(result, asyncio.Future) and not result.done():
            result.add_done_callback(self._answered)  # nobody wakes until the answer is there
        else:
            self._flush()

    def _wake_writer(self) -> None:
        self._has_pending.set()

    def _flush(self, _answer: object = None) -> None:
        """Hook (issue 17): send the ready answers at the head of ``_pending`` from here (the reader, or a
        delayed answer's done callback: ``_answer``, the future) when the writer is idle, instead of waking
        the writer task for each; the writer gets what needs it: the rest of a partial send, file regions, a
        failed answer, the closing drain, a transport without ``send_now`` (TLS)."""
        if self._writer_active:
            self._has_pending.set()
            return
        pending = self._pending
        send_now = self._send_now
        while pending:
            header, result = pending[0]
            if send_now is None or self._closing or isinstance(result, _Encoded):
                self._wake_writer()
                return
            if not self._flowing:
                return  # the writer is sending and goes on with the queue
            if not isinstance(result, Response):
                if not isinstance(result, asyncio.Future):  # never: _enqueue made every awaitable one
                    self._wake_writer()
                    return
                if not result.done():
                    return  # its done callback flushes again
                try:
                    result = result.result()
                except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the writer logs it and closes
                    self._wake_writer()
                    return
            try:
                chunks = encode_response(header, result)
            except Exception:  # noqa: BLE001 - the writer encodes it again, fails the same way, logs and closes
                self._wake_writer()
                return
            timing = self._timings[0] if self._metrics is not None else None
            resolved = time.perf_counter() if timing is not None else 0.0
            first: object = chunks[0]
            if type(first) is bytes:
                try:
                    first = send_now(first)
                except OSError as exc:
                    log.debug("connection %s from %s: %s", self._id, self._peer, exc)
                    self.close()
                    self._wake_writer()
                    return
                sent_all = not first
            else:
                sent_all = False
            if not sent_all or len(chunks) > 1:  # what the socket did not take, file regions: the writer's
                rest: list[object] = list(chunks[1:]) if sent_all else [first, *chunks[1:]]
                pending[0] = (header, _Encoded(rest, result))
                self._wake_writer()
                return
            pending.popleft()
            if len(pending) == self._max_in_flight - 1:  # one at a time: below the limit again
                self._room.set()
            self.last_active = time.monotonic()
            if self._metrics is not None:
                self._timings.popleft()
                if timing is not None:
                    self._observe_sent(timing, resolved, result)

    def _observe_sent(
        self, timing: tuple[int, int, float, float, float], resolved: float, response: Response
    ) -> None:
        """Request metrics of a response just sent (``resolved``: when its answer was ready)."""
        assert self._metrics is not None
        api_key, api_version, queue_ms, local_ms, local_end = timing
        sent = time.perf_counter()
        self._metrics.observe(
            api_key, api_version, queue_ms, local_ms, (resolved - local_end) * 1000, (sent - resolved) * 1000
        )
        self._metrics.responded(api_key, response)

    async def _send(self, chunks: Sequence[object]) -> None:
        """Hook (bounded memory): send one response; the reader is muted while this waits on the socket
        (it only runs then: a send the socket takes at once never yields)."""
        self._output_flowing.clear()
        self._flowing = False
        try:
            await self._transport.send_chunks(chunks)
        finally:
            self._output_flowing.set()
            self._flowing = True

    async def _write_loop(self) -> None:
        pending = self._pending
        while True:
            if not pending or not (self._closing or _ready(pending[0][1])):
                if self._closing and not pending:
                    return
                self._has_pending.clear()
                self._writer_active = False
                try:
                    await self._has_pending.wait()
                finally:
                    self._writer_active = True
                continue
            header, result = pending[0]
            encoded: list[object] | None = None
            if isinstance(result, _Encoded):  # the rest of what the reader began to send
                encoded, result = result.chunks, result.response
            elif not isinstance(result, Response):  # an awaitable (checked second: an ABC check is slow)
                try:
                    result = await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "handler for api key %s failed",
                        header.request_api_key,
                        extra=self._request_fields(header),
                    )
                    self.close()
                    return
            pending.popleft()
            if len(pending) < self._max_in_flight:
                self._room.set()
            timing = self._timings.popleft() if self._metrics is not None else None
            resolved = time.perf_counter() if timing is not None else 0.0
            chunks = encode_response(header, result) if encoded is None else encoded
            await self._send(chunks)
            self.last_active = time.monotonic()
            if timing is not None:
                self._observe_sent(timing, resolved, result)
