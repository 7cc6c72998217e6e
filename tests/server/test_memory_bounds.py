"""Broker memory stays bounded under abuse, each case measured as the broker's RSS (``VmRSS``/``VmHWM`` of
its process), over real sockets, with a normal client's round trip after each:

- a client that pipelines requests and never reads a response: the broker stops reading it (the socket
  stays unread once ``queued.max.requests`` are in flight or its responses back up), RSS barely moves, and
  every response is still there, in order, once the client reads;
- ``queued.max.requests``: with 16 long-poll fetches in flight, the 17th request (a produce) on that
  connection is not handled until they finish, while other connections are served;
- frames declaring just under ``socket.request.max.bytes`` on many connections: nothing is allocated for
  bytes that have not arrived (and the over-size prefix is refused before allocation: test_wire_bad_input);
- a consumer asking for 1 GiB per fetch gets at most ``fetch.max.bytes`` (records are sent from the file,
  so RSS does not follow the response size);
- 2,000 idle connections (10,000 as a soak): under 32 KiB each (about 14 KiB measured), and all are
  served afterwards.

The broker fixture fails the module if the broker logged a traceback or an ERROR line.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.abuse import confluent_round_trip, peak_rss_bytes, produce_raw, record_rss, rss_bytes
from tests.support.kafka_workload import confluent_create_topic

from tidelog.client.wire import WireClient
from tidelog.protocol.codec import encode_request
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    ProduceRequest,
    RequestHeader,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

MIB = 1 << 20
QUEUED_MAX_REQUESTS = 16
FETCH_MAX_BYTES = 2 * MIB
BROKER_CONFIG = {
    "queued.max.requests": str(QUEUED_MAX_REQUESTS),
    "fetch.max.bytes": str(FETCH_MAX_BYTES),
    "socket.request.max.bytes": str(100 * MIB),
}
HEALTH = "mem-health"
DATA = "mem-data"
WAIT = "mem-wait"


@pytest.fixture(scope="module")
def pid(broker: Broker) -> int:
    for topic in (HEALTH, DATA, WAIT):
        confluent_create_topic(broker.bootstrap_servers, topic, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    for future in admin.create_topics(
        [NewTopic(f"mem-filler-{i}", num_partitions=1) for i in range(40)]
    ).values():
        future.result(timeout=30)
    assert broker.pid is not None
    return broker.pid


def _connect(broker: Broker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _frame(body: object, version: int, correlation_id: int) -> bytes:
    header = RequestHeader(
        request_api_key=body.API_KEY,  # type: ignore[attr-defined]
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="mem",
    )
    return encode_request(header, body)  # type: ignore[arg-type]


def test_a_client_that_never_reads_is_muted(broker: Broker, pid: int) -> None:
    """3,000 Metadata requests (all 40-odd topics: ~9 MB of responses) sent without reading: the
    broker's output backs up into the socket, it stops handling the connection's requests, its memory
    does not follow the backlog, other clients are served, and the responses all arrive, in order."""
    count = 3000
    stream = b"".join(_frame(MetadataRequest(topics=None), 9, i) for i in range(count))
    before = rss_bytes(pid)
    with _connect(broker) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(stream)
        confluent_round_trip(broker.bootstrap_servers, HEALTH)  # others are served meanwhile
        first = _read_frame(sock)
        assert struct.unpack_from(">i", first)[0] == 0
        assert len(first) * count > 6 * MIB, len(first)  # more than the socket buffers hold
        for expected in range(1, count):
            assert struct.unpack_from(">i", _read_frame(sock))[0] == expected
    grew = peak_rss_bytes(pid) - before
    record_rss("client that never reads (3,000 metadata responses)", before, before + grew)
    assert grew < 48 * MIB, f"peak RSS rose {grew / MIB:.0f} MiB for a client that did not read"


def test_queued_max_requests_holds_the_next_request(broker: Broker, pid: int) -> None:
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=3000,
        min_bytes=1,
        max_bytes=MIB,
        topics=[
            FetchRequest.FetchTopic(
                topic=WAIT,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MIB)
                ],
            )
        ],
    )
    batch = encode_batch([SimpleRecord(key=b"k", value=b"held", timestamp=int(time.time() * 1000))])
    produce = ProduceRequest(
        acks=1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=DATA, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    with WireClient("127.0.0.1", broker.port, timeout=20) as other:
        start = _end_offset(other, DATA)
        with _connect(broker) as sock:
            sent_at = time.monotonic()
            sock.sendall(
                b"".join(_frame(fetch, 11, i) for i in range(QUEUED_MAX_REQUESTS)) + _frame(produce, 8, 99)
            )
            # Another connection's produce is answered meanwhile: the broker has read what it will read.
            assert produce_raw(other, DATA, batch) == (0, None)
            assert _end_offset(other, DATA) == start + 1, "the 17th request was handled past the limit"
            for i in range(QUEUED_MAX_REQUESTS):
                assert struct.unpack_from(">i", _read_frame(sock))[0] == i
            assert struct.unpack_from(">i", _read_frame(sock))[0] == 99
            assert time.monotonic() - sent_at >= 2.5  # it waited for the long polls
        assert _end_offset(other, DATA) == start + 2


def _end_offset(client: WireClient, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    response = client.call(request, expect=ListOffsetsResponse)
    return response.topics[0].partitions[0].offset


def test_frames_declared_near_the_limit_allocate_nothing_up_front(broker: Broker, pid: int) -> None:
    before = rss_bytes(pid)
    socks = [_connect(broker) for _ in range(50)]
    try:
        for sock in socks:
            sock.sendall(struct.pack(">i", 100 * MIB - 1) + b"\x00" * 1024)
        confluent_round_trip(broker.bootstrap_servers, HEALTH)
        grew = rss_bytes(pid) - before
        record_rss("50 frames declared at 100 MiB", before, before + grew)
        assert grew < 32 * MIB, f"RSS grew {grew / MIB:.0f} MiB for 50 frames declared at 100 MiB"
    finally:
        for sock in socks:
            sock.close()


def test_a_one_gib_fetch_gets_at_most_fetch_max_bytes(broker: Broker, pid: int) -> None:
    value = bytes(range(256)) * 2048  # 512 KiB, incompressible enough
    with WireClient("127.0.0.1", broker.port, timeout=20) as client:
        for _ in range(12):  # 6 MiB in the log
            batch = encode_batch([SimpleRecord(key=b"k", value=value, timestamp=int(time.time() * 1000))])
            assert produce_raw(client, HEALTH, batch) == (0, None)
        before = rss_bytes(pid)
        fetch = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 30,
            topics=[
                FetchRequest.FetchTopic(
                    topic=HEALTH,
                    partitions=[
                        FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 30)
                    ],
                )
            ],
        )
        response = client.call(fetch, 11, expect=FetchResponse)
    records = response.responses[0].partitions[0].records
    assert records is not None
    assert 2 * len(value) < len(records) <= FETCH_MAX_BYTES
    grew = peak_rss_bytes(pid) - before
    record_rss("1 GiB fetch", before, before + grew, response_bytes=len(records))
    assert grew < 16 * MIB, f"peak RSS rose {grew / MIB:.0f} MiB for a 1 GiB fetch"


def _idle_connections(broker: Broker, pid: int, count: int, per_connection_bound: int) -> None:
    confluent_round_trip(broker.bootstrap_servers, HEALTH)
    before = rss_bytes(pid)
    socks: list[socket.socket] = []
    probe = _frame(MetadataRequest(topics=[]), 9, 7)
    try:
        # One at a time, each answering a request: the listen backlog (50) never overflows, and every
        # connection is known to be accepted and served.
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
            socks.append(sock)
            sock.sendall(probe)
            assert struct.unpack_from(">i", _read_frame(sock))[0] == 7
        grew = rss_bytes(pid) - before
        record_rss(
            f"{count:,} idle connections", before, before + grew, per_connection_kib=grew / count / 1024
        )
        assert grew < count * per_connection_bound, f"{count} idle connections took {grew / MIB:.1f} MiB"
        confluent_round_trip(broker.bootstrap_servers, HEALTH)
    finally:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()


def test_two_thousand_idle_connections(broker: Broker, pid: int) -> None:
    _idle_connections(broker, pid, 2000, 32 * 1024)


@pytest.mark.soak
def test_ten_thousand_idle_connections(broker: Broker, pid: int) -> None:
    _idle_connections(broker, pid, 10_000, 32 * 1024)
