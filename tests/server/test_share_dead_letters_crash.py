"""Dead letters across broker crashes (kill -9): each dead-lettered record is copied exactly once.

1. The group's dead-letter topic is missing: 20 REJECTed records wait in ARCHIVING (persisted). The broker
   is SIGKILLed and restarted; the topic is created and copies of the first 10 are written to it as the
   broker writes them (as if it had died after their chunk): the broker copies only the other 10.
2. 40 more records are REJECTed and the broker is SIGKILLed as soon as the consumer's acknowledgements are
   committed, while it copies them; after the restart every one of the 60 is in the topic exactly once.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.dead_letters import header_map, read_topic, set_group_configs
from tests.support.share_groups import value_of

from tidelog.coordinator.share.dead_letter import context_headers
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]


def _consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])
    return consumer


def _reject_until(consumer: ShareConsumer, until: bytes, deadline: float) -> list[Message]:
    """REJECT every record but ``until`` (ACCEPTed), committing, until ``until`` came; the rejected ones."""
    rejected: list[Message] = []
    done = False
    while not done:
        assert time.monotonic() < deadline, f"{until!r} never came"
        for m in consumer.poll(0.5):
            done = done or value_of(m) == until
            consumer.acknowledge(
                m, AcknowledgeType.ACCEPT if value_of(m) == until else AcknowledgeType.REJECT
            )
            if value_of(m) != until:
                rejected.append(m)
        consumer.commit_sync()
    return rejected


def _produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    for value in values:
        producer.produce(topic, value, key=value)
    producer.flush(10)


def _close(consumer: ShareConsumer) -> None:
    with contextlib.suppress(KafkaException):
        consumer.close()


def test_dead_letters_are_copied_exactly_once_across_kill_9() -> None:
    config = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1}
    with Broker(config) as broker:
        bootstrap = broker.bootstrap_servers
        topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq.q-{uuid.uuid4().hex[:8]}"
        group = f"g-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        set_group_configs(
            bootstrap,
            group,
            {
                "share.auto.offset.reset": "earliest",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.copy.record.enable": "true",
            },
        )
        deadline = time.monotonic() + 120
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        _produce(producer, topic, [b"r%02d" % i for i in range(20)] + [b"end-a"])
        consumer = _consumer(bootstrap, group, topic)
        first = _reject_until(consumer, b"end-a", deadline)
        assert len(first) == 20
        broker.kill()
        broker.restart()
        _close(consumer)
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(dlq, 1, 1)])[dlq].result(10)
        forger = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for m in first[:10]:
            forged = context_headers(group, topic, 0, m.offset() or 0, 1, True)
            forger.produce(dlq, m.value(), key=m.key(), headers=list(forged))
        forger.flush(10)

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        second_values = [b"s%02d" % i for i in range(40)]
        _produce(producer, topic, [*second_values, b"end-b"])
        consumer = _consumer(bootstrap, group, topic)
        second = _reject_until(consumer, b"end-b", deadline)
        assert sorted(value_of(m) for m in second) == second_values
        broker.kill()  # while (or just after) the broker copies them
        broker.restart()
        _close(consumer)
        bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        _produce(producer, topic, [b"end-c"])
        consumer = _consumer(bootstrap, group, topic)
        assert _reject_until(consumer, b"end-c", deadline) == []  # nothing rejected came again
        consumer.close()

        copies = read_topic(bootstrap, dlq, 60, deadline)
        offsets = Counter(int(header_map(m)["__dlq.errors.offset"]) for m in copies)  # type: ignore[call-overload]
        expected = {m.offset() for m in first + second}
        assert set(offsets) == expected
        assert [o for o, n in offsets.items() if n > 1] == []
        by_offset = {int(header_map(m)["__dlq.errors.offset"]): m for m in copies}  # type: ignore[call-overload]
        assert all(by_offset[m.offset() or 0].value() == m.value() for m in first + second)
