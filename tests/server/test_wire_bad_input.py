"""Bad bytes on the wire (raw sockets) never hurt the broker or anyone else's connection.

Each case asserts the exact outcome on the offending connection, then that a normal client can still
produce and consume (``assert_healthy``):

- garbage, an HTTP request, size prefixes 0, -1, 2 GiB (0x80000000, negative as an int32), 2 GiB - 1 and
  one byte over ``socket.request.max.bytes``: the connection is closed without a response, at once (the
  broker never waits for, or allocates, a body it will refuse);
- an unknown API key and a key the broker does not serve: closed without a response;
- ApiVersions v99: error 35 (UNSUPPORTED_VERSION) in the v0 layout listing every API the broker serves,
  key 18 included, and the connection stays open (v0 and v3 then work on it);
- another API at an unsupported version: answered with its correlation id, or closed without a response;
- a truncated body: closed without a response;
- requests pipelined before a bad frame are all answered, in order, before the close;
- a half frame then silence: the broker keeps serving everyone else, and closes the stalled connection
  once ``connections.max.idle.ms`` (2 s here) has passed;
- 50 junk connections at once, each with its own outcome, while a normal client works.

The broker fixture also fails the test if the broker logged a traceback or an ERROR line.
"""

from __future__ import annotations

import itertools
import select
import socket
import struct
import time
from dataclasses import dataclass

import confluent_kafka
import pytest
from tests.support.kafka_workload import GROUP_ID_UNUSED, confluent_create_topic

from tidelog.protocol.messages import REQUEST_TYPES
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

IDLE_MS = 2000
REQUEST_MAX_BYTES = 104857600  # Kafka's default socket.request.max.bytes, set explicitly
BROKER_CONFIG = {"connections.max.idle.ms": str(IDLE_MS), "socket.request.max.bytes": str(REQUEST_MAX_BYTES)}

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
UNSUPPORTED_VERSION = 35

_correlation = itertools.count(1000)


# -- raw protocol helpers (hand-encoded: independent of tidelog's codec) --------------------------------


def header_v1(api_key: int, version: int, correlation_id: int, client_id: str = "wire-test") -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid


def header_v2(api_key: int, version: int, correlation_id: int, client_id: str = "wire-test") -> bytes:
    return header_v1(api_key, version, correlation_id, client_id) + b"\x00"  # no tagged fields


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_v3_body() -> bytes:
    """ClientSoftwareName / ClientSoftwareVersion as compact strings, no tagged fields."""
    name, version = b"wire-test", b"1.0"
    return bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"


def connect(broker: Broker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """(correlation id, body) of one response frame with a v0 response header."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    payload = recv_exact(sock, size)
    return struct.unpack(">i", payload[:4])[0], payload[4:]


def outcome_after(sock: socket.socket, wait_s: float = 5.0) -> bytes | None:
    """What the peer does next: ``None`` if it closes the connection within ``wait_s`` (after sending
    nothing), else the bytes it sent. A connection still open and silent after ``wait_s`` fails."""
    sock.settimeout(wait_s)
    received = bytearray()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        except TimeoutError:
            pytest.fail(f"connection still open after {wait_s}s (received {bytes(received[:64])!r})")
        if not chunk:
            return None if not received else bytes(received)
        received += chunk
        if time.monotonic() > deadline:
            return bytes(received)


def assert_closed_silently(sock: socket.socket, wait_s: float = 5.0) -> float:
    """The broker closes the connection without sending a byte; returns how long that took."""
    start = time.monotonic()
    got = outcome_after(sock, wait_s)
    assert got is None, f"expected a silent close, got {got[:80]!r}"
    return time.monotonic() - start


def still_open(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except OSError:
        return False


def parse_api_versions_v0(body: bytes) -> tuple[int, list[tuple[int, int, int]]]:
    """(error code, [(key, min, max)]) of a v0-layout ApiVersions body; asserts nothing is left over."""
    error_code, count = struct.unpack(">hi", body[:6])
    entries = [struct.unpack(">hhh", body[6 + 6 * i : 12 + 6 * i]) for i in range(count)]
    assert len(body) == 6 + 6 * count, f"{len(body) - 6 - 6 * count} trailing bytes after the v0 body"
    return error_code, entries


def parse_api_versions_v3(body: bytes) -> tuple[int, list[tuple[int, int, int]], int]:
    """(error code, entries, throttle) of a flexible ApiVersions v3 body (compact array, tagged fields)."""
    (error_code,) = struct.unpack(">h", body[:2])
    pos = 2
    count = body[pos] - 1  # one-byte uvarint is enough below 127 entries
    pos += 1
    entries = []
    for _ in range(count):
        entries.append(struct.unpack(">hhh", body[pos : pos + 6]))
        assert body[pos + 6] == 0, "unexpected tagged fields in an ApiVersion entry"
        pos += 7
    (throttle,) = struct.unpack(">i", body[pos : pos + 4])
    pos += 4
    assert body[pos:] == b"\x00", f"unexpected trailing bytes {body[pos:]!r}"
    return error_code, entries, throttle


# -- a normal client still works -----------------------------------------------------------------------


HEALTH_TOPIC = "wire-health"


@pytest.fixture(scope="module")
def healthy(broker: Broker) -> None:
    confluent_create_topic(broker.bootstrap_servers, HEALTH_TOPIC, 1)


_health_seq = itertools.count()


def assert_healthy(broker: Broker) -> None:
    """A confluent-kafka producer and consumer round trip one record on the same broker."""
    assert broker.is_running, broker.log_tail()
    value = f"health-{next(_health_seq)}-{time.monotonic_ns()}".encode()
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "log_level": 3, "message.timeout.ms": 15000}
    )
    reports: list[tuple[object, int]] = []
    producer.produce(
        HEALTH_TOPIC, value=value, partition=0, on_delivery=lambda e, m: reports.append((e, m.offset()))
    )
    assert producer.flush(20) == 0
    ((error, offset),) = reports
    assert error is None, error
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(HEALTH_TOPIC, 0, offset)])
        message = consumer.poll(15)
        assert message is not None
        assert message.error() is None, message.error()
        assert (message.offset(), message.value()) == (offset, value)
    finally:
        consumer.close()


def api_versions_v0(broker: Broker) -> list[tuple[int, int, int]]:
    with connect(broker) as sock:
        sock.sendall(frame(header_v1(API_VERSIONS, 0, 1)))
        correlation_id, body = read_response(sock)
    assert correlation_id == 1
    error_code, entries = parse_api_versions_v0(body)
    assert error_code == 0
    return entries


# -- cases -------------------------------------------------------------------------------------------------

GARBAGE = bytes.fromhex("deadbeef00ff7f80") * 64


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("garbage", GARBAGE),
        ("http", b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\n\r\n"),
        ("size-0", struct.pack(">i", 0)),
        ("size-minus-1", struct.pack(">i", -1)),
        ("size-2GiB", bytes.fromhex("80000000")),
        ("size-2GiB-minus-1", struct.pack(">i", 0x7FFFFFFF)),
        ("size-over-max", struct.pack(">i", REQUEST_MAX_BYTES + 1) + b"\x00" * 100),
        ("short-frame", frame(b"\x00\x12")),  # 2 bytes: not even a request header
    ],
)
def test_garbage_closes_only_that_connection(broker: Broker, healthy: None, name: str, data: bytes) -> None:
    with connect(broker) as sock:
        sock.sendall(data)
        took = assert_closed_silently(sock)
    assert took < 2.0, f"{name}: the broker took {took:.2f}s to refuse"
    assert_healthy(broker)


def test_garbage_after_a_valid_size_prefix(broker: Broker, healthy: None) -> None:
    """A frame of the right length whose bytes are random: the header does not parse, closed."""
    with connect(broker) as sock:
        sock.sendall(frame(GARBAGE[:200]))
        assert_closed_silently(sock)
    assert_healthy(broker)


@pytest.mark.parametrize("api_key", [1000, -7, "known-to-kafka-but-not-served"])
def test_unknown_or_unserved_api_key_closes(broker: Broker, healthy: None, api_key: int | str) -> None:
    served = {key for key, _, _ in api_versions_v0(broker)}
    if api_key == "known-to-kafka-but-not-served":
        api_key = min(set(REQUEST_TYPES) - served)  # an API Kafka defines that this broker does not route
    assert isinstance(api_key, int)
    assert api_key not in served
    with connect(broker) as sock:
        sock.sendall(frame(header_v1(api_key, 0, 7) + b"\x00" * 16))
        assert_closed_silently(sock)
    assert_healthy(broker)


def test_api_versions_unsupported_version_answers_v0_layout_and_stays_open(
    broker: Broker, healthy: None
) -> None:
    expected = api_versions_v0(broker)
    keys = {key: (lo, hi) for key, lo, hi in expected}
    assert keys[API_VERSIONS][0] == 0
    assert keys[API_VERSIONS][1] >= 3
    assert [key for key, _, _ in expected] == sorted(keys)
    with connect(broker) as sock:
        # v99 with a v2 header and a body the broker cannot know the layout of
        sock.sendall(frame(header_v2(API_VERSIONS, 99, 4242) + b"\x05junk\x00\x01\x02"))
        correlation_id, body = read_response(sock)
        assert correlation_id == 4242
        error_code, entries = parse_api_versions_v0(body)
        assert error_code == UNSUPPORTED_VERSION
        assert entries == expected
        # the connection stays open and usable: v0, then v3 (flexible body, response header v0)
        sock.sendall(frame(header_v1(API_VERSIONS, 0, 4243)))
        correlation_id, body = read_response(sock)
        assert correlation_id == 4243
        assert parse_api_versions_v0(body) == (0, expected)
        sock.sendall(frame(header_v2(API_VERSIONS, 3, 4244) + api_versions_v3_body()))
        correlation_id, body = read_response(sock)
        assert correlation_id == 4244
        assert parse_api_versions_v3(body) == (0, expected, 0)
        # a later unsupported version on the same connection is answered the same way
        sock.sendall(frame(header_v2(API_VERSIONS, 5, 4245)))
        correlation_id, body = read_response(sock)
        assert (correlation_id, parse_api_versions_v0(body)) == (4245, (UNSUPPORTED_VERSION, expected))
        assert still_open(sock)
    assert_healthy(broker)


@pytest.mark.parametrize(("api_key", "version"), [(METADATA, 99), (PRODUCE, 2), (PRODUCE, 0)])
def test_other_api_unsupported_version_answered_or_closed(
    broker: Broker, healthy: None, api_key: int, version: int
) -> None:
    lo, hi = {key: (lo, hi) for key, lo, hi in api_versions_v0(broker)}[api_key]
    assert not lo <= version <= hi
    with connect(broker) as sock:
        sock.sendall(frame(header_v1(api_key, version, 77) + b"\x00" * 12))
        got = outcome_after(sock)
        if got is not None:
            (size,) = struct.unpack(">i", got[:4])
            assert len(got) == 4 + size
            assert struct.unpack(">i", got[4:8])[0] == 77
    assert_healthy(broker)


def test_truncated_bodies_close(broker: Broker, healthy: None) -> None:
    # Metadata v1: topics array of 3 names, only one present
    metadata = header_v1(METADATA, 1, 5) + struct.pack(">i", 3) + struct.pack(">h", 5) + b"topic"
    # ApiVersions v3: ClientSoftwareName claims 40 bytes, 3 follow
    api_versions = header_v2(API_VERSIONS, 3, 6) + bytes([41]) + b"abc"
    # Produce v3: the header stops inside client_id
    produce = struct.pack(">hhih", PRODUCE, 3, 8, 30) + b"short"
    for payload in (metadata, api_versions, produce):
        with connect(broker) as sock:
            sock.sendall(frame(payload))
            assert_closed_silently(sock)
    assert_healthy(broker)


def test_requests_before_a_bad_frame_are_answered_in_order(broker: Broker, healthy: None) -> None:
    expected = api_versions_v0(broker)
    good = frame(header_v1(API_VERSIONS, 0, 1)) + frame(header_v1(API_VERSIONS, 0, 2))
    for bad in (struct.pack(">i", -1), frame(header_v1(1000, 0, 3))):
        with connect(broker) as sock:
            sock.sendall(good + bad)
            for correlation_id in (1, 2):
                got_id, body = read_response(sock)
                assert got_id == correlation_id
                assert parse_api_versions_v0(body) == (0, expected)
            took = assert_closed_silently(sock)
            assert took < 2.0, f"the connection stayed open {took:.2f}s after a bad frame"
    assert_healthy(broker)


@pytest.mark.parametrize(
    "partial",
    [
        frame(header_v1(API_VERSIONS, 0, 9))[:7],  # inside the header
        struct.pack(">i", 100) + b"\x00\x03\x00\x01",  # a size of 100, then 4 bytes of it
        b"\x00\x00",  # half a size prefix
    ],
)
def test_half_frame_then_silence(broker: Broker, healthy: None, partial: bytes) -> None:
    with connect(broker) as sock:
        sock.sendall(partial)
        sent_at = time.monotonic()
        assert_healthy(broker)  # everyone else carries on while this connection stalls
        if time.monotonic() - sent_at < IDLE_MS / 1000 - 0.5:
            assert still_open(sock)
        assert_closed_silently(sock, wait_s=IDLE_MS / 1000 * 2 + 5)
        idle_for = time.monotonic() - sent_at
        assert idle_for >= IDLE_MS / 1000 - 0.1, (
            f"closed after {idle_for:.2f}s, before connections.max.idle.ms"
        )
    assert_healthy(broker)


@dataclass
class Junk:
    kind: str
    data: bytes
    expect: str  # "closed" | "api-versions-error" | "open"


JUNK_KINDS = [
    Junk("garbage", GARBAGE, "closed"),
    Junk("http", b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "closed"),
    Junk("size-0", struct.pack(">i", 0), "closed"),
    Junk("size-minus-1", struct.pack(">i", -1), "closed"),
    Junk("size-2GiB", bytes.fromhex("80000000"), "closed"),
    Junk("unknown-key", frame(header_v1(1000, 0, 1)), "closed"),
    Junk("truncated", frame(header_v1(METADATA, 1, 2) + struct.pack(">i", 9)), "closed"),
    Junk("api-versions-v99", frame(header_v2(API_VERSIONS, 99, 3)), "api-versions-error"),
    Junk("half-frame", struct.pack(">i", 64) + b"\x00\x12", "open"),
    Junk("silent", b"", "open"),
]


def test_fifty_junk_connections_at_once(broker: Broker, healthy: None) -> None:
    expected_versions = api_versions_v0(broker)
    sockets = []
    try:
        for i in range(50):
            junk = JUNK_KINDS[i % len(JUNK_KINDS)]
            sock = connect(broker)
            sockets.append((junk, sock))
        for junk, sock in sockets:
            if junk.data:
                sock.sendall(junk.data)
        assert_healthy(broker)  # while all 50 are open or closing
        by_expectation = sorted(
            sockets, key=lambda js: ("open", "api-versions-error", "closed").index(js[0].expect)
        )
        for junk, sock in by_expectation:  # the open ones first, well within connections.max.idle.ms
            if junk.expect == "open":
                assert still_open(sock), junk.kind
            elif junk.expect == "api-versions-error":
                correlation_id, body = read_response(sock)
                assert correlation_id == 3
                assert parse_api_versions_v0(body) == (UNSUPPORTED_VERSION, expected_versions)
            else:
                assert_closed_silently(sock)
    finally:
        for _, sock in sockets:
            sock.close()
    assert_healthy(broker)
