"""Produce and read back with each client library, given that library's own settings (security included):
the round trips the security tests run over every kind of listener.

Each returns the values read, in order, so a test asserts exactly what came back; a consumer stops at
``count`` values or after 30 s, whichever comes first.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aiokafka
import confluent_kafka

__all__ = ["aiokafka_round_trip", "confluent_consume", "confluent_produce"]


def confluent_produce(settings: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({**settings, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=str(i).encode())
    assert producer.flush(30) == 0


def confluent_consume(
    settings: dict[str, Any], topic: str, count: int, *, group_id: str | None = None
) -> list[bytes]:
    """Subscribe (in ``group_id``, else a fresh group) and read ``count`` values from the earliest."""
    consumer = confluent_kafka.Consumer(
        {**settings, "group.id": group_id or f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message.value())
        return got
    finally:
        consumer.close()


def aiokafka_round_trip(
    settings: dict[str, Any], topic: str, values: list[bytes], *, group_id: str | None = None
) -> list[bytes]:
    """Send ``values`` one by one (each acknowledged), then read as many back from the earliest."""

    async def scenario() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            topic, auto_offset_reset="earliest", group_id=group_id, **settings
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(30):
                while len(got) < len(values):
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [r.value for records in batches.values() for r in records if r.value is not None]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(scenario())
