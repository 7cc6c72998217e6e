"""Internal topics: clients can see __consumer_offsets but can neither write to it nor delete it."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidelog.testing import Broker


def _make_offsets_topic(bootstrap: str) -> None:
    """A simple (group-less) commit creates __consumer_offsets through FindCoordinator."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("internal-probe", b"x")
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("internal-probe", 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def test_internal_topic_cannot_be_deleted_or_written(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    _make_offsets_topic(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics

    future = admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"]
    with pytest.raises(KafkaException) as raised:
        future.result(15)
    assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["__consumer_offsets"].partitions) == 50

    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    producer.produce("__consumer_offsets", b"junk", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(10)
    assert len(reports) == 1
    assert reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_EXCEPTION

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition("internal-probe", 0)], timeout=10)
    finally:
        consumer.close()
    assert committed[0].offset == 1
