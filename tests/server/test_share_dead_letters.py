"""Dead-letter topics of share groups (KIP-1191) with confluent-kafka's ``ShareConsumer``, one broker for
the module:

- a REJECTed record is copied once onto the group's dead-letter topic, with its key, value and headers
  (``errors.deadletterqueue.copy.record.enable=true``) and Kafka's ``__dlq.errors.*`` context headers;
- a record RELEASEd up to ``share.delivery.count.limit`` is copied once, headers only (the default), and
  never delivered again;
- a missing dead-letter topic is created when the broker allows it
  (``errors.deadletterqueue.auto.create.topics.enable=true``) and its name has the ``dlq.`` prefix;
  otherwise the record waits (ARCHIVING), and is copied once the topic exists;
- a record too large for the dead-letter topic's ``max.message.bytes`` is copied with its context headers
  alone.

Each group starts at the log's start (``share.auto.offset.reset=earliest``), so no primer is needed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.dead_letters import header_map, read_topic, set_group_configs
from tests.support.share_groups import value_of

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "offsets.topic.num.partitions": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "errors.deadletterqueue.auto.create.topics.enable": True,
    }
    with Broker(config) as b:
        yield b


def _topics(broker: Broker, *names: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(n, 1, 1, config=config or {}) for n in names]).values():
        future.result(10)


def _consumer(broker: Broker, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    return consumer


def _group(broker: Broker, dlq: str, **configs: Any) -> str:
    group = f"g-{uuid.uuid4().hex[:8]}"
    keys = {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq}
    set_group_configs(broker.bootstrap_servers, group, {**keys, **{k: str(v) for k, v in configs.items()}})
    return group


def _serve(
    consumer: ShareConsumer, deadline: float, until: bytes, act: dict[bytes, AcknowledgeType]
) -> list[Message]:
    """Poll, acknowledging each record as ``act`` says (ACCEPT otherwise), until ``until`` came."""
    got: list[Message] = []
    while not any(value_of(m) == until for m in got):
        assert time.monotonic() < deadline, f"{until!r} never came"
        for m in consumer.poll(0.5):
            got.append(m)
            consumer.acknowledge(m, act.get(value_of(m), AcknowledgeType.ACCEPT))
        consumer.commit_sync()
    return got


def test_rejected_record_is_copied_once_with_key_value_and_headers(broker: Broker) -> None:
    topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq.q-{uuid.uuid4().hex[:8]}"
    _topics(broker, topic, dlq)
    group = _group(broker, dlq, **{"errors.deadletterqueue.copy.record.enable": "true"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"ok-1", key=b"k1")
    producer.produce(topic, b"bad", key=b"k2", headers=[("trace", b"t-1")])
    producer.produce(topic, b"ok-2", key=b"k3")
    producer.flush(10)
    consumer = _consumer(broker, group, topic)
    deadline = time.monotonic() + 30
    got = _serve(consumer, deadline, b"ok-2", {b"bad": AcknowledgeType.REJECT})
    consumer.close()
    bad = next(m for m in got if value_of(m) == b"bad")
    copies = read_topic(broker.bootstrap_servers, dlq, 1, deadline)
    assert [(m.key(), m.value()) for m in copies] == [(b"k2", b"bad")]
    assert copies[0].headers() == [
        ("trace", b"t-1"),
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", b"0"),
        ("__dlq.errors.offset", str(bad.offset()).encode()),
        ("__dlq.errors.group", group.encode()),
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"rejected by a consumer"),
    ]


def test_delivery_limit_by_release_is_copied_once_headers_only(broker: Broker) -> None:
    topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq.q-{uuid.uuid4().hex[:8]}"
    _topics(broker, topic, dlq)
    group = _group(broker, dlq, **{"share.delivery.count.limit": 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"poison", key=b"k")
    producer.flush(10)
    consumer = _consumer(broker, group, topic)
    deadline = time.monotonic() + 30
    deliveries: list[int | None] = []
    while len(deliveries) < 2:  # released twice: the second time reaches the limit
        got = _serve(consumer, deadline, b"poison", {b"poison": AcknowledgeType.RELEASE})
        deliveries += [m.delivery_count() for m in got if value_of(m) == b"poison"]
    producer.produce(topic, b"after")
    producer.flush(10)
    later = _serve(consumer, deadline, b"after", {})
    consumer.close()
    assert deliveries == [1, 2]
    assert [value_of(m) for m in later] == [b"after"]  # never delivered again
    copies = read_topic(broker.bootstrap_servers, dlq, 1, deadline)
    assert [(m.key(), m.value()) for m in copies] == [(None, None)]
    headers = header_map(copies[0])
    assert headers["__dlq.errors.delivery.count"] == b"2"
    assert headers["__dlq.errors.message"] == b"delivery count limit reached"
    assert headers["__dlq.errors.offset"] == b"0"


def test_missing_dead_letter_topic_keeps_the_record_until_it_exists(broker: Broker) -> None:
    topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"parked-{uuid.uuid4().hex[:8]}"  # no dlq. prefix: not created
    _topics(broker, topic)
    group = _group(broker, dlq)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"bad")
    producer.flush(10)
    consumer = _consumer(broker, group, topic)
    deadline = time.monotonic() + 30
    _serve(consumer, deadline, b"bad", {b"bad": AcknowledgeType.REJECT})
    _topics(broker, dlq)
    producer.produce(topic, b"next")  # the next request of the share-partition copies it
    producer.flush(10)
    _serve(consumer, deadline, b"next", {})
    consumer.close()
    copies = read_topic(broker.bootstrap_servers, dlq, 1, deadline)
    assert [header_map(m)["__dlq.errors.offset"] for m in copies] == [b"0"]
    assert f"dead-letter topic {dlq} does not exist (not created: its name lacks" in broker.log_tail(400)


def test_missing_dead_letter_topic_with_the_prefix_is_created(broker: Broker) -> None:
    topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq.q-{uuid.uuid4().hex[:8]}"
    _topics(broker, topic)
    group = _group(broker, dlq)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"bad")
    producer.produce(topic, b"end")
    producer.flush(10)
    consumer = _consumer(broker, group, topic)
    deadline = time.monotonic() + 30
    _serve(consumer, deadline, b"end", {b"bad": AcknowledgeType.REJECT})
    consumer.close()
    copies = read_topic(broker.bootstrap_servers, dlq, 1, deadline)
    assert [header_map(m)["__dlq.errors.offset"] for m in copies] == [b"0"]
    assert f"created dead-letter topic {dlq}" in broker.log_tail(400)


def test_copy_too_large_for_the_dead_letter_topic_keeps_its_context_headers(broker: Broker) -> None:
    topic, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq.q-{uuid.uuid4().hex[:8]}"
    _topics(broker, topic)
    _topics(broker, dlq, config={"max.message.bytes": "2000"})
    group = _group(broker, dlq, **{"errors.deadletterqueue.copy.record.enable": "true"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"x" * 5000, key=b"big")
    producer.produce(topic, b"end")
    producer.flush(10)
    consumer = _consumer(broker, group, topic)
    deadline = time.monotonic() + 30
    _serve(consumer, deadline, b"end", {b"x" * 5000: AcknowledgeType.REJECT})
    consumer.close()
    copies = read_topic(broker.bootstrap_servers, dlq, 1, deadline)
    assert [(m.key(), m.value(), header_map(m)["__dlq.errors.offset"]) for m in copies] == [
        (None, None, b"0")
    ]
