"""Helpers for the compaction tests against a real broker: produce keyed records to partition 0, read
the partition back from the beginning, look at the cleaner's checkpoint and the active segment."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest
from tests.support.kafka_workload import GROUP_ID_UNUSED

from tidelog.protocol import TopicPartition
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE
from tidelog.testing import Broker

Record = tuple[int, bytes | None, bytes | None]


def producer(broker: Broker, **extra: object) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": "all",
            "linger.ms": 1,
            "batch.num.messages": 10,
            "enable.idempotence": False,
            "log_level": 3,
            **extra,
        }
    )


def produce(broker: Broker, topic: str, items: list[tuple[bytes | None, bytes | None]]) -> list[Record]:
    """Produce (key, value) pairs to partition 0 in order; returns (offset, key, value) as acknowledged."""
    client = producer(broker)
    acked: list[Record] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.key(), msg.value()))

    for key, value in items:
        while True:
            try:
                client.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                client.poll(0.05)
    assert client.flush(60) == 0
    assert not errors, errors[:3]
    return sorted(acked)


def read_all(broker: Broker, topic: str) -> list[Record]:
    """Every record of partition 0 from the beginning to the high watermark."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        tp = confluent_kafka.TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=20)
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        out: list[Record] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            position = consumer.position([tp])[0].offset
            if (out and out[-1][0] + 1 >= high) or (position >= 0 and position >= high):
                break
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                assert message.error() is None, message.error()
                out.append((message.offset(), message.key(), message.value()))
        else:
            pytest.fail(f"could not read {topic} up to {high}")
        return out
    finally:
        consumer.close()


def cleaner_checkpoint(broker: Broker, topic: str) -> int | None:
    return read_offsets_checkpoint(broker.data_dir / CLEANER_OFFSET_CHECKPOINT_FILE).get(
        TopicPartition(topic, 0)
    )


def active_base(broker: Broker, topic: str) -> int:
    return max(int(p.name.split(".")[0]) for p in Path(broker.data_dir, f"{topic}-0").glob("*.log"))


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.05)


def wait_cleaned(broker: Broker, topic: str) -> int:
    """Wait until the cleaner has cleaned up to the active segment; returns that boundary."""
    wait_for(lambda: cleaner_checkpoint(broker, topic) == active_base(broker, topic), f"{topic} is cleaned")
    return active_base(broker, topic)


def compacted(acked: list[Record], boundary: int) -> list[Record]:
    last = {key: offset for offset, key, _ in acked if offset < boundary}
    return [r for r in acked if r[0] >= boundary or last[r[1]] == r[0]]
