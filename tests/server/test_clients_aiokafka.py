"""aiokafka 0.14 against a real tidelog broker.

- Metadata (admin ``describe_topics``, consumer ``partitions_for_topic``): node 1 leads every partition.
- 100,000 keyed messages with headers, 20,000 per codec (none, gzip, snappy, lz4, zstd) over 4 partitions:
  every send future's (partition, offset) holds exactly that message, offsets are 0..n-1 per partition,
  production order and key stickiness hold, and the segment files hold batches of that codec.
- ``offsets_for_times`` gives the exact (offset, timestamp) of the first record at or after the timestamp,
  also inside multi-record batches, and None past the end; ``beginning_offsets`` / ``end_offsets``.
- DeleteRecords (admin ``delete_records``) moves the log start offset; consuming from the beginning starts
  there and a position below it is reset to it (``auto_offset_reset="earliest"``).

Consumers use ``group_id=None`` and ``assign()``.
"""

from __future__ import annotations

import time
from typing import Any

import aiokafka
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from tests.support.kafka_workload import (
    CODECS,
    aiokafka_consume,
    aiokafka_produce,
    assert_codec_used,
    expected_offset_for_time,
    make_messages,
    partition_timelines,
    run_async,
    stored_batches,
    time_queries,
    verify_log,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

PARTITIONS = 4
PER_CODEC = 20_000


async def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()
    assert [tuple(row[:2]) for row in response.topic_errors] == [(topic, 0)]


async def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in range(partitions)]
        low, high = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: (low[tp], high[tp]) for tp in tps}


def test_metadata_round_trip(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers

    async def scenario() -> None:
        await create_topic(bootstrap, topic, 3)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            described = await admin.describe_topics([topic])
            listed = await admin.list_topics()
            cluster = await admin.describe_cluster()
        finally:
            await admin.close()
        assert topic in listed
        assert cluster["controller_id"] == 1
        assert cluster["brokers"] == [{"node_id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]
        (entry,) = described
        assert entry["error_code"] == 0
        assert entry["topic"] == topic
        assert entry["is_internal"] is False
        assert [
            (p["error_code"], p["partition"], p["leader"], p["replicas"], p["isr"])
            for p in entry["partitions"]
        ] == [(0, index, 1, [1], [1]) for index in range(3)]
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await consumer.start()
        try:
            assert topic in await consumer.topics()
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            assert await consumer.position(aiokafka.TopicPartition(topic, 0)) == 0
            assert consumer.partitions_for_topic(topic) == {0, 1, 2}
        finally:
            await consumer.stop()

    run_async(scenario(), 60)


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_keyed(broker: Broker, codec: str) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"aiokafka-keyed-{codec}"
    label = f"ak-{codec}"
    messages = make_messages(label, PER_CODEC)

    async def scenario() -> tuple[Any, Any, Any]:
        await create_topic(bootstrap, topic, PARTITIONS)
        deliveries = await aiokafka_produce(bootstrap, topic, messages, compression=codec)
        consumed = await aiokafka_consume(bootstrap, topic, PARTITIONS, len(messages))
        return deliveries, consumed, await watermarks(bootstrap, topic, PARTITIONS)

    deliveries, consumed, marks = run_async(scenario())
    assert {p: low for p, (low, _) in marks.items()} == dict.fromkeys(range(PARTITIONS), 0)
    verify_log(messages, deliveries, consumed, {p: high for p, (_, high) in marks.items()}, label)
    assert_codec_used(broker.data_dir, topic, codec)


def test_offsets_for_times(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    base = (int(time.time() * 1000) // 1000 - 3600) * 1000
    messages = make_messages("ak-time", 1500, num_keys=40, base_timestamp=base, step_ms=10)

    async def scenario() -> None:
        await create_topic(bootstrap, topic, 2)
        deliveries = await aiokafka_produce(bootstrap, topic, messages, compression="snappy")
        batches = len(stored_batches(broker.data_dir, topic))
        assert batches * 10 <= len(messages), f"{batches} batches: lookups must also land inside batches"
        timelines = partition_timelines(messages, deliveries)
        assert sorted(timelines) == [0, 1]
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await consumer.start()
        try:
            for partition, timeline in timelines.items():
                tp = aiokafka.TopicPartition(topic, partition)
                for timestamp in time_queries(timeline):
                    answer = (await consumer.offsets_for_times({tp: timestamp}))[tp]
                    expected = expected_offset_for_time(timeline, timestamp)
                    if expected is None:
                        assert answer is None, (partition, timestamp)
                    else:
                        assert (answer.offset, answer.timestamp) == expected, (partition, timestamp)
                assert await consumer.beginning_offsets([tp]) == {tp: 0}
                assert await consumer.end_offsets([tp]) == {tp: len(timeline)}
        finally:
            await consumer.stop()

    run_async(scenario(), 120)


def test_delete_records(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    messages = make_messages("ak-del", 1000)
    tp = aiokafka.TopicPartition(topic, 0)

    async def scenario() -> None:
        await create_topic(bootstrap, topic, 1, {"segment.bytes": "16384"})
        # batches must fit a segment (else RECORD_LIST_TOO_LARGE, as in Kafka)
        deliveries = await aiokafka_produce(bootstrap, topic, messages, batch_bytes=8192)
        assert [deliveries[m.seq].offset for m in messages] == list(range(1000))
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            assert await admin.delete_records({tp: RecordsToDelete(before_offset=400)}) == {tp: 400}
        finally:
            await admin.close()
        assert await watermarks(bootstrap, topic, 1) == {0: (400, 1000)}

        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[tuple[int, bytes | None]] = []
            deadline = time.monotonic() + 30
            while len(got) < 600 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.offset, r.value) for r in records)
            assert got == [(400 + i, m.value) for i, m in enumerate(messages[400:])]
            # a position below the log start offset is out of range: reset to the new start
            consumer.seek(tp, 10)
            first: list[int] = []
            deadline = time.monotonic() + 30
            while not first and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200, max_records=1)).values():
                    first.extend(r.offset for r in records)
            assert first == [400]
        finally:
            await consumer.stop()

    run_async(scenario(), 120)
