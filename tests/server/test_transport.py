"""Transports: the same chunks (bytes and file regions) reach the peer byte for byte over a plain socket
(sendfile) and over asyncio streams (copied); a file shorter than its region breaks the connection; a TLS
stream's ``shutdown_read`` (graceful broker stop, failed login) ends its reading and still lets it answer,
on asyncio's loop and on uvloop's."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from tests.support.certs import tls_material

from tidelog.server.regions import RegionList
from tidelog.server.transport import PlainTransport, StreamTransport, copy_region
from tidelog.storage.fetch_data import FileRegion
from tidelog.storage.file_handles import SegmentFile

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


def _regions(path: Path) -> tuple[SegmentFile, list[object]]:
    path.write_bytes(PAYLOAD)
    handle = SegmentFile(path)
    chunks: list[object] = [
        b"head",
        FileRegion(handle, 10, 300_000),
        RegionList([FileRegion(handle, 500_000, 100), FileRegion(handle, 0, 700_000)]),
        bytearray(b"tail"),
    ]
    return handle, chunks


EXPECTED = b"head" + PAYLOAD[10:300_010] + PAYLOAD[500_000:500_100] + PAYLOAD[:700_000] + b"tail"


async def _receive(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    received = bytearray()
    while len(received) < size:
        data = await loop.sock_recv(sock, 1 << 16)
        assert data, "peer closed early"
        received += data
    return bytes(received)


@pytest.mark.parametrize("kind", ["plain", "streams"])
def test_chunks_arrive_whole_and_in_order(tmp_path: Path, kind: str) -> None:
    handle, chunks = _regions(tmp_path / "segment.log")

    async def scenario() -> bytes:
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        peer.setblocking(False)
        if kind == "plain":
            transport: PlainTransport | StreamTransport = PlainTransport(ours)
        else:
            reader, writer = await asyncio.open_connection(sock=ours)
            transport = StreamTransport(reader, writer)
        receiving = asyncio.ensure_future(_receive(peer, len(EXPECTED)))
        await transport.send_chunks(chunks)
        received = await asyncio.wait_for(receiving, 30)
        await asyncio.get_running_loop().sock_sendall(peer, b"ping")
        assert await transport.recv(100) == b"ping"
        transport.close()
        transport.close()  # idempotent
        peer.close()
        return received

    try:
        assert asyncio.run(scenario()) == EXPECTED
    finally:
        handle.close()


def test_a_file_shorter_than_its_region_breaks_the_copy(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 100)
    handle = SegmentFile(path)
    try:
        with pytest.raises(ConnectionError):
            list(copy_region(FileRegion(handle, 50, 100), chunk_bytes=16))
        assert b"".join(copy_region(FileRegion(handle, 10, 80), chunk_bytes=16)) == b"x" * 80
    finally:
        handle.close()


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_after_shutdown_read_a_tls_stream_ends_reading_and_still_answers(
    tmp_path: Path, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    """What a graceful stop and a failed SASL login over TLS need. Shutting the socket's read side did
    neither: uvloop's transport sockets refuse shutdown() (a broker stopping with a TLS client connected
    died of the TypeError), and on asyncio's loop the end of a TLS stream closes the transport before the
    answer in flight is written."""
    pki = tls_material(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(str(pki.broker.keystore))

    async def scenario() -> tuple[list[bytes], bytes]:
        received: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            transport = StreamTransport(reader, writer)
            before = await transport.recv(100)
            transport.shutdown_read()
            after = await asyncio.wait_for(transport.recv(100), 10)
            await transport.send_chunks([b"answer"])
            received.set_result([before, after])
            transport.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        client_context = ssl.create_default_context(cafile=str(pki.ca.cert))
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname="localhost"
        )
        writer.write(b"request")
        try:
            answer = await asyncio.wait_for(reader.read(100), 10)
            return await asyncio.wait_for(received, 10), answer
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(scenario()) == ([b"request", b""], b"answer")


class _Reads:
    """A receiver that records what ``start_receiving`` hands it."""

    def __init__(self) -> None:
        self.reads: list[bytes] = []
        self.failures: list[OSError] = []
        self.changed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)
        self.changed.set()

    def receive_failed(self, exc: OSError) -> None:
        self.failures.append(exc)
        self.changed.set()

    async def until(self, data: bytes) -> None:
        while b"".join(self.reads) != data:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_start_receiving_hands_reads_over_pauses_and_ends(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A plain socket read through callbacks (issue 17): reads reach the receiver, none while paused (they
    wait in the kernel), all of them once resumed, then ``b""`` at end of stream; after ``shutdown_read``
    the end comes too; ``recv`` is refused on a transport that hands its reads over."""

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        loop = asyncio.get_running_loop()
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        transport = PlainTransport(ours)
        reads = _Reads()
        transport.start_receiving(reads, 1 << 16)
        peer.sendall(b"one")
        await reads.until(b"one")
        transport.pause_receiving()
        peer.sendall(b"two")  # in our socket's buffer at once (a socketpair)
        for _ in range(20):
            await asyncio.sleep(0)
        while_paused = list(reads.reads)
        with pytest.raises(RuntimeError):
            await transport.recv(100)
        transport.resume_receiving()
        await reads.until(b"onetwo")
        peer.close()
        await reads.until(b"onetwo")
        while reads.reads[-1] != b"":
            reads.changed.clear()
            await asyncio.wait_for(reads.changed.wait(), 10)
        ended = list(reads.reads)
        transport.close()

        ours, peer = socket.socketpair()
        ours.setblocking(False)
        transport = PlainTransport(ours)
        reads = _Reads()
        transport.start_receiving(reads, 1 << 16)
        transport.shutdown_read()
        while not reads.reads:
            reads.changed.clear()
            await asyncio.wait_for(reads.changed.wait(), 10)
        transport.send_now(b"still answers")
        assert await loop.sock_recv(peer, 100) == b"still answers"
        transport.close()
        peer.close()
        return while_paused, ended, reads.reads

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        while_paused, ended, after_shutdown = runner.run(scenario())
    assert while_paused == [b"one"]
    assert b"".join(ended) == b"onetwo"
    assert ended[-1] == b""
    assert after_shutdown == [b""]
