"""A fix for kafka-python 3.0.12 (pinned in pyproject.toml), applied to the test process by tests/conftest.py.

``kafka.net.inet.KafkaNetSocket.connect`` creates a socket and, when the connect fails (refused by a
broker a test has just killed, timed out across a network partition), raises without closing it. The
socket is closed only when the garbage collector finds it, and pytest (warnings are errors here) turns the
``ResourceWarning`` into a failure of whichever test the collection happens to run in. The replacement
below is the library's own ``connect`` plus closing the socket on failure; nothing else changes.
Remove it once kafka-python closes the socket itself.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["close_sockets_of_failed_connects"]


def close_sockets_of_failed_connects() -> None:
    from kafka.net import inet

    async def connect(
        self: Any, net: Any, addrinfo: Any, socket_options: Any = (), timeout_at: float | None = None
    ) -> socket.socket:
        family, sock_type, proto, _canonname, sockaddr = addrinfo
        sock: socket.socket = self.socket(family, sock_type, proto)
        try:
            sock.setblocking(False)
            for option in socket_options:
                sock.setsockopt(*option)
            connected: socket.socket = await self.sock_connect(net, sock, sockaddr, timeout_at=timeout_at)
        except BaseException:
            sock.close()
            raise
        return connected

    inet.KafkaNetSocket.connect = connect  # type: ignore[method-assign]
