"""kafka-python 3.0 against a real tidelog broker.

- Metadata (admin ``describe_topics``, consumer ``partitions_for_topic``): node 1 leads every partition.
- 100,000 keyed messages with headers, 20,000 per codec (none, gzip, snappy, lz4, zstd) over 4 partitions:
  every future's (partition, offset) holds exactly that message, offsets are 0..n-1 per partition,
  production order and key stickiness hold, and the segment files hold batches of that codec.
- ``offsets_for_times`` gives the exact (offset, timestamp) of the first record at or after the timestamp,
  also inside multi-record batches, and None past the end; ``beginning_offsets`` / ``end_offsets``.
- DeleteRecords (admin ``delete_records``) moves the log start offset; consuming from the beginning starts
  there and a position below it is reset to it (``auto_offset_reset="earliest"``).

Consumers use ``group_id=None`` and ``assign()``; producers disable idempotence (kafka-python 3 turns it
on by default, and InitProducerId is not served yet).
"""

from __future__ import annotations

import time
import uuid

import kafka
import pytest
from kafka.admin import KafkaAdminClient
from tests.support.kafka_workload import (
    CODECS,
    assert_codec_used,
    expected_offset_for_time,
    kafka_python_consume,
    kafka_python_produce,
    make_messages,
    partition_timelines,
    stored_batches,
    time_queries,
    verify_log,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

PARTITIONS = 4
PER_CODEC = 20_000


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}}
        )
    finally:
        admin.close()
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        low, high = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    finally:
        consumer.close()
    return {tp.partition: (low[tp], high[tp]) for tp in tps}


def test_metadata_round_trip(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 3)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
        listed = admin.list_topics()
    finally:
        admin.close()
    assert topic in listed
    topic_id = described.pop("topic_id")
    assert uuid.UUID(str(topic_id)) != uuid.UUID(int=0)
    assert "READ" in described.pop("authorized_operations", ["READ"])
    assert described == {
        "error_code": 0,
        "name": topic,
        "is_internal": False,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": 1,
                "leader_epoch": 0,
                "replica_nodes": [1],
                "isr_nodes": [1],
                "offline_replicas": [],
            }
            for p in range(3)
        ],
    }
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_keyed(broker: Broker, codec: str) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"kafka-python-keyed-{codec}"
    label = f"kp-{codec}"
    create_topic(bootstrap, topic, PARTITIONS)
    messages = make_messages(label, PER_CODEC)
    deliveries = kafka_python_produce(bootstrap, topic, messages, compression=codec)
    consumed = kafka_python_consume(bootstrap, topic, PARTITIONS, len(messages))
    marks = watermarks(bootstrap, topic, PARTITIONS)
    assert {p: low for p, (low, _) in marks.items()} == dict.fromkeys(range(PARTITIONS), 0)
    verify_log(messages, deliveries, consumed, {p: high for p, (_, high) in marks.items()}, label)
    assert_codec_used(broker.data_dir, topic, codec)


def test_offsets_for_times(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    base = (int(time.time() * 1000) // 1000 - 3600) * 1000
    messages = make_messages("kp-time", 1500, num_keys=40, base_timestamp=base, step_ms=10)
    deliveries = kafka_python_produce(bootstrap, topic, messages, compression="gzip")
    batches = len(stored_batches(broker.data_dir, topic))
    assert batches * 10 <= len(messages), f"{batches} batches: the lookups must also land inside batches"
    timelines = partition_timelines(messages, deliveries)
    assert sorted(timelines) == [0, 1]
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        for partition, timeline in timelines.items():
            tp = kafka.TopicPartition(topic, partition)
            for timestamp in time_queries(timeline):
                answer = consumer.offsets_for_times({tp: timestamp})[tp]
                expected = expected_offset_for_time(timeline, timestamp)
                if expected is None:
                    assert answer is None, (partition, timestamp)
                else:
                    assert (answer.offset, answer.timestamp) == expected, (partition, timestamp)
            assert consumer.beginning_offsets([tp]) == {tp: 0}
            assert consumer.end_offsets([tp]) == {tp: len(timeline)}
    finally:
        consumer.close()


def test_delete_records(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1, {"segment.bytes": "16384"})
    messages = make_messages("kp-del", 1000)
    # batches must fit a segment (else RECORD_LIST_TOO_LARGE, as in Kafka)
    deliveries = kafka_python_produce(bootstrap, topic, messages, batch_bytes=8192)
    assert [deliveries[m.seq].offset for m in messages] == list(range(1000))
    tp = kafka.TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({tp: 400})
        assert result == {tp: {"partition_index": 0, "low_watermark": 400, "error_code": 0}}
        assert watermarks(bootstrap, topic, 1) == {0: (400, 1000)}
        with pytest.raises(kafka.errors.OffsetOutOfRangeError):
            admin.delete_records({tp: 1001})
        assert watermarks(bootstrap, topic, 1) == {0: (400, 1000)}
    finally:
        admin.close()

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 600 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
        assert got == [(400 + i, m.value) for i, m in enumerate(messages[400:])]
        # a position below the log start offset is out of range: reset to the new start
        consumer.seek(tp, 10)
        first = []
        deadline = time.monotonic() + 30
        while not first and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=1).values():
                first.extend(r.offset for r in records)
        assert first == [400]
    finally:
        consumer.close()


def test_large_records_through_small_fetch_limits(broker: Broker, topic: str) -> None:
    """Records near the 1 MB default limit round trip, also when the consumer's fetch limits are far below
    their size: the first batch of a fetch is always returned whole (KIP-74)."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    values = [bytes([i]) * (900_000 + i) for i in range(3)]
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=False, max_request_size=2_000_000, linger_ms=0
    )
    try:
        offsets = [producer.send(topic, value=v, partition=0).get(timeout=30).offset for v in values]
    finally:
        producer.close(timeout=10)
    assert offsets == [0, 1, 2]
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, fetch_max_bytes=1024, max_partition_fetch_bytes=1024
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    assert got == list(enumerate(values))
