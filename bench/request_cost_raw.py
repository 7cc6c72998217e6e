"""The broker's CPU per request with a minimal client, and the floor under it (issue 17).

    .venv/bin/python bench/request_cost_raw.py [--blocks 10] [--block 1000] [--floor]

A blocking socket client in this process sends pre-encoded requests one at a time (no pipelining) to a
freshly started broker (``tidelog.testing.Broker``, one partition) and reads each response:

- **produce**: Produce v9, acks=1, one batch of one 100-byte record;
- **empty fetch**: Fetch v12 at the idle partition's end, ``max_wait_ms=1``, ``min_bytes=1`` (every request
  waits in the purgatory and expires empty).

The broker's CPU (utime + stime from ``/proc``) is taken per block of ``--block`` requests; the report gives
the minimum and the median over ``--blocks`` blocks: on a machine shared with other work the minimum is the
figure least inflated by contention. Unlike ``request_cost_bench.py`` the client costs next to nothing and
needs no statistics callback, so short blocks are exact.

``--floor`` also measures a bare uvloop server answering 100-byte frames with the same client: an
``asyncio.Protocol`` echo (the cheapest a Python server on uvloop gets) and a ``sock_recv``/``send`` loop
(the shape of the broker's connection): what any CPython broker pays per request before doing any work;
and the Protocol echo answering after a 1 ms timer (``call_later``), the floor of an empty fetch that waits
``max_wait_ms=1``: the sleep and the timer wake-up cost CPU of their own.

Run it against an older checkout with ``PYTHONPATH=<that checkout>/src`` for before/after pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import struct
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records_codec import SimpleRecord, encode_batch
from tidelog.testing import Broker

TOPIC = "request-cost-raw"
_SIZE = struct.Struct(">i")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def roundtrip(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (size,) = _SIZE.unpack(head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return bytes(body)


def produce_frame() -> bytes:
    records = encode_batch([SimpleRecord(value=b"x" * 100)])
    body = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    return encode_request(
        RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1, client_id="raw"), body
    )


def fetch_frame(
    offset: int,
    max_wait_ms: int = 1,
    *,
    topic: str = TOPIC,
    partition: int = 0,
    correlation_id: int = 2,
    client_id: str = "raw",
) -> bytes:
    """A Fetch v12 request for ``topic``/``partition`` from ``offset``, waiting up to ``max_wait_ms`` for a byte."""
    body = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    header = RequestHeader(
        request_api_key=1, request_api_version=12, correlation_id=correlation_id, client_id=client_id
    )
    return encode_request(header, body)


def measure(pid_cpu: Callable[[], float], send: Callable[[], object], blocks: int, block: int) -> list[float]:
    """µs of server CPU per request, per block."""
    for _ in range(block):  # warm-up
        send()
    figures = []
    for _ in range(blocks):
        before = pid_cpu()
        for _ in range(block):
            send()
        figures.append((pid_cpu() - before) / block * 1e6)
    return figures


def report(name: str, figures: list[float]) -> None:
    print(f"{name}: min {min(figures):.1f} µs/request, median {statistics.median(figures):.1f} µs/request")


# -- the floor: bare uvloop servers ----------------------------------------------------------------


async def _protocol_echo(ports: Queue[int], delay_s: float) -> None:
    loop = asyncio.get_running_loop()

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if delay_s:
                loop.call_later(delay_s, self.transport.write, data)  # type: ignore[attr-defined]
            else:
                self.transport.write(data)  # type: ignore[attr-defined]

    server = await loop.create_server(Echo, "127.0.0.1", 0)
    ports.put(server.sockets[0].getsockname()[1])
    await asyncio.sleep(3600)


async def _sock_echo(ports: Queue[int]) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    ports.put(listener.getsockname()[1])
    sock, _ = await loop.sock_accept(listener)
    sock.setblocking(False)
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            data = await loop.sock_recv(sock, 1 << 16)
        if not data:
            return
        sock.send(data)


def _serve(kind: str, ports: Queue[int]) -> None:
    import uvloop

    if kind == "sock":
        uvloop.run(_sock_echo(ports))
    else:
        uvloop.run(_protocol_echo(ports, 0.001 if kind == "protocol-1ms" else 0.0))


def floor(kind: str, blocks: int, block: int) -> list[float]:
    ports: Queue[int] = multiprocessing.get_context("fork").Queue()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(kind, ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=30)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = _SIZE.pack(100) + b"x" * 100
        assert server.pid is not None
        pid = server.pid
        return measure(lambda: cpu_seconds(pid), lambda: roundtrip(sock, frame), blocks, block)
    finally:
        server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block", type=int, default=1000, help="requests per measured block")
    parser.add_argument("--wait-ms", type=int, default=1, help="the empty fetch's max_wait_ms")
    parser.add_argument("--floor", action="store_true", help="also measure bare uvloop echo servers")
    args = parser.parse_args()
    with Broker({"num.partitions": 1}, startup_timeout=120) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
        assert broker.pid is not None
        pid = broker.pid
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        produce = produce_frame()
        _, answer = decode_response(roundtrip(sock, produce), 0, 9)
        assert isinstance(answer, ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == 0, answer
        cpu: Callable[[], float] = lambda: cpu_seconds(pid)  # noqa: E731
        report("produce", measure(cpu, lambda: roundtrip(sock, produce), args.blocks, args.block))
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "raw"})
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        consumer.close()
        fetch = fetch_frame(end, args.wait_ms)
        _, answer = decode_response(roundtrip(sock, fetch), 1, 12)
        assert isinstance(answer, FetchResponse)
        assert answer.responses[0].partitions[0].error_code == 0, answer
        report(
            f"empty fetch (max_wait_ms={args.wait_ms})",
            measure(cpu, lambda: roundtrip(sock, fetch), args.blocks, args.block),
        )
    if args.floor:
        report("floor: uvloop Protocol echo", floor("protocol", args.blocks, args.block))
        report("floor: uvloop sock_recv/send loop", floor("sock", args.blocks, args.block))
        report(
            "floor: uvloop Protocol echo after a 1 ms timer", floor("protocol-1ms", args.blocks, args.block)
        )


if __name__ == "__main__":
    main()
