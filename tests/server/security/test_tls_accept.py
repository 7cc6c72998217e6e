"""``accept_tls`` on asyncio's loop and on uvloop (the broker's): a client certificate's principal, record
data copied through TLS whole, and handshakes that fail (timeout, unknown CA) returning None with one info
line and the socket closed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from tests.support.certs import TlsMaterial

from tidelog.server.config import BrokerConfig
from tidelog.server.regions import RegionList
from tidelog.server.security.tls_accept import TlsConnection, accept_tls
from tidelog.server.security.tls_config import ListenerTls, listener_tls
from tidelog.storage.fetch_data import FileRegion
from tidelog.storage.file_handles import SegmentFile

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture(scope="module")
def mtls(pki: TlsMaterial) -> ListenerTls:
    config = BrokerConfig.from_mapping(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(pki.broker.keystore),
            "ssl.client.auth": "required",
            "ssl.truststore.location": str(pki.ca.cert),
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
        }
    )
    return listener_tls(config)["SSL"]


def client_context(pki: TlsMaterial, ca: Path, *, with_cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if with_cert:
        context.load_cert_chain(str(pki.alice.cert), str(pki.alice.key))
    return context


async def serve_one(
    tls: ListenerTls, timeout_s: float = 5.0
) -> tuple[int, asyncio.Task[TlsConnection | None]]:
    """A listening socket whose first connection is handed to accept_tls; its port and that task."""
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)

    async def accept() -> TlsConnection | None:
        try:
            sock, address = await loop.sock_accept(listener)
        finally:
            listener.close()
        sock.setblocking(False)
        return await accept_tls(
            sock, tls, peer=f"{address[0]}:{address[1]}", connection_id=7, handshake_timeout_s=timeout_s
        )

    return listener.getsockname()[1], asyncio.ensure_future(accept())


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_client_certificate_gives_the_principal_and_regions_arrive_whole(
    pki: TlsMaterial, mtls: ListenerTls, tmp_path: Path, loop: str
) -> None:
    payload = bytes(range(256)) * 4096
    (tmp_path / "segment.log").write_bytes(payload)
    handle = SegmentFile(tmp_path / "segment.log")
    chunks: list[object] = [b"head", FileRegion(handle, 10, 700_000), RegionList([FileRegion(handle, 0, 5)])]
    expected = b"head" + payload[10:700_010] + payload[:5]

    async def scenario() -> tuple[str, bytes, bytes]:
        port, accepting = await serve_one(mtls)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(pki, pki.ca.cert), server_hostname="localhost"
        )
        accepted = await accepting
        assert accepted is not None
        await accepted.transport.send_chunks(chunks)
        received = await reader.readexactly(len(expected))
        writer.write(b"ping")
        await writer.drain()
        ping = await accepted.transport.recv(100)
        accepted.transport.close()
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
        return str(accepted.principal), received, ping

    try:
        principal, received, ping = RUNNERS[loop](scenario())
    finally:
        handle.close()
    assert principal == "User:alice"
    assert received == expected
    assert ping == b"ping"


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_silent_client_is_dropped_after_the_handshake_timeout(
    mtls: ListenerTls, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[TlsConnection | None, bytes]:
        port, accepting = await serve_one(mtls, timeout_s=0.3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        accepted = await asyncio.wait_for(accepting, 10)
        try:
            rest = await asyncio.wait_for(reader.read(), 10)
        except ConnectionError:
            rest = b""
        writer.close()
        return accepted, rest

    with caplog.at_level(logging.INFO, logger="tidelog.security.tls"):
        accepted, rest = RUNNERS[loop](scenario())
    assert accepted is None
    assert rest == b""
    assert [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()] != []


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_certificate_from_another_ca_fails_the_handshake(
    pki: TlsMaterial, mtls: ListenerTls, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> TlsConnection | None:
        port, accepting = await serve_one(mtls)
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        context.load_cert_chain(str(pki.mallory.cert), str(pki.mallory.key))
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="localhost"
            )
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                await reader.read()
            writer.close()
        return await asyncio.wait_for(accepting, 10)

    with caplog.at_level(logging.INFO, logger="tidelog.security.tls"):
        assert RUNNERS[loop](scenario()) is None
    failures = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(failures) == 1
    assert "CERTIFICATE_VERIFY_FAILED" in failures[0]
    assert all(r.exc_info is None for r in caplog.records)
