"""Idempotent producers through a proxy that loses Produce responses: exactly once, in order.

Each client (confluent-kafka with ``enable.idempotence``, kafka-python with its default idempotence,
aiokafka with ``enable_idempotence``) sends 50,000 distinct messages (a third keyed, a third to an
explicit partition, a third placed by the client) to a 3-partition topic through
:class:`tests.support.kafka_proxy.KafkaProxy`. The proxy forwards every Produce request to the broker but
drops the broker's answer for every ``DROP_EVERY``-th successful one, alternating between closing the
client connection and holding it open until the client's request timeout; the client has to send
again batches that are already in the log. Then the topic is read straight from the broker, and:

- the proxy dropped at least ``MIN_DROPS`` answers, both ways, and every batch whose answer was dropped
  was sent again by the client (same producer id, epoch and sequence) and answered, to the client, with
  the base offset of the copy already stored: the broker's duplicate detection did the work;
- each partition holds exactly the messages the client's delivery reports put there, in send order,
  at offsets 0..n-1, so the set read is the set sent, with no duplicates and nothing lost;
- each delivery report's (partition, offset) holds exactly that message, and a key stays on one
  partition;
- the broker refused no batch (no sequence or epoch error), however the answers were lost.

A control test runs the same faults against a producer with idempotence off and finds exactly one extra
copy of each batch whose answer was dropped (the faults really cause duplicates when nothing prevents
them). Wire-level tests check that Metadata, DescribeCluster and FindCoordinator answers through the
proxy advertise the proxy's address and are otherwise unchanged.

Timeouts are small (2 s request timeouts) and retries bounded where the client has a setting for it
(aiokafka has none: an idempotent aiokafka producer retries a batch until it is acknowledged), so the
module takes well under 90 s.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.kafka_proxy import DropAction, DropPolicy, KafkaProxy, ProxyStats

from tidelog.protocol.codec import decode_request, decode_response, encode_request, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
)
from tidelog.protocol.schema import Request, Response
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

MESSAGES = 50_000
PARTITIONS = 3
DROP_EVERY = 13
MIN_DROPS = 5
MAX_DROPS = 9
ACTIONS = (DropAction.CLOSE, DropAction.CLOSE, DropAction.HOLD)
REQUEST_TIMEOUT_MS = 2_000
DELIVERY_TIMEOUT_MS = 60_000
RETRIES = 50
MAX_SEND_TIMEOUTS = 20  # aiokafka send() calls refused for a full batch (in all)
BATCH_BYTES = 8_192
PADDING = b"." * 40
BROKER_CONFIG = {"num.partitions": PARTITIONS}  # the module's broker: tests/server/conftest.py


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes
    partition: int | None  # None: the client's partitioner decides


def messages() -> list[Message]:
    out = []
    for i in range(MESSAGES):
        value = b"m-%06d-" % i + PADDING
        if i % 3 == 0:
            out.append(Message(b"key-%d" % (i % 101), value, None))
        elif i % 3 == 1:
            out.append(Message(None, value, i % PARTITIONS))
        else:
            out.append(Message(None, value, None))
    return out


Delivery = tuple[int, int]  # (partition, offset)


@pytest.fixture
def proxy(broker: Broker) -> Iterator[KafkaProxy]:
    policy = DropPolicy(
        every=DROP_EVERY,
        actions=ACTIONS,
        skip_first=2,
        max_drops=MAX_DROPS,
        hold_timeout_s=REQUEST_TIMEOUT_MS / 1000 * 5,
    )
    with KafkaProxy(broker.bootstrap_servers, policy) as running:
        yield running


def create_topic(broker: Broker, name: str) -> None:
    from confluent_kafka import admin as ck_admin

    AdminClient, NewTopic = ck_admin.AdminClient, ck_admin.NewTopic  # type: ignore[attr-defined]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=10)[name].result(timeout=15)


# ---- producers: each returns the delivery report (partition, offset) of every message, in send order ----


def produce_confluent_kafka(bootstrap: str, topic: str, sent: list[Message]) -> list[Delivery]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": BATCH_BYTES,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            "retries": RETRIES,
            "retry.backoff.ms": 50,
            # librdkafka enforces request.timeout.ms only on the broker side; a request in flight
            # times out on the client after socket.timeout.ms (then the connection is closed)
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 200,
            "log_level": 3,
        }
    )
    deliveries: list[Delivery | None] = [None] * len(sent)
    errors: list[str] = []

    def report(index: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"message {index}: {err}")
            else:
                deliveries[index] = (msg.partition(), msg.offset())

        return on_delivery

    for index, m in enumerate(sent):
        kwargs: dict[str, Any] = {"value": m.value, "key": m.key, "on_delivery": report(index)}
        if m.partition is not None:
            kwargs["partition"] = m.partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT_MS / 1000) == 0
    assert errors == []
    return _complete(deliveries)


def produce_kafka_python(bootstrap: str, topic: str, sent: list[Message]) -> list[Delivery]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=5,
        batch_size=BATCH_BYTES,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        retries=RETRIES,
        retry_backoff_ms=50,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=200,
    )
    try:
        assert producer.config["enable_idempotence"] is True
        futures = [producer.send(topic, value=m.value, key=m.key, partition=m.partition) for m in sent]
        producer.flush(timeout=DELIVERY_TIMEOUT_MS / 1000)
        metadata = [future.get(timeout=1) for future in futures]
    finally:
        producer.close(timeout=10)
    return [(m.partition, m.offset) for m in metadata]


def produce_aiokafka(bootstrap: str, topic: str, sent: list[Message]) -> list[Delivery]:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaTimeoutError

    send_timeouts: list[Message] = []

    async def send(producer: Any, m: Message) -> asyncio.Future[Any]:
        # send() waits up to request_timeout_ms for room in the partition's batch and raises
        # KafkaTimeoutError without having queued the message if there is none (a held connection
        # keeps the batch ahead of it in flight for that long): sending it again is safe
        while True:
            try:
                future: asyncio.Future[Any] = await producer.send(
                    topic, value=m.value, key=m.key, partition=m.partition
                )
            except KafkaTimeoutError:
                send_timeouts.append(m)
                if len(send_timeouts) >= MAX_SEND_TIMEOUTS:
                    raise
            else:
                return future

    async def run() -> list[Delivery]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=BATCH_BYTES,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            retry_backoff_ms=50,
        )
        await producer.start()
        try:
            futures = [await send(producer, m) for m in sent]
            metadata = await asyncio.wait_for(asyncio.gather(*futures), DELIVERY_TIMEOUT_MS / 1000)
        finally:
            await producer.stop()
        print(f"aiokafka: {len(send_timeouts)} sends found no batch room in time and were repeated")
        return [(m.partition, m.offset) for m in metadata]

    return asyncio.run(run())


PRODUCERS = {
    "confluent-kafka": produce_confluent_kafka,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


def _complete(deliveries: list[Delivery | None]) -> list[Delivery]:
    missing = [i for i, d in enumerate(deliveries) if d is None]
    assert missing == [], f"{len(missing)} messages without a delivery report, first {missing[:5]}"
    return [d for d in deliveries if d is not None]


# ---- reading back, straight from the broker ----


def consume_all(broker: Broker, topic: str) -> dict[int, list[tuple[int, bytes | None, bytes]]]:
    """(offset, key, value) of every record of every partition, read from the broker (not the proxy)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes | None, bytes]]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(5000, timeout=0.5):
                partition, offset = message.partition(), message.offset()
                assert partition is not None
                error = message.error()
                if error is not None:
                    assert error.code() == -191, error  # _PARTITION_EOF
                    at_end.add(partition)
                    continue
                value = message.value()
                assert offset is not None
                assert value is not None
                got[partition].append((offset, message.key(), value))
    finally:
        consumer.close()
    assert at_end == set(range(PARTITIONS)), "did not reach the end of every partition in time"
    return got


# ---- the checks ----


def check_retries(stats: ProxyStats) -> None:
    """Enough answers were dropped, both ways, and each dropped batch was sent again and answered (to
    the client) with the offset of the copy already stored."""
    assert len(stats.dropped) >= MIN_DROPS, stats.dropped
    refused = [(b, a) for b, answers in stats.batch_answers.items() for a in answers if a.error_code]
    assert refused == [], "the broker refused batches (sequence or epoch errors)"
    assert {d.action for d in stats.dropped} == set(ACTIONS)
    for batch, base_offset in stats.dropped_batches():
        assert batch.producer_id >= 0, f"not an idempotent batch: {batch}"
        assert base_offset >= 0
        assert stats.batch_sends[batch] >= 2, f"dropped batch never sent again: {batch}"
        answers = stats.batch_answers[batch]
        assert {a.base_offset for a in answers} == {base_offset}, (batch, answers)
        assert all(a.error_code == ErrorCode.NONE for a in answers), (batch, answers)
        assert any(a.delivered for a in answers), f"the client never got an answer for {batch}"


def check_log(
    sent: list[Message],
    deliveries: list[Delivery],
    stored: dict[int, list[tuple[int, bytes | None, bytes]]],
) -> None:
    assert len(deliveries) == len(sent)
    for m, (partition, _) in zip(sent, deliveries, strict=True):
        assert m.partition is None or partition == m.partition
    # each partition: exactly what the delivery reports put there, in send order, offsets 0..n-1
    for p in range(PARTITIONS):
        expected = [
            (offset, sent[i].key, sent[i].value) for i, (q, offset) in enumerate(deliveries) if q == p
        ]
        records = stored[p]
        assert [offset for offset, _, _ in records] == list(range(len(records)))
        assert len(records) == len(expected), f"partition {p}: {len(records)} stored, {len(expected)} sent"
        # records are in offset order, expected in send order: equal means same messages, same order,
        # and each delivery report's offset holding its message
        assert records == expected, f"partition {p}: not exactly the sent messages in send order"
    # the whole topic: the set sent, each value once
    values = [value for p in range(PARTITIONS) for _, _, value in stored[p]]
    assert len(values) == len(set(values)) == MESSAGES
    assert set(values) == {m.value for m in sent}
    # keys stick to one partition; every partition got something
    key_partitions: dict[bytes, set[int]] = {}
    for m, (partition, _) in zip(sent, deliveries, strict=True):
        if m.key is not None:
            key_partitions.setdefault(m.key, set()).add(partition)
    assert all(len(ps) == 1 for ps in key_partitions.values())
    assert all(stored[p] for p in range(PARTITIONS))


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_idempotent_producer_through_a_lossy_proxy(broker: Broker, proxy: KafkaProxy, client: str) -> None:
    topic = f"idem-proxy-{client}"
    create_topic(broker, topic)
    sent = messages()
    started = time.monotonic()
    deliveries = PRODUCERS[client](proxy.bootstrap_servers, topic, sent)
    elapsed = time.monotonic() - started
    stats = proxy.stats()
    print(
        f"{client}: {elapsed:.1f}s, {stats.produce_requests} produce requests, "
        f"{stats.eligible_responses} eligible answers, {len(stats.dropped)} dropped "
        f"({[d.action.value for d in stats.dropped]}), {stats.swallowed} swallowed, "
        f"{stats.connections} connections"
    )
    assert stats.errors == ()
    assert stats.rewritten >= 1  # the clients learnt the broker's address from the proxy: its own
    check_retries(stats)
    check_log(sent, deliveries, consume_all(broker, topic))


CONTROL_MESSAGES = 10_000
CONTROL_DROPS = 5


def test_control_without_idempotence_every_dropped_batch_is_stored_twice(broker: Broker) -> None:
    """The faults are real: the same proxy in front of a producer with idempotence off (acks=all,
    retries, one request in flight, CLOSE only) leaves exactly one extra copy of each batch whose
    answer it dropped, and nothing else changes."""
    from confluent_kafka import Producer

    topic = "no-idem-proxy-control"
    create_topic(broker, topic)
    sent = messages()[:CONTROL_MESSAGES]
    policy = DropPolicy(every=3, actions=(DropAction.CLOSE,), skip_first=2, max_drops=CONTROL_DROPS)
    with KafkaProxy(broker.bootstrap_servers, policy) as proxy:
        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap_servers,
                "enable.idempotence": False,
                "acks": "all",
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": 5,
                "batch.size": BATCH_BYTES,
                "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                "retries": RETRIES,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 200,
                "log_level": 3,
            }
        )
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        for m in sent:
            kwargs: dict[str, Any] = {"value": m.value, "key": m.key, "on_delivery": on_delivery}
            if m.partition is not None:
                kwargs["partition"] = m.partition
            producer.produce(topic, **kwargs)
            producer.poll(0)
        assert producer.flush(DELIVERY_TIMEOUT_MS / 1000) == 0
        assert errors == []
        del producer  # destroyed while the proxy still listens
        stats = proxy.stats()
    assert stats.errors == ()
    assert len(stats.dropped) == CONTROL_DROPS
    stored = consume_all(broker, topic)
    first_copies: Counter[bytes] = Counter()
    for batch, base_offset in stats.dropped_batches():
        assert (batch.producer_id, batch.base_sequence) == (-1, -1)
        records = stored[batch.partition][base_offset : base_offset + batch.records_count]
        assert [offset for offset, _, _ in records] == list(
            range(base_offset, base_offset + batch.records_count)
        )
        first_copies.update(value for _, _, value in records)
    values = Counter(value for p in range(PARTITIONS) for _, _, value in stored[p])
    assert first_copies, "no batch was dropped"
    assert values - Counter(m.value for m in sent) == first_copies
    assert set(values) == {m.value for m in sent}


# ---- the proxy's address rewriting ----


def call(address: str, body: Request, version: int) -> Response:
    host, port = address.rsplit(":", 1)
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=7, client_id="proxy-test"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(header, body))
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        response_header, response = decode_response(recv_exact(sock, size), body.API_KEY, version)
    assert response_header.correlation_id == 7
    return response


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return bytes(data)


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_metadata_through_the_proxy_advertises_the_proxy(broker: Broker, version: int) -> None:
    request = MetadataRequest(topics=[] if version == 0 else None)  # all topics
    with KafkaProxy(broker.bootstrap_servers) as proxy:
        direct = call(broker.bootstrap_servers, request, version)
        proxied = call(proxy.bootstrap_servers, request, version)
        assert proxy.stats().rewritten == 1
    assert isinstance(direct, MetadataResponse)
    assert isinstance(proxied, MetadataResponse)
    assert [(b.node_id, b.host, b.port) for b in direct.brokers] == [(1, "127.0.0.1", broker.port)]
    assert [(b.node_id, b.host, b.port) for b in proxied.brokers] == [(1, "127.0.0.1", proxy.port)]
    proxied.brokers = direct.brokers
    assert proxied == direct  # nothing else changed


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_through_the_proxy_advertises_the_proxy(broker: Broker, version: int) -> None:
    with KafkaProxy(broker.bootstrap_servers) as proxy:
        proxied = call(proxy.bootstrap_servers, DescribeClusterRequest(), version)
    assert isinstance(proxied, DescribeClusterResponse)
    assert [(b.broker_id, b.host, b.port) for b in proxied.brokers] == [(1, "127.0.0.1", proxy.port)]


@pytest.mark.parametrize("version", [1, 4])
def test_find_coordinator_through_the_proxy_advertises_the_proxy(version: int) -> None:
    """Against a one-shot fake upstream (so this does not depend on the broker's group coordinator):
    found coordinators point at the proxy, a not-found answer (no host) is left alone."""
    found = {"node_id": 1, "host": "10.0.0.9", "port": 9999}
    missing = {"node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if version < 4:
        answer = FindCoordinatorResponse(**found)  # type: ignore[arg-type]
    else:
        answer = FindCoordinatorResponse(
            coordinators=[
                FindCoordinatorResponse.Coordinator(key="g1", **found),  # type: ignore[arg-type]
                FindCoordinatorResponse.Coordinator(key="g2", **missing),  # type: ignore[arg-type]
            ]
        )
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_one() -> None:
        conn, _ = listener.accept()
        with conn:
            (size,) = struct.unpack(">i", recv_exact(conn, 4))
            header, _ = decode_request(recv_exact(conn, size))
            conn.sendall(b"".join(c for c in encode_response(header, answer) if isinstance(c, bytes)))

    server = threading.Thread(target=serve_one, daemon=True)
    server.start()
    try:
        upstream = f"127.0.0.1:{listener.getsockname()[1]}"
        with KafkaProxy(upstream) as proxy:
            got = call(
                proxy.bootstrap_servers,
                FindCoordinatorRequest(key="g1", coordinator_keys=["g1", "g2"]),
                version,
            )
        server.join(timeout=10)
    finally:
        listener.close()
    assert isinstance(got, FindCoordinatorResponse)
    if version < 4:
        assert (got.node_id, got.host, got.port) == (1, "127.0.0.1", proxy.port)
    else:
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in got.coordinators] == [
            ("g1", 1, "127.0.0.1", proxy.port, 0),
            ("g2", -1, "", -1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        ]
