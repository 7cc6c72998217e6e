"""The ``GET /metrics`` endpoint: a minimal HTTP/1.1 server on the broker's event loop.

Invariants:
- Bound only when ``metrics.listener`` is set, on exactly the host given; port 0 takes a free port, read
  back into :attr:`MetricsEndpoint.port`.
- The exposition is prometheus_client's (``generate_latest``, or OpenMetrics when the scraper asks for it
  in ``Accept``); scraping runs the collectors on the event loop, so they read the broker's state without
  locks, between two request handlers.
- One request per connection (``Connection: close``); a request head larger than 8 KiB or slower than
  10 s is dropped. Only ``GET``/``HEAD`` of ``/metrics`` (and ``/``) are served; anything else gets
  404/405. Stopping closes the socket and every open scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsEndpoint"]

log = logging.getLogger("tidelog.metrics")

_MAX_HEAD: Final = 8192
_HEAD_TIMEOUT_S: Final = 10.0


class MetricsEndpoint:
    """Serves one registry over HTTP until :meth:`stop`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True, limit=_MAX_HEAD
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        for task in list(self._clients):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
            status, headers, body = self._answer(head)
            lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}"]
            writer.write(("\r\n".join([*lines, "Connection: close", "", ""])).encode("latin-1"))
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        if len(head) > _MAX_HEAD:
            return "431 Request Header Fields Too Large", [], b""
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", [], b""
        method, target, _version = parts
        path = target.split("?", 1)[0]
        if path not in ("/metrics", "/"):
            return "404 Not Found", [("Content-Type", "text/plain")], b"only /metrics is served here\n"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        if path == "/":
            return (
                "200 OK",
                [("Content-Type", "text/plain")],
                b"tidelog broker: Prometheus metrics at /metrics\n",
            )
        accept = ""
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "accept":
                accept = value.strip()
        encoder, content_type = choose_encoder(accept)
        try:
            body = encoder(self._registry)
        except Exception:
            log.exception("collecting metrics failed")
            return "500 Internal Server Error", [], b""
        return "200 OK", [("Content-Type", content_type)], body
