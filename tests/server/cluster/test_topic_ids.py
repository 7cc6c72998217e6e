"""A topic deleted and created again while a broker was down: the broker's old log (another topic id, or a
partition it no longer holds) is deleted when it starts, never served as the new topic's data."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidelog.testing import cluster

pytestmark = pytest.mark.clients


def _create(bootstrap: str, replicas: list[int]) -> None:
    """The topic with one partition on ``replicas`` (kafka-python sends explicit assignments)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_topics({"again": {"assignments": {0: replicas}}}, raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [0]
    finally:
        admin.close()


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce("again", value)
    assert producer.flush(30) == 0


def _read(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("again", 0, 0)])
    values = []
    while True:
        message = consumer.poll(10)
        assert message is not None, "no end of partition"
        if message.error():
            break
        values.append(message.value())
    consumer.close()
    return values


def test_a_topic_recreated_while_a_broker_was_down(tmp_path: Path) -> None:
    with cluster(3, data_dir=tmp_path / "cluster", config={"offsets.topic.replication.factor": 2}) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _create(bootstrap, [3, 1, 2])
        running.wait_for(
            lambda: len(admin.list_topics("again", timeout=5).topics["again"].partitions[0].isrs) == 3,
            "ISR 3",
        )
        _produce(bootstrap, [b"old-%d" % i for i in range(20)])
        old_dir = running.broker(3).data_dir / "again-0"
        assert old_dir.is_dir()
        running.kill(3)
        # until its ZooKeeper session expires broker 3 is still listed, and kafka-python's admin gives up
        # on the first refused connection to it
        running.wait_for(lambda: 3 not in admin.list_topics(timeout=5).brokers, "broker 3 to leave")
        admin.delete_topics(["again"], operation_timeout=30)["again"].result(40)
        running.wait_for(lambda: "again" not in admin.list_topics(timeout=5).topics, "the topic to go")
        _create(bootstrap, [1, 2])
        _produce(bootstrap, [b"new-%d" % i for i in range(5)])
        running.start_broker(3)
        running.wait_for(lambda: not old_dir.exists(), "broker 3 to delete the old topic's log")
        assert _read(bootstrap) == [b"new-%d" % i for i in range(5)]
        partition = admin.list_topics("again", timeout=5).topics["again"].partitions[0]
        assert sorted(partition.replicas) == [1, 2]
