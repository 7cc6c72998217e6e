"""``share.acquire.mode`` (KIP-1206) with confluent-kafka's ``ShareConsumer`` against one broker: a producer
batch of 1,000 records and a consumer asking ``max.poll.records=100``. batch_optimized (the default) acquires
the whole batch in one fetch, so one poll delivers all 1,000; record_limit delivers at most 100 a poll."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.support.share_groups import value_of

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

RECORDS = 1000
POLL_RECORDS = 100


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker({"offsets.topic.num.partitions": 1}) as b:
        yield b


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    """A one-partition topic holding one producer batch of ``RECORDS`` records."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "linger.ms": 60_000,
            "batch.num.messages": RECORDS,
            "batch.size": 1 << 20,
        }
    )
    for i in range(RECORDS):
        producer.produce(name, b"r%04d" % i)
    assert producer.flush(10) == 0
    return name


def _group(broker: Broker, **configs: str) -> str:
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in {"share.auto.offset.reset": "earliest", **configs}.items()
    ]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)
    return group


def _polls(broker: Broker, group: str, topic: str) -> list[list[bytes]]:
    """What each non-empty poll of one consumer delivers until it has every record."""
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": group,
        "max.poll.records": POLL_RECORDS,
    }
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    polls: list[list[bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while sum(len(p) for p in polls) < RECORDS and time.monotonic() < deadline:
            got = [value_of(m) for m in consumer.poll(0.5) if m.error() is None]
            if got:
                polls.append(got)
    finally:
        consumer.close()
    return polls


def test_batch_optimized_delivers_the_whole_batch_in_one_poll(broker: Broker, topic: str) -> None:
    polls = _polls(broker, _group(broker), topic)
    assert polls == [[b"r%04d" % i for i in range(RECORDS)]]


def test_record_limit_delivers_at_most_max_poll_records(broker: Broker, topic: str) -> None:
    polls = _polls(broker, _group(broker, **{"share.acquire.mode": "record_limit"}), topic)
    assert [value for poll in polls for value in poll] == [b"r%04d" % i for i in range(RECORDS)]
    assert max(len(poll) for poll in polls) <= POLL_RECORDS
    assert len(polls) >= RECORDS // POLL_RECORDS
