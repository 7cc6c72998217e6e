"""Real Kafka consumers (confluent-kafka, kafka-python, aiokafka) reading one partition from a broker
address, from offset 0 without a consumer group, until ``count`` records arrived.

Each returns ``ConsumedRecord`` tuples in delivery order with the client's view of every field, so tests
compare what a user of that client would see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, NamedTuple

LOG_APPEND_TIME = "LogAppendTime"
CREATE_TIME = "CreateTime"


class ConsumedRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: str


def consume_confluent_kafka(
    bootstrap: str, topic: str, count: int, timeout: float = 20.0
) -> list[ConsumedRecord]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "interop",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    got: list[ConsumedRecord] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        message: Any
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            kind, timestamp = message.timestamp()
            got.append(
                ConsumedRecord(
                    message.offset(),
                    message.key(),
                    message.value(),
                    tuple(message.headers() or ()),
                    timestamp,
                    LOG_APPEND_TIME if kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME else CREATE_TIME,
                )
            )
    finally:
        consumer.close()
    return got


def consume_kafka_python(
    bootstrap: str, topic: str, count: int, timeout: float = 20.0
) -> list[ConsumedRecord]:
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    got: list[ConsumedRecord] = []
    try:
        partition = kafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                got.extend(_from_python_client(m) for m in messages)
    finally:
        consumer.close()
    return got


def consume_aiokafka(bootstrap: str, topic: str, count: int, timeout: float = 20.0) -> list[ConsumedRecord]:
    import aiokafka

    async def run() -> list[ConsumedRecord]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        got: list[ConsumedRecord] = []
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(_from_python_client(m) for m in messages)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def _from_python_client(message: Any) -> ConsumedRecord:
    return ConsumedRecord(
        message.offset,
        message.key,
        message.value,
        tuple((k, v) for k, v in message.headers),
        message.timestamp,
        LOG_APPEND_TIME if message.timestamp_type == 1 else CREATE_TIME,
    )


CONSUMERS: dict[str, Callable[[str, str, int], list[ConsumedRecord]]] = {
    "confluent-kafka": consume_confluent_kafka,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}
