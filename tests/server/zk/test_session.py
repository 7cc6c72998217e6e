"""tidelog.server.zk.session against a server that accepts a connection and never answers it: what a
ZooKeeper 3.8.0 still loading its database does to a client that reconnects (the server's close of that
connection fails, so the socket stays open). kazoo would wait the whole session timeout for the
handshake's answer; the session gives up after a third of it and asks again."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from tidelog.server.zk import ZkError
from tidelog.server.zk.session import ZkSession


class SilentServer:
    """Accepts every connection, reads nothing, answers nothing; counts the connections."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _addr = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def test_an_unanswered_handshake_is_retried_well_within_the_session_timeout(silent: SilentServer) -> None:
    session = ZkSession(f"127.0.0.1:{silent.port}", session_timeout_ms=6_000, connection_timeout_ms=5_000)

    async def start() -> None:
        try:
            with pytest.raises(ZkError, match="could not connect to ZooKeeper"):
                await session.start()
        finally:
            await session.close()

    asyncio.run(start())
    # a handshake bounded at 2 s (6 s / 3) and a reconnect delay of at most 1 s: a second connection within
    # the 5 s; kazoo's own 6 s wait would have left the first one alone
    assert len(silent.accepted) >= 2
