"""How a connection's bytes reach the peer: the seam between the request/response logic of
:class:`~tidelog.server.connection.Connection` and the socket (plain TCP now; TLS next).

A response is a list of chunks: bytes-like objects, and file regions (record data of Fetch responses, an
object with ``file``, ``position`` and ``nbytes``, or a :class:`~tidelog.server.regions.RegionList` of
them). A transport writes them in order, whole.

Invariants:

- :class:`PlainTransport` writes bytes with ``send`` (``sock_sendall`` for what the socket buffer did not
  take), reads what has arrived without waiting for a loop turn, and sends file regions with
  ``os.sendfile`` (zero copy: record data never passes through Python). Between two reads that found data
  already there it yields one loop turn (the connection's writer and the other connections run); a read
  that had to wait has yielded already. It waits for data with one reader registration kept for the
  connection's life (not one ``sock_recv`` per read: two ``epoll_ctl`` calls, a future and a handle each),
  dropped when data arrives that nobody waits for (no spinning on a readable socket) and on close.
  :meth:`PlainTransport.send_now` sends what the socket takes without ever waiting (a response sent from
  the reader, issue 17) and returns the rest.
- :meth:`PlainTransport.start_receiving` (issue 17) is the other way to read, instead of ``recv``: every read
  is handed to a :class:`Receiver` from the loop's reader callback (one ``recv`` per readiness, no
  coroutine, future or task switch per read; the loop's level-triggered poll calls again while data
  remains, so other connections run between two reads), ``b""`` at end of stream, ``receive_failed`` for
  a failed read (reading then stops). :meth:`PlainTransport.pause_receiving` drops the reader registration
  (the kernel's buffers fill and TCP pushes back on the client) until
  :meth:`PlainTransport.resume_receiving`; ``close`` drops it for good. A transport reads one way only. A region whose file
  turns out shorter than the region (truncated under the reader) raises ``ConnectionError``: the frame is
  broken, the connection must end.
- :class:`StreamTransport` (asyncio streams: what a TLS connection is, once ``start_tls`` has wrapped it)
  cannot hand a file descriptor to the kernel: it reads each region in bounded pieces and writes the bytes
  (:func:`copy_region`), never the whole region at once, draining between pieces.
- ``recv`` returns ``b""`` at end of stream; ``close`` is idempotent and never raises.
- After ``shutdown_read`` (a graceful stop, a failed login) ``recv`` returns ``b""`` once what was already
  received is read, and the transport still sends: answers in flight reach the peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeAlias, cast

from tidelog.storage.fetch_data import FileRegion

from .regions import RegionList

__all__ = ["Chunk", "PlainTransport", "Receiver", "StreamTransport", "Transport", "copy_region"]

Chunk: TypeAlias = bytes | bytearray | memoryview | FileRegion | RegionList
"""One piece of an encoded response: bytes, or record data as file regions."""

_SENDFILE_CHUNK = 1 << 30
_COPY_CHUNK = 1 << 18


class Receiver(Protocol):
    """Who :meth:`PlainTransport.start_receiving` hands the reads to."""

    def data_received(self, data: bytes) -> None:
        """The bytes of one read; ``b""`` at end of stream (reading has stopped then)."""

    def receive_failed(self, exc: OSError) -> None:
        """A read failed (reading has stopped)."""


class Transport(Protocol):
    """A connected byte stream to one peer."""

    async def recv(self, max_bytes: int) -> bytes: ...

    async def send_chunks(self, chunks: Sequence[object]) -> None: ...

    def shutdown_read(self) -> None:
        """Stop receiving (``recv`` then ends), keep sending."""

    def close(self) -> None: ...


def _regions(chunk: object) -> Iterable[FileRegion]:
    """The file regions of a chunk that is not bytes (a region, or a list of them)."""
    if isinstance(chunk, RegionList):
        return chunk.regions
    if isinstance(chunk, FileRegion):
        return (chunk,)
    raise TypeError(f"a response chunk must be bytes or file regions, not {type(chunk).__name__}")


class PlainTransport:
    """TCP without encryption: ``sendfile`` for file regions."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._eager = False
        """The last read found data without waiting: yield a loop turn before the next."""
        self._reading = False
        """A reader is registered with the loop for this socket."""
        self._read_waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._receiver: Receiver | None = None
        """Set by :meth:`start_receiving`: reads go to it from the reader callback, not to ``recv``."""
        self._receive_bytes = 0

    async def recv(self, max_bytes: int) -> bytes:
        # The bytes a client has already sent are read at once; a read that finds none waits on the
        # connection's reader registration (uvloop's sock_recv registers and drops a reader per read).
        # A client that waits for each answer finds nothing on the first try and waits (a loop turn); one
        # that pipelines found data twice running: it yields a loop turn before handling more.
        if self._receiver is not None:
            raise RuntimeError("the transport hands its reads to a receiver")
        sock = self._sock
        while not self._closed:
            try:
                data = sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                self._eager = False
                await self._readable()
                continue
            if self._eager:
                await asyncio.sleep(0)
                if self._closed:
                    break
            self._eager = True
            return data
        return b""

    def _readable(self) -> asyncio.Future[None]:
        waiter = self._read_waiter = self._loop.create_future()
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True
        return waiter

    def _on_readable(self) -> None:
        waiter = self._read_waiter
        self._read_waiter = None
        if waiter is None or waiter.done():  # nobody reads now: stop polling until someone does
            self._stop_reading()
        else:
            waiter.set_result(None)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            with contextlib.suppress(OSError, RuntimeError, ValueError):  # a closed loop or socket
                self._loop.remove_reader(self._fd)

    def start_receiving(self, receiver: Receiver, max_bytes: int) -> None:
        """Hand every read of up to ``max_bytes`` to ``receiver`` from the loop's reader callback (instead of
        ``recv``), from now until :meth:`pause_receiving` or ``close``."""
        if self._reading:
            raise RuntimeError("the transport is read with recv already")
        self._receiver = receiver
        self._receive_bytes = max_bytes
        self.resume_receiving()

    def pause_receiving(self) -> None:
        """Read nothing more until :meth:`resume_receiving` (back-pressure: the kernel's buffers fill)."""
        self._stop_reading()

    def resume_receiving(self) -> None:
        if self._receiver is not None and not self._reading and not self._closed:
            self._loop.add_reader(self._fd, self._read_ready)
            self._reading = True

    def _read_ready(self) -> None:
        receiver = self._receiver
        assert receiver is not None
        try:
            data = self._sock.recv(self._receive_bytes)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._stop_reading()
            receiver.receive_failed(exc)
            return
        if not data:
            self._stop_reading()
        receiver.data_received(data)

    def send_now(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """Send what the socket takes now, never waiting; returns what it did not take (empty: all sent)."""
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            return data
        return memoryview(data)[sent:] if sent < len(data) else b""

    async def send_chunks(self, chunks: Sequence[object]) -> None:
        sock = self._sock
        for chunk in chunks:
            if isinstance(chunk, bytes | bytearray | memoryview):
                # Most responses fit the socket buffer: sent here, the loop waits only for the rest.
                try:
                    sent = sock.send(chunk)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                if sent < len(chunk):
                    await self._loop.sock_sendall(sock, memoryview(chunk)[sent:] if sent else chunk)
            else:
                for region in _regions(chunk):
                    await self._sendfile(region)

    async def _sendfile(self, region: FileRegion) -> None:
        out_fd = self._sock.fileno()
        in_fd = region.fileno()
        position = region.position
        remaining = region.nbytes
        while remaining > 0:
            try:
                sent = os.sendfile(out_fd, in_fd, position, min(remaining, _SENDFILE_CHUNK))
            except BlockingIOError:
                await self._writable(out_fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if sent == 0:
                raise ConnectionError("segment file shrank during sendfile")
            position += sent
            remaining -= sent

    async def _writable(self, fd: int) -> None:
        future: asyncio.Future[None] = self._loop.create_future()

        def ready() -> None:
            if not future.done():
                future.set_result(None)

        self._loop.add_writer(fd, ready)
        try:
            await future
        finally:
            self._loop.remove_writer(fd)

    def shutdown_read(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)

    def close(self) -> None:
        # shutdown first: under uvloop, close() alone leaves the connection up while a sock_recv is
        # pending on it (the peer never sees EOF and the read never returns), e.g. for an idle close.
        self._closed = True
        self._stop_reading()
        waiter, self._read_waiter = self._read_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # the read wakes and sees the closed socket
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


class StreamTransport:
    """An asyncio stream pair (a TLS connection): file regions are copied, not sent with sendfile."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def recv(self, max_bytes: int) -> bytes:
        return await self._reader.read(max_bytes)

    async def send_chunks(self, chunks: Sequence[object]) -> None:
        for chunk in chunks:
            if isinstance(chunk, bytes | bytearray | memoryview):
                self._writer.write(chunk)
            else:
                for region in _regions(chunk):
                    for piece in copy_region(region):
                        self._writer.write(piece)
                        await self._writer.drain()
        await self._writer.drain()

    def shutdown_read(self) -> None:
        # Not the socket's read side: over TLS the end of the stream closes the transport, answers in
        # flight with it (and uvloop's transport sockets refuse shutdown()). Reading stops here instead.
        with contextlib.suppress(RuntimeError):
            cast(asyncio.Transport, self._writer.transport).pause_reading()  # a stream's is read-write
        self._reader.feed_eof()

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.close()


def copy_region(region: FileRegion, chunk_bytes: int = _COPY_CHUNK) -> Iterator[bytes]:
    """The bytes of a file region, ``chunk_bytes`` at a time (for transports without sendfile); raises
    ``ConnectionError`` if the file is shorter than the region."""
    fd = region.fileno()
    position = region.position
    remaining = region.nbytes
    while remaining > 0:
        data = os.pread(fd, min(remaining, chunk_bytes), position)
        if not data:
            raise ConnectionError("segment file shrank during a copy")
        yield data
        position += len(data)
        remaining -= len(data)
