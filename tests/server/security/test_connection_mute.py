"""Connection.mute_for, the hook quota throttling uses (KIP-219): a muted connection handles no further
request, even one already received in the same read, until the throttle time has passed; the response of
the request that was throttled still leaves at once; stopping the broker cuts the mute short."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from tests.support.frames import describe_cluster_frame as _frame

from tidelog.protocol.messages import ApiKey, DescribeClusterResponse
from tidelog.server.connection import Connection
from tidelog.server.dispatch import Dispatcher, RequestContext, Route


class _Transport:
    def __init__(self, incoming: bytes) -> None:
        self._incoming = [incoming]
        self.sent: list[float] = []
        self.eof = asyncio.Event()
        self.both_sent = asyncio.Event()

    async def recv(self, max_bytes: int) -> bytes:
        if self._incoming:
            return self._incoming.pop()
        await self.eof.wait()
        return b""

    async def send_chunks(self, chunks: Sequence[object]) -> None:
        self.sent.append(time.monotonic())
        if len(self.sent) == 2:
            self.both_sent.set()

    def shutdown_read(self) -> None:
        self.eof.set()

    def close(self) -> None:
        self.eof.set()


class _ReceivingTransport(_Transport):
    """The same, read the way a plain socket is (issue 17): ``start_receiving`` hands each read to the
    connection from a callback; nothing is handed over while reading is paused."""

    def start_receiving(self, receiver: Any, max_bytes: int) -> None:
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.pauses = 0
        self._feeding = asyncio.get_running_loop().create_task(self._feed(receiver))

    async def _feed(self, receiver: Any) -> None:
        while self._incoming:
            await self.resumed.wait()
            receiver.data_received(self._incoming.pop())
        await self.eof.wait()
        await self.resumed.wait()
        receiver.data_received(b"")

    def pause_receiving(self) -> None:
        self.pauses += 1
        self.resumed.clear()

    def resume_receiving(self) -> None:
        self.resumed.set()


def _run(
    mute_ms: int, stop_after_s: float | None, receiving: bool = False
) -> tuple[list[float], list[float], float]:
    handled: list[float] = []

    async def scenario() -> tuple[list[float], list[float], float]:
        connection: Connection

        def handler(ctx: RequestContext, request: Any) -> DescribeClusterResponse:
            handled.append(time.monotonic())
            if len(handled) == 1:
                connection.mute_for(mute_ms)
            return DescribeClusterResponse()

        kind = _ReceivingTransport if receiving else _Transport
        transport = kind(_frame(1) + _frame(2))  # both requests in one read
        connection = Connection(
            transport,  # type: ignore[arg-type]
            "127.0.0.1:1",
            1,
            Dispatcher([Route(ApiKey.DESCRIBE_CLUSTER, 0, 1, handler)]),
            max_request_bytes=1 << 20,
        )
        start = time.monotonic()
        serving = asyncio.create_task(connection.serve())
        if stop_after_s is not None:
            await asyncio.sleep(stop_after_s)
            connection.stop_reading()
        else:
            await asyncio.wait_for(transport.both_sent.wait(), 10)
            transport.eof.set()
        await asyncio.wait_for(serving, 10)
        return [t - start for t in handled], [t - start for t in transport.sent], time.monotonic() - start

    return asyncio.run(scenario())


@pytest.mark.parametrize("receiving", [False, True], ids=["recv", "start_receiving"])
def test_a_muted_connection_holds_the_next_request_for_the_throttle_time(receiving: bool) -> None:
    handled, sent, _ = _run(300, None, receiving)
    assert len(handled) == 2
    assert sent[0] < 0.25  # the throttled request's own response is not delayed
    assert handled[1] >= 0.3  # the next one, though already read, waits out the mute
    assert sent[1] >= 0.3


@pytest.mark.parametrize("receiving", [False, True], ids=["recv", "start_receiving"])
def test_stopping_cuts_a_mute_short(receiving: bool) -> None:
    handled, _, took = _run(60_000, 0.2, receiving)
    assert len(handled) == 1  # the request held by the mute is never handled
    assert took < 5
