"""Transports: the same chunks (bytes and file regions) reach the peer byte for byte over a plain socket
(sendfile) and over asyncio streams (copied); a file shorter than its region breaks the connection."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

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
