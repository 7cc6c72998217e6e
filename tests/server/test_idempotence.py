"""Idempotent producers against a real broker: InitProducerId, duplicate retries, sequence errors, restarts.

Real clients with idempotence on (kafka-python's default, confluent-kafka and aiokafka with it enabled)
produce 20,000 messages to 3 partitions and a consumer reads back exactly those, in order; at the wire
level a repeated Produce request is answered with the original offsets and stored once.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records import RecordBatchHeader, SimpleRecord, encode_batch, iter_batch_headers
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

MESSAGES = 20_000
PARTITIONS = 3


@pytest.fixture(scope="module")
def idem_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("idem")
    broker = Broker({"num.partitions": PARTITIONS}, data_dir=workdir / "data", run_dir=workdir / "run")
    broker.start()
    try:
        yield broker
    finally:
        code = broker.stop(timeout=30)
        text = broker.log_path.read_text(errors="replace")
        broker.close()
        assert code == 0
        assert "Traceback" not in text


def create_topic(broker: Broker, name: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka import admin as ck_admin

    AdminClient, NewTopic = ck_admin.AdminClient, ck_admin.NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(timeout=15)


def stored_batches(broker: Broker, topic: str, partition: int) -> list[RecordBatchHeader]:
    directory = Path(broker.data_dir) / f"{topic}-{partition}"
    out: list[RecordBatchHeader] = []
    for segment in sorted(directory.glob("*.log")):
        out.extend(header for _, header in iter_batch_headers(segment.read_bytes()))
    return out


def expected_per_partition() -> dict[int, list[bytes]]:
    return {p: [b"%d" % i for i in range(MESSAGES) if i % PARTITIONS == p] for p in range(PARTITIONS)}


def check_stored_idempotent(broker: Broker, topic: str) -> None:
    """Every stored batch carries a producer id and its partition's sequences are contiguous from 0."""
    for p in range(PARTITIONS):
        headers = stored_batches(broker, topic, p)
        assert headers, f"nothing stored in partition {p}"
        assert all(h.producer_id >= 0 and h.producer_epoch >= 0 for h in headers)
        assert len({h.producer_id for h in headers}) == 1
        assert [h.base_sequence for h in headers] == [h.base_offset for h in headers]
        assert sum(h.records_count for h in headers) == len(expected_per_partition()[p])


def consume_all(broker: Broker, topic: str) -> dict[int, list[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    total = 0
    try:
        while total < MESSAGES and time.monotonic() < deadline:
            for message in consumer.consume(2000, timeout=1.0):
                assert message.error() is None, message.error()
                partition, value, offset = message.partition(), message.value(), message.offset()
                assert partition is not None
                assert value is not None
                assert offset is not None
                got[partition].append(value)
                offsets[partition].append(offset)
                total += 1
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert offsets[p] == list(range(len(offsets[p])))
    return got


def test_kafka_python_default_producer_is_idempotent(idem_broker: Broker) -> None:
    from kafka import KafkaProducer

    topic = "idem-kafka-python"
    create_topic(idem_broker, topic)
    producer = KafkaProducer(bootstrap_servers=idem_broker.bootstrap_servers, linger_ms=5)
    try:
        assert producer.config["enable_idempotence"] is True
        futures = [producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS) for i in range(MESSAGES)]
        producer.flush(timeout=60)
        metadata = [future.get(timeout=10) for future in futures]
    finally:
        producer.close(timeout=10)
    assert [(m.partition, m.offset) for m in metadata[:PARTITIONS]] == [(p, 0) for p in range(PARTITIONS)]
    assert consume_all(idem_broker, topic) == expected_per_partition()
    check_stored_idempotent(idem_broker, topic)


def test_confluent_kafka_idempotent_producer(idem_broker: Broker) -> None:
    from confluent_kafka import Producer

    topic = "idem-confluent"
    create_topic(idem_broker, topic)
    errors: list[object] = []
    producer = Producer(
        {"bootstrap.servers": idem_broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}
    )

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert errors == []
    assert consume_all(idem_broker, topic) == expected_per_partition()
    check_stored_idempotent(idem_broker, topic)


def test_aiokafka_idempotent_producer(idem_broker: Broker) -> None:
    from aiokafka import AIOKafkaProducer

    topic = "idem-aiokafka"
    create_topic(idem_broker, topic)

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=idem_broker.bootstrap_servers, enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS) for i in range(MESSAGES)
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert consume_all(idem_broker, topic) == expected_per_partition()
    check_stored_idempotent(idem_broker, topic)


# ---- the wire ---------------------------------------------------------------------------------------


class Wire:
    """A raw Kafka connection speaking our own codec."""

    def __init__(self, broker: Broker) -> None:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def _recv_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return bytes(data)

    def call(self, body: object, version: int) -> object:
        self.correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,  # type: ignore[attr-defined]
            request_api_version=version,
            correlation_id=self.correlation_id,
            client_id="wire-test",
        )
        self.sock.sendall(encode_request(header, body))  # type: ignore[arg-type]
        (size,) = struct.unpack(">i", self._recv_exact(4))
        response_header, response = decode_response(self._recv_exact(size), body.API_KEY, version)  # type: ignore[attr-defined]
        assert response_header.correlation_id == self.correlation_id
        return response

    def init_producer_id(
        self, version: int = 4, transactional_id: str | None = None
    ) -> InitProducerIdResponse:
        response = self.call(
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000), version
        )
        assert isinstance(response, InitProducerIdResponse)
        return response

    def produce(
        self, topic: str, records: bytes, version: int = 9
    ) -> ProduceResponse.PartitionProduceResponse:
        request = ProduceRequest(
            acks=-1,
            timeout_ms=10000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
                )
            ],
        )
        response = self.call(request, version)
        assert isinstance(response, ProduceResponse)
        return response.responses[0].partition_responses[0]

    def close(self) -> None:
        self.sock.close()


def idem_batch(producer_id: int, epoch: int, seq: int, n: int = 3) -> bytes:
    return encode_batch(
        [
            SimpleRecord(key=None, value=b"s%d" % (seq + i), timestamp=int(time.time() * 1000))
            for i in range(n)
        ],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
    )


@pytest.mark.parametrize("produce_version", [3, 7, 9, 11])
def test_duplicate_produce_request_is_answered_with_the_original_offset(
    idem_broker: Broker, produce_version: int
) -> None:
    topic = f"idem-wire-v{produce_version}"
    create_topic(idem_broker, topic, partitions=1)
    wire = Wire(idem_broker)
    try:
        init = wire.init_producer_id()
        assert (init.error_code, init.producer_epoch) == (ErrorCode.NONE, 0)
        pid = init.producer_id
        plain = wire.produce(
            topic, encode_batch([SimpleRecord(key=None, value=b"x", timestamp=1)]), produce_version
        )
        assert (plain.error_code, plain.base_offset) == (ErrorCode.NONE, 0)
        first = wire.produce(topic, idem_batch(pid, 0, 0), produce_version)
        again = wire.produce(topic, idem_batch(pid, 0, 0), produce_version)
        assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 1)
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, 1)
        gap = wire.produce(topic, idem_batch(pid, 0, 5), produce_version)
        assert (gap.error_code, gap.base_offset) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        nxt = wire.produce(topic, idem_batch(pid, 0, 3), produce_version)
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.NONE, 4)
        again_older = wire.produce(topic, idem_batch(pid, 0, 0), produce_version)
        assert (again_older.error_code, again_older.base_offset) == (ErrorCode.NONE, 1)
        more = wire.produce(topic, idem_batch(pid, 0, 6), produce_version)
        assert (more.error_code, more.base_offset) == (ErrorCode.NONE, 7)
        bumped = wire.produce(topic, idem_batch(pid, 1, 0), produce_version)
        assert (bumped.error_code, bumped.base_offset) == (ErrorCode.NONE, 10)
        fenced = wire.produce(topic, idem_batch(pid, 0, 9), produce_version)
        assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    finally:
        wire.close()
    headers = stored_batches(idem_broker, topic, 0)
    assert [(h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == [
        (0, -1, -1, -1),
        (1, pid, 0, 0),
        (4, pid, 0, 3),
        (7, pid, 0, 6),
        (10, pid, 1, 0),
    ]


@pytest.mark.parametrize("produce_version", [3, 11])
def test_a_partition_payload_must_be_exactly_one_batch(idem_broker: Broker, produce_version: int) -> None:
    """Kafka's rule for Produce v3+: two batches (here the second from another producer), or none, for one
    partition are refused with INVALID_RECORD and nothing is appended."""
    topic = f"one-batch-v{produce_version}"
    create_topic(idem_broker, topic, partitions=1)
    wire = Wire(idem_broker)
    try:
        pid = wire.init_producer_id().producer_id
        plain = encode_batch([SimpleRecord(key=None, value=b"x", timestamp=1)])
        two = wire.produce(topic, idem_batch(pid, 0, 0) + plain, produce_version)
        assert (two.error_code, two.base_offset) == (ErrorCode.INVALID_RECORD, -1)
        expected = (
            f"Produce requests with version {produce_version} are only allowed to contain exactly one record"
            " batch per partition"
        )
        assert two.error_message == (expected if produce_version >= 8 else None)  # a field of v8+
        none = wire.produce(topic, b"", produce_version)
        assert (none.error_code, none.base_offset) == (ErrorCode.INVALID_RECORD, -1)
        one = wire.produce(topic, idem_batch(pid, 0, 0), produce_version)
        assert (one.error_code, one.base_offset) == (ErrorCode.NONE, 0)
    finally:
        wire.close()
    assert [(h.base_offset, h.producer_id) for h in stored_batches(idem_broker, topic, 0)] == [(0, pid)]


def test_init_producer_id_versions_and_transactional_ids(idem_broker: Broker) -> None:
    wire = Wire(idem_broker)
    try:
        ids = []
        for version in range(6):
            response = wire.init_producer_id(version)
            assert (response.error_code, response.producer_epoch) == (ErrorCode.NONE, 0)
            ids.append(response.producer_id)
        assert ids == sorted(set(ids))
        # A transactional id goes to the transaction coordinator, which owns nothing before
        # __transaction_state exists (FindCoordinator creates it): the client must look it up first.
        txn = wire.init_producer_id(4, transactional_id="txn-1")
        assert (txn.error_code, txn.producer_id, txn.producer_epoch) == (ErrorCode.NOT_COORDINATOR, -1, -1)
    finally:
        wire.close()


def test_producer_ids_survive_restarts(tmp_path: Path) -> None:
    broker = Broker({}, data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    broker.start()
    try:
        seen: list[int] = []
        for _life in range(3):
            wire = Wire(broker)
            try:
                got = [wire.init_producer_id().producer_id for _ in range(3)]
            finally:
                wire.close()
            assert got == sorted(got)
            assert not seen or got[0] > max(seen)
            seen += got
            broker.stop(timeout=30)
            broker.start()
        # a crash (no clean shutdown) must not reuse ids either
        wire = Wire(broker)
        try:
            before = wire.init_producer_id().producer_id
        finally:
            wire.close()
        broker.kill()
        broker.start()
        wire = Wire(broker)
        try:
            assert wire.init_producer_id().producer_id > before
        finally:
            wire.close()
    finally:
        broker.stop(timeout=30)
        broker.close()


@pytest.mark.parametrize("stop", ["graceful", "kill"])
def test_producer_state_survives_a_restart(tmp_path: Path, stop: str) -> None:
    """After a clean shutdown (snapshot at the log end) or a kill -9 (snapshot at the segment base plus
    header replay) a retry of the last batch is still a duplicate and a gap is still refused."""
    broker = Broker({}, data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    broker.start()
    try:
        create_topic(broker, "survivor", partitions=1)
        wire = Wire(broker)
        try:
            pid = wire.init_producer_id().producer_id
            offsets = [wire.produce("survivor", idem_batch(pid, 0, seq)).base_offset for seq in (0, 3, 6)]
        finally:
            wire.close()
        assert offsets == [0, 3, 6]
        if stop == "kill":
            broker.kill()
        else:
            assert broker.stop(timeout=30) == 0
        broker.start()
        wire = Wire(broker)
        try:
            retry = wire.produce("survivor", idem_batch(pid, 0, 6))
            assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 6)
            gap = wire.produce("survivor", idem_batch(pid, 0, 10))
            assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            nxt = wire.produce("survivor", idem_batch(pid, 0, 9))
            assert (nxt.error_code, nxt.base_offset) == (ErrorCode.NONE, 9)
        finally:
            wire.close()
        assert [h.base_sequence for h in stored_batches(broker, "survivor", 0)] == [0, 3, 6, 9]
    finally:
        broker.stop(timeout=30)
        broker.close()
